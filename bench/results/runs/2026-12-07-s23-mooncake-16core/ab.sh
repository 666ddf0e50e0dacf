#!/usr/bin/env bash
# Twenty-third session: the work bound's allowance variants on the Mooncake rows, on the 16 cores
# of a GPU host, four replays at a time, each an invocation of its own. gpu-bin/kvcascade is the
# committed build (20bb974); gpu-bin/kvcascade-exp is it with switches.patch (temporary switches,
# never committed; with no switch set it is the committed code). Variants:
#   base:   gpu-bin/kvcascade
#   floor2: KVC_EXP_ALLOW_CAP=0.05 KVC_EXP_ALLOW_FLOOR=2 (allowance = min(slack + lead,
#           max(5% of the mean work, 2 mean requests))), without the queued-prefill correction
#   lead1:  KVC_EXP_LEAD_CAP=1 (the lead allowance at most one mean request)
#   hor300, hor600: KVC_EXP_MAX_HORIZON_S=300|600 (PoolConfig::routed_work_max_horizon 300 or
#           600 s instead of 120: the routed-work signal's horizon stretched further)
#   wb105:  KVC_EXP_WORK_BOUND=1.05 (KvCascadePolicyConfig::work_bound_factor 1.05 instead of 1.1)
# ROUNDS: a list of round names below. With gpu-bin (and the trace files, see run.sh) carried:
#   OUT=... ROUNDS="h1 h2 a h3 h4" bash bench/results/runs/2026-12-07-s23-mooncake-16core/ab.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT/logs"
one() {  # profile (h200|a10g), variant, tag
  local bin=gpu-bin/kvcascade-exp env=()
  case $2 in
    base) bin=gpu-bin/kvcascade ;;
    floor2) env=(KVC_EXP_ALLOW_CAP=0.05 KVC_EXP_ALLOW_FLOOR=2) ;;
    lead1) env=(KVC_EXP_LEAD_CAP=1) ;;
    hor300) env=(KVC_EXP_MAX_HORIZON_S=300) ;;
    hor600) env=(KVC_EXP_MAX_HORIZON_S=600) ;;
    wb105) env=(KVC_EXP_WORK_BOUND=1.05) ;;
  esac
  local args=(--sim-preset h200-llama3-8b --trace gpu-bin/mooncake-x4.jsonl) name=h200-x4
  [ "$1" = a10g ] && args=(--sim-preset a10g-llama3-8b --trace gpu-bin/mooncake-x1.jsonl --kv-host-memory-gb 32) name=a10g-x1
  env "${env[@]}" timeout "${LIMIT:-330}" $bin bench routing "${args[@]}" --replicas 16 --policy kvcascade \
    --out "$OUT/logs/$name-$2-$3.json" 2>&1 | grep -v '^  \[' >"$OUT/logs/$name-$2-$3.txt"
}
SECONDS=0
for round in ${ROUNDS:-h1 h2 a h3 h4}; do
  case $round in
    h1) one h200 base 1 & one h200 floor2 1 & one h200 lead1 1 & one h200 floor2 2 & ;;
    h2) one h200 lead1 2 & one h200 floor2 3 & one h200 base 2 & one h200 lead1 3 & ;;
    h3) one h200 base 3 & one h200 floor2 4 & one h200 lead1 4 & one h200 base 4 & ;;
    h4) one h200 floor2 5 & one h200 lead1 5 & one h200 floor2 6 & one h200 lead1 6 & ;;
    a) one a10g floor2 1 & one a10g floor2 2 & one a10g lead1 1 & one a10g lead1 2 & ;;
    a3) one a10g hor300 1 & one a10g hor300 2 & one a10g hor600 1 & one a10g hor600 2 & ;;
    h5) one h200 hor300 1 & one h200 hor600 1 & one h200 hor300 2 & one h200 hor600 2 & ;;
    h6) one h200 base 5 & one h200 hor600 3 & one h200 base 6 & one h200 hor600 4 & ;;
    h7) one h200 wb105 1 & one h200 wb105 2 & one h200 wb105 3 & one h200 wb105 4 & ;;
    h8) one h200 wb105 5 & one h200 wb105 6 & one h200 wb105 7 & one h200 wb105 8 & ;;
    a4) one a10g wb105 1 & one a10g wb105 2 & one a10g wb105 3 & one a10g wb105 4 & ;;
    a2) one a10g floor2 3 & one a10g base 3 & one a10g lead1 3 & one a10g base 4 & ;;
  esac
  wait
  echo "round $round done at $SECONDS s"
done
[ -n "${PAIRS:-}" ] && bash bench/results/runs/2026-12-07-s23-routers-16core/pairs-wb.sh
for f in "$OUT"/logs/*.json; do
  python3 -c "
import json,sys; r=json.load(open(sys.argv[1]))['results'][0]
print('%-28s hit %.1f%% max/mean %.3f p90 %.0f ms errors %d busy %.2f' % (sys.argv[2], 100*r['hit_ratio_vs_oracle'], r['work_max_over_mean'], r['ttft_ms']['p90'], r['errors'], r['busy']))" "$f" "$(basename "$f" .json)"
done | tee "$OUT/summary.txt"
tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$OUT/logs"
