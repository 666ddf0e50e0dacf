#!/usr/bin/env bash
# Twenty-eighth session: the ten §1 cells (kvcascade alone, 5,000 requests, seed 1 and CPU chat seed 2)
# on the 2-core VM, one at a time, from the repository root, with the build of the session's policy
# change at its 58-step sim grid (README.md).
d=bench/results/runs/2026-12-07-s28-mixed-fleet-vm  # from the repository root; build of the commit named in README.md
cell() {  # name preset mix rate seed
  build/cli/kvcascade bench routing --sim-preset "$2" --replicas 16 --requests 5000 \
    --mix "$3" --rate "$4" --seed "$5" --policy kvcascade --out "$d/cells/$1-s$5.json" 2>&1 |
    grep -v '^  \[' >"$d/cells/$1-s$5.txt"
  echo "$(date +%T) $1-s$5: $(grep -E '^[^ ]+ +kvcascade ' $d/cells/$1-s$5.txt | head -1)"
}
cell h200-chat h200-llama3-8b chat 200 1
cell cpu-chat cpu-llama3-8b chat 150 1
cell cpu-chat cpu-llama3-8b chat 150 2
cell h200-rl h200-llama3-8b rl 100 1
cell h200-mixed h200-llama3-8b mixed 100 1
cell cpu-rl cpu-llama3-8b rl 70 1
cell cpu-mixed cpu-llama3-8b mixed 70 1
cell a10g-chat a10g-llama3-8b chat 40 1
cell a10g-rl a10g-llama3-8b rl 20 1
cell a10g-mixed a10g-llama3-8b mixed 20 1
echo done
