#!/usr/bin/env bash
# A CUDA replica (Llama-3-8B shape, random weights) with a pool of 400 blocks (6,400 tokens) and a
# 1 GB host tier (476 blocks): three different 2,500-byte prompts in turn, then again. The pool
# holds two; what it evicts (the insertion by reuse picks the later, colder prompts' blocks) comes
# back from host memory. Prints each answer's cached tokens and the tier's metrics.
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
(timeout 120 gpu-bin/kvcascade-cuda replica --backend cuda --preset llama3-8b --kv-blocks 400 \
  --kv-host-memory-gb 1 --port 18124 >"$OUT/replica2-start.txt" 2>&1 &)
for i in $(seq 1 60); do curl -s localhost:18124/readyz >/dev/null 2>&1 && break; sleep 1; done
model=$(curl -s localhost:18124/v1/models | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
ask() {  # letter
  python3 - "$1" "$model" <<'PY' >/tmp/body.json
import json, sys
print(json.dumps({"model": sys.argv[2], "prompt": sys.argv[1] * 2500, "max_tokens": 8}))
PY
  curl -s localhost:18124/v1/completions -H 'content-type: application/json' -d @/tmp/body.json |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print(sys.argv[1], r.get("usage", r))' "$1"
}
for p in a b c a b c; do ask $p; done | tee "$OUT/replica2-answers.txt"
curl -s localhost:18124/metrics | grep -E "kvcascade_kv_host|kvcascade_prefix_cache_hit" | tee "$OUT/replica2-metrics.txt"
grep -iE "host tier|KV cache" "$OUT/replica2-start.txt"
pkill -f "kvcascade-cuda replica" || true
