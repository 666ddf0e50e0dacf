#!/usr/bin/env bash
# Twenty-sixth session, device call B (an H100 host's 16 cores), bf3db7f (gpu-bin/kvcascade;
# gpu-bin/kvcascade-base: beae173): issue 28 §1's ten cells with the new build (as
# ../2026-12-07-s24-cost-moves/cells.sh PART=all, four replays at a time), two A10G Mooncake runs
# in the first round, then the H200 Mooncake row, two runs of each build. gpu-bin as callA.sh.
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
gunzip -k gpu-bin/mooncake-x1.jsonl.gz gpu-bin/mooncake-x4.jsonl.gz
mkdir -p "$OUT/b"
cell() {  # name preset mix rate seed
  timeout 330 gpu-bin/kvcascade bench routing --sim-preset "$2" --replicas 16 --requests 5000 \
    --mix "$3" --rate "$4" --seed "$5" --policy kvcascade --out "$OUT/b/$1-s$5.json" 2>&1 |
    grep -v '^  \[' >"$OUT/b/$1-s$5.txt"
}
moon() {  # preset trace build run
  local k=gpu-bin/kvcascade; [ "$3" = base ] && k=gpu-bin/kvcascade-base
  local extra=(); [ "$1" = a10g-llama3-8b ] && extra=(--kv-host-memory-gb 32)
  timeout 300 "$k" bench routing --sim-preset "$1" --replicas 16 --trace "gpu-bin/$2" \
    --policy kvcascade "${extra[@]}" --out "$OUT/b/moon-${1%%-*}-$3-r$4.json" 2>&1 |
    grep -v '^  \[' >"$OUT/b/moon-${1%%-*}-$3-r$4.txt"
}
cell a10g-rl a10g-llama3-8b rl 20 1 & cell a10g-mixed a10g-llama3-8b mixed 20 1 &
moon a10g-llama3-8b mooncake-x1.jsonl new 1 & moon a10g-llama3-8b mooncake-x1.jsonl new 2 &
wait
stamp "round 1 done"
cell a10g-chat a10g-llama3-8b chat 40 1 & cell cpu-rl cpu-llama3-8b rl 70 1 &
cell cpu-chat cpu-llama3-8b chat 150 1 & cell cpu-chat cpu-llama3-8b chat 150 2 &
wait
stamp "round 2 done"
cell cpu-mixed cpu-llama3-8b mixed 70 1 & cell h200-rl h200-llama3-8b rl 100 1 &
cell h200-mixed h200-llama3-8b mixed 100 1 & cell h200-chat h200-llama3-8b chat 200 1 &
wait
stamp "round 3 done"
moon h200-llama3-8b mooncake-x4.jsonl new 1 & moon h200-llama3-8b mooncake-x4.jsonl base 1 &
moon h200-llama3-8b mooncake-x4.jsonl new 2 & moon h200-llama3-8b mooncake-x4.jsonl base 2 &
wait
stamp "round 4 done"
for f in "$OUT"/b/*.txt; do
  echo "$(basename "$f" .txt): $(grep -E '^[^ ]+ +kvcascade ' "$f" | head -1)"
done | tee "$OUT/summary-b.txt"
tar czf "$OUT/b.tar.gz" -C "$OUT" b && rm -rf "${OUT:?}/b"
