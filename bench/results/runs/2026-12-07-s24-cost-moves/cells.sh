#!/usr/bin/env bash
# Twenty-fourth session: issue 28 §1's target-table cells (as ../2026-12-07-s21-allow-cap/cells.sh)
# with kvcascade-exp (the committed source with switches.patch, in gpu-bin/) and the switches the
# caller exports (KVC_EXP_STICK=1, ...), outputs tagged TAG in DIR. PART=1, 2 or 3; PART=all runs
# every cell, four at a time (a host with 16 cores); else one at a time (the 2-core VM).
set -u
d=${DIR:-bench/results/runs/2026-12-07-s24-cost-moves}
k=${K:-gpu-bin/kvcascade-exp}
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
  all)
    run a10g-rl a10g-llama3-8b rl 20 1 & run a10g-mixed a10g-llama3-8b mixed 20 1 &
    run a10g-chat a10g-llama3-8b chat 40 1 & run cpu-rl cpu-llama3-8b rl 70 1 & wait
    run cpu-chat cpu-llama3-8b chat 150 1 & run cpu-chat cpu-llama3-8b chat 150 2 &
    run cpu-mixed cpu-llama3-8b mixed 70 1 & run h200-rl h200-llama3-8b rl 100 1 & wait
    run h200-mixed h200-llama3-8b mixed 100 1 & run h200-chat h200-llama3-8b chat 200 1 & wait ;;
esac
