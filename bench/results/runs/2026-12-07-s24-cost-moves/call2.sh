#!/usr/bin/env bash
# Twenty-fourth session, device call 2 (an H100 host's 16 cores; gpu-bin: kvcascade-exp = this
# session's tree with holders_keep_prefixes and holder_lead_bytes 2048 (the defaults it commits)
# plus switches3.patch, and the gzip'd Mooncake traces): both Mooncake rows with holders keeping
# their prefixes, and with the work bound's slack at 2 mean requests (KVC_EXP_SLACK; 4) or the
# routed-work horizon's most at 300 s (KVC_EXP_MAX_HORIZON_S; 120); then four one-against-four
# router pairs.
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
mkdir -p "$OUT/logs"
gunzip -k gpu-bin/mooncake-x1.jsonl.gz gpu-bin/mooncake-x4.jsonl.gz
a10g() {  # tag, then VAR=value switches
  local tag=$1; shift
  env "$@" timeout 330 gpu-bin/kvcascade-exp bench routing --sim-preset a10g-llama3-8b --replicas 16 \
    --trace gpu-bin/mooncake-x1.jsonl --policy kvcascade --kv-host-memory-gb 32 \
    --out "$OUT/logs/a10g-$tag.json" 2>&1 | grep -v '^  \[' >"$OUT/logs/a10g-$tag.txt"
}
h200() {
  local tag=$1; shift
  env "$@" timeout 200 gpu-bin/kvcascade-exp bench routing --sim-preset h200-llama3-8b --replicas 16 \
    --trace gpu-bin/mooncake-x4.jsonl --policy kvcascade \
    --out "$OUT/logs/h200-$tag.json" 2>&1 | grep -v '^  \[' >"$OUT/logs/h200-$tag.txt"
}
a10g keep-r1 & a10g keep-r2 & a10g slack2-r1 KVC_EXP_SLACK=2 & a10g hor300-r1 KVC_EXP_MAX_HORIZON_S=300 &
wait
stamp "round 1 done"
h200 keep-r1 & h200 keep-r2 & h200 keep-r3 & h200 slack2-r1 KVC_EXP_SLACK=2 &
wait
stamp "round 2 done"
# Issue 28 §2 with the rule: one against four routers, H200 rl mix, seed 1, 5,000 requests, as
# ../2026-12-07-s23-routers-16core/pairs.sh (pairs i and i+100 a round).
replay() {  # pair, routers
  timeout 120 gpu-bin/kvcascade-exp bench routing --replicas 16 --requests 5000 --mix rl --seed 1 \
    --policy kvcascade --routers "$2" >"$OUT/logs/rl-r$2-$1.txt" 2>&1
}
for i in 1 2; do
  replay "$i" 1 & replay "$i" 4 & replay $((i + 100)) 1 & replay $((i + 100)) 4 &
  wait
done
stamp "router pairs done"
for f in "$OUT"/logs/rl-r1-*.txt; do
  i=${f##*-}; i=${i%.txt}
  for n in 1 4; do
    g="$OUT/logs/rl-r$n-$i.txt"
    echo "pair $i routers $n: $(grep -E '^rl +kvcascade' "$g" | awk '{print $5, $6, $7, $9, $10, $11, $14}')"
  done
done | tee "$OUT/pairs-summary.txt"
for f in "$OUT"/logs/a10g-*.txt "$OUT"/logs/h200-*.txt; do
  echo "$(basename "$f" .txt): $(grep -E '^[^ ]+ +kvcascade ' "$f" | head -1)"
done | tee "$OUT/summary.txt"
tar czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
