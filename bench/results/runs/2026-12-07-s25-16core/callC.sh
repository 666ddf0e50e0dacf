#!/usr/bin/env bash
# Twenty-fifth session, device call C: NOT RUN (the device refused three starts and the session's
# device time ran out; the A10G comparison ran on the VM, ../2026-12-07-s25-lead-vm). Ready for a
# later session (an H100 host's 16 cores; gpu-bin: only kvcascade-exp =
# this session's tree with ../2026-12-07-s24-cost-moves/switches3.patch (the switches
# KVC_EXP_SLACK / LEAD / KEEP / LEAD_BYTES / WORK_BOUND / MAX_HORIZON_S; unset: the committed
# defaults), its libraries and the gzip'd Mooncake traces). Calls A and B left one run in four of
# each Mooncake row over 1.2x the mean work, the A10G row's always on its second replica (the
# holder of the hottest prefix). Is it the lead allowance (work_lead_factor: a replica holding
# more of the prompt than any other may exceed the work bound by that many tokens)? The A10G row,
# committed against KVC_EXP_LEAD=0, four runs each (two rounds of two and two, with --decisions),
# then the H200 chat@200 seed-2 cell with its baselines, then the H200 Mooncake row, two and
# two.
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
gunzip -k gpu-bin/mooncake-x1.jsonl.gz gpu-bin/mooncake-x4.jsonl.gz
a10g() {  # round, tag, then VAR=value switches
  local round=$1 tag=$2; shift 2
  mkdir -p "$OUT/$round/dec-$tag"
  env "$@" timeout 300 gpu-bin/kvcascade-exp bench routing --sim-preset a10g-llama3-8b \
    --replicas 16 --trace gpu-bin/mooncake-x1.jsonl --policy kvcascade --kv-host-memory-gb 32 \
    --decisions "$OUT/$round/dec-$tag" --out "$OUT/$round/a10g-$tag.json" 2>&1 |
    grep -v '^  \[' >"$OUT/$round/a10g-$tag.txt"
}
h200() {
  local round=$1 tag=$2; shift 2
  env "$@" timeout 120 gpu-bin/kvcascade-exp bench routing --sim-preset h200-llama3-8b \
    --replicas 16 --trace gpu-bin/mooncake-x4.jsonl --policy kvcascade \
    --out "$OUT/$round/h200-$tag.json" 2>&1 | grep -v '^  \[' >"$OUT/$round/h200-$tag.txt"
}
pack() {
  for f in "$OUT/$1"/*.txt; do
    echo "$1/$(basename "$f" .txt): $(grep -E '^[^ ]+ +kvcascade ' "$f" | head -1)"
  done | tee -a "$OUT/summary-c.txt"
  tar czf "$OUT/$1.tar.gz" -C "$OUT" "$1" && rm -rf "${OUT:?}/$1"
}
mkdir -p "$OUT/c1" "$OUT/c2" "$OUT/c3"
a10g c1 base-r1 & a10g c1 base-r2 & a10g c1 lead0-r1 KVC_EXP_LEAD=0 & a10g c1 lead0-r2 KVC_EXP_LEAD=0 &
wait
stamp "round 1 done"
pack c1
a10g c2 base-r3 & a10g c2 base-r4 & a10g c2 lead0-r3 KVC_EXP_LEAD=0 & a10g c2 lead0-r4 KVC_EXP_LEAD=0 &
wait
stamp "round 2 done"
pack c2
# The H200 chat@200 seed-2 cell (call B: TTFT p90 23.6 ms against a bound of 23.4, 0.8x the
# better baseline's p90 in the eleventh session's VM runs) with its baselines on this host.
chat() {
  timeout 100 gpu-bin/kvcascade-exp bench routing --sim-preset h200-llama3-8b --replicas 16 \
    --requests 5000 --mix chat --rate 200 --seed 2 --policy "$1" --out "$OUT/c4/chat-s2-$1.json" \
    2>&1 | grep -v '^  \[' >"$OUT/c4/chat-s2-$1.txt"
}
mkdir -p "$OUT/c4"
chat kvcascade & chat sglang_cache_aware & chat consistent_hash &
wait
stamp "chat cell done"
for f in "$OUT"/c4/*.txt; do
  echo "c4/$(basename "$f" .txt): $(grep -E '^[^ ]+ +[a-z_]+ +1 ' "$f" | head -1)"
done | tee -a "$OUT/summary-c.txt"
tar czf "$OUT/c4.tar.gz" -C "$OUT" c4 && rm -rf "${OUT:?}/c4"
h200 c3 base-r1 & h200 c3 base-r2 & h200 c3 lead0-r1 KVC_EXP_LEAD=0 & h200 c3 lead0-r2 KVC_EXP_LEAD=0 &
wait
stamp "round 3 done"
pack c3
