#!/usr/bin/env bash
# Twentieth session: the kvcascade policy's work bound at 1.05x the mean (work_bound_factor,
# router/policy/policy.h; 1.1, the default, kept). Measured with a temporary build reading it
# from KVC_WORK_BOUND (the rest of the build that of 589b846), not committed: at HEAD,
# KVC_WORK_BOUND is not read and these commands give the default's results. The Mooncake runs
# ran from a copy of this command under /tmp and were copied here. On the 2-core VM, nothing else running, from the repository root.
# PART=mooncake: the A10G Mooncake row with a 32 GB host tier (as
# ../2026-12-07-s20-queued-prefill/a10g.sh; $MOONCAKE as there), runs FIRST..LAST.
# PART=cells: issue 28 §1's table cells with kvcascade alone (as
# ../2026-12-07-s20-queued-prefill/cells.sh), and the CPU chat cell with both baselines.
set -u
d=bench/results/runs/2026-12-07-s20-work-bound
k=build/cli/kvcascade
if [ "${PART:-mooncake}" = mooncake ]; then
  [ -f /tmp/mooncake-x1.jsonl ] ||
    python3 bench/mooncake_trace.py "$MOONCAKE" /tmp/mooncake-x1.jsonl --time-scale 1
  for i in $(seq "${FIRST:-1}" "${LAST:-6}"); do
    $k bench routing --sim-preset a10g-llama3-8b --replicas 16 --trace /tmp/mooncake-x1.jsonl \
      --policy kvcascade --kv-host-memory-gb 32 --out "$d/a10g-x1-host32-run$i.json" 2>&1 |
      grep -v '^  \[' > "$d/a10g-x1-host32-run$i.txt"
  done
  exit 0
fi
run() {  # name preset mix rate seed [policies...]
  local name=$1 preset=$2 mix=$3 rate=$4 seed=$5; shift 5
  local tag=$name-s$seed${1:+-all}
  $k bench routing --sim-preset "$preset" --replicas 16 --requests 5000 --mix "$mix" \
    --rate "$rate" --seed "$seed" --policy ${1:-kvcascade} ${1:+sglang_cache_aware consistent_hash} \
    --out "$d/$tag.json" 2>&1 | grep -v '^  \[' > "$d/$tag.txt"
}
run h200-rl h200-llama3-8b rl 100 1
run h200-mixed h200-llama3-8b mixed 100 1
run h200-chat h200-llama3-8b chat 200 1
run a10g-rl a10g-llama3-8b rl 20 1
run a10g-mixed a10g-llama3-8b mixed 20 1
run a10g-chat a10g-llama3-8b chat 40 1
run cpu-rl cpu-llama3-8b rl 70 1
run cpu-mixed cpu-llama3-8b mixed 70 1
run cpu-chat cpu-llama3-8b chat 150 1
run cpu-chat cpu-llama3-8b chat 150 2
run cpu-chat cpu-llama3-8b chat 150 1 kvcascade
