#!/usr/bin/env bash
# Twenty-eighth session, device call E (an H100 or H200 host's 16 cores). gpu-bin/kvcascade: this
# session's build (sim replicas publish their speed from the start, the work bound by kind of
# device, four reference steps per request in the costs); gpu-bin/kvcascade-s27: 426d0db.
#  1. The mixed fleet (8 H200 + 8 A10G sim replicas) with its baselines in the same call (issue 28
#     §1: TTFT p90 <= 0.8x the better of sglang_cache_aware and consistent_hash); 426d0db once.
#  2. The Mooncake rows with the new build (uniform fleets: the policy's change is inert there,
#     the replicas' step-model fits start from their predicted steps).
#  3. §3's router CPU at 2 KB and 400 KB against nginx (as ../2026-12-07-s27-16core/callD.sh).
# Four replays at a time.   OUT=... bash bench/results/runs/2026-12-07-s28-16core/callE.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}
nproc
SECONDS=0
mkdir -p "$OUT/e"
gunzip -kf gpu-bin/mooncake-x1.jsonl.gz gpu-bin/mooncake-x4.jsonl.gz
fleet() {  # mix rate policy run [binary]
  timeout 200 "${5:-gpu-bin/kvcascade}" bench routing --sim-preset h200-llama3-8b,a10g-llama3-8b \
    --replicas 16 --requests 5000 --mix "$1" --rate "$2" --seed 1 --policy "$3" \
    --out "$OUT/e/fleet-$1-$3-r$4.json" 2>&1 | grep -v '^  \[' >"$OUT/e/fleet-$1-$3-r$4.txt"
}
moon() {  # preset trace run
  local extra=(); [ "$1" = a10g-llama3-8b ] && extra=(--kv-host-memory-gb 32)
  timeout 280 gpu-bin/kvcascade bench routing --sim-preset "$1" --replicas 16 \
    --trace "gpu-bin/$2" --policy kvcascade "${extra[@]}" \
    --out "$OUT/e/moon-${1%%-*}-r$3.json" 2>&1 | grep -v '^  \[' >"$OUT/e/moon-${1%%-*}-r$3.txt"
}
fleet chat 110 kvcascade 1 & fleet chat 110 kvcascade 2 &
fleet chat 110 sglang_cache_aware 1 & fleet chat 110 consistent_hash 1 &
wait
echo "round 1 done at $SECONDS s"
fleet mixed 60 kvcascade 1 & fleet mixed 60 sglang_cache_aware 1 &
fleet chat 110 sglang_cache_aware 2 & fleet chat 110 kvcascade-s27 1 gpu-bin/kvcascade-s27 &
wait
echo "round 2 done at $SECONDS s"
moon a10g-llama3-8b mooncake-x1.jsonl 1 & moon a10g-llama3-8b mooncake-x1.jsonl 2 &
moon h200-llama3-8b mooncake-x4.jsonl 1 & moon h200-llama3-8b mooncake-x4.jsonl 2 &
wait
echo "round 3 done at $SECONDS s"
for f in "$OUT"/e/*.txt; do
  echo "$(basename "$f" .txt): $(grep -E '^[^ ]+ +(kvcascade|sglang_cache_aware|consistent_hash) ' "$f" | head -1)"
done | tee "$OUT/summary-e.txt"
if [ "$SECONDS" -lt 420 ]; then
  for b in base new; do
    extra=()
    [ "$b" = base ] && extra=(--router-binary "$PWD/gpu-bin/kvcascade-base")
    timeout 40 gpu-bin/kvcascade bench router --seconds 4 --nginx "$PWD/gpu-bin/nginx" \
      "${extra[@]}" --out "$OUT/e/2kb-$b.json" >"$OUT/e/2kb-$b.txt" 2>&1
    echo "2 KB $b: $(grep -E 'proxy CPU per request|user' "$OUT/e/2kb-$b.txt" | tr '\n' ' ')"
  done | tee "$OUT/summary-d.txt"
  timeout 40 gpu-bin/kvcascade bench router --prompt-bytes 400000 --tenants 8 --concurrency 4 \
    --seconds 3 --nginx "$PWD/gpu-bin/nginx" --out "$OUT/e/400kb-new.json" \
    >"$OUT/e/400kb-new.txt" 2>&1
  echo "400 KB: $(grep -E 'proxy CPU per request|throughput|added p99' "$OUT/e/400kb-new.txt" | tr '\n' ' ')" | tee -a "$OUT/summary-d.txt"
fi
echo "all done at $SECONDS s"
tar czf "$OUT/e.tar.gz" -C "$OUT" e && rm -rf "${OUT:?}/e"
