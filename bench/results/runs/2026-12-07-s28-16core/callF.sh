#!/usr/bin/env bash
# Twenty-eighth session, device call F: callE.sh's first round (the mixed fleet with its
# baselines) with the committed build (the sim's predicted steps
# as a grid of 123, where call E's build had 58: a figure after 42 steps rather than from the
# start).   OUT=... bash bench/results/runs/2026-12-07-s28-16core/callF.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}
SECONDS=0
mkdir -p "$OUT/f"
fleet() {  # mix rate policy run
  timeout 200 gpu-bin/kvcascade bench routing --sim-preset h200-llama3-8b,a10g-llama3-8b \
    --replicas 16 --requests 5000 --mix "$1" --rate "$2" --seed 1 --policy "$3" \
    --out "$OUT/f/fleet-$1-$3-r$4.json" 2>&1 | grep -v '^  \[' >"$OUT/f/fleet-$1-$3-r$4.txt"
}
fleet chat 110 kvcascade 1 & fleet chat 110 kvcascade 2 &
fleet chat 110 sglang_cache_aware 1 & fleet chat 110 consistent_hash 1 &
wait
echo "round 1 done at $SECONDS s"
for f in "$OUT"/f/*.txt; do
  echo "$(basename "$f" .txt): $(grep -E '^[^ ]+ +(kvcascade|sglang_cache_aware|consistent_hash) ' "$f" | head -1)"
done | tee "$OUT/summary-f.txt"
tar czf "$OUT/f.tar.gz" -C "$OUT" f && rm -rf "${OUT:?}/f"
