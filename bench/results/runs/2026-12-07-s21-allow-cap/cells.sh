#!/usr/bin/env bash
# Twenty-first session: issue 28 §1's target-table cells with kvcascade alone (as
# ../2026-12-07-s20-queued-prefill/cells.sh; bounds from ../2026-12-06-s11-lead1/table.md) with the
# temporary switches set by the caller (see README.md), outputs tagged TAG. On the 2-core VM,
# nothing else running, from the repository root. PART=1, 2 or 3 as there.
set -u
d=${DIR:-bench/results/runs/2026-12-07-s21-allow-cap}  # DIR: another folder for the outputs
k=build/cli/kvcascade
run() {  # name preset mix rate seed
  $k bench routing --sim-preset "$2" --replicas 16 --requests 5000 --mix "$3" --rate "$4" \
    --seed "$5" --policy kvcascade --out "$d/$1-s$5-$TAG.json" 2>&1 | grep -v '^  \[' \
    > "$d/$1-s$5-$TAG.txt"
}
case "${PART:-1}" in
  1) run cpu-chat cpu-llama3-8b chat 150 1; run h200-rl h200-llama3-8b rl 100 1
     run cpu-rl cpu-llama3-8b rl 70 1; run cpu-chat cpu-llama3-8b chat 150 2 ;;
  2) run h200-mixed h200-llama3-8b mixed 100 1; run h200-chat h200-llama3-8b chat 200 1
     run cpu-mixed cpu-llama3-8b mixed 70 1 ;;
  3) run a10g-rl a10g-llama3-8b rl 20 1; run a10g-mixed a10g-llama3-8b mixed 20 1
     run a10g-chat a10g-llama3-8b chat 40 1 ;;
esac
