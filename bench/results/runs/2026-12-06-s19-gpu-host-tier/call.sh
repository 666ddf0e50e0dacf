#!/usr/bin/env bash
# Nineteenth session: the host tier on the GPU (kernels/cuda/ops.h move_blocks against its CPU
# twin; the CUDA backend's engine with --kv-host-memory-gb against a pool that never evicted),
# the CUDA tests whole, a start-up of kvcascade-cuda with a 1 GB host tier, and then, with the
# time left, the eighteenth session's one-against-four-routers pairs on the host's 16 cores.
# Made with `bash bench/pack_gpu_bin.sh` (rm gpu-bin/bench_engine_host), gpu-bin carried:
#   OUT=... bash bench/results/runs/2026-12-06-s19-gpu-host-tier/call.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
SECONDS=0
timeout 240 gpu-bin/kernels_cuda_test >"$OUT/kernels_cuda_test.txt" 2>&1
echo "kernels_cuda_test rc=$? at $SECONDS s: $(tail -1 "$OUT/kernels_cuda_test.txt")"
grep -E "MoveBlocks|FAILED" "$OUT/kernels_cuda_test.txt" | head -20
timeout 240 gpu-bin/replica_cuda_test >"$OUT/replica_cuda_test.txt" 2>&1
echo "replica_cuda_test rc=$? at $SECONDS s: $(tail -1 "$OUT/replica_cuda_test.txt")"
grep -E "HostTier|FAILED|Failure" -A3 "$OUT/replica_cuda_test.txt" | head -30
# A replica on the GPU with a host tier: its start-up log, then a short request through it.
(timeout 60 gpu-bin/kvcascade-cuda replica --backend cuda --preset llama3-8b --kv-host-memory-gb 1 \
  --port 18123 >"$OUT/replica-start.txt" 2>&1 &)
for i in $(seq 1 50); do curl -s localhost:18123/readyz >/dev/null 2>&1 && break; sleep 1; done
curl -s localhost:18123/v1/completions -H 'content-type: application/json' \
  -d '{"prompt":"hello","max_tokens":4}' >"$OUT/replica-request.txt" 2>&1
grep -iE "host tier|KV cache" "$OUT/replica-start.txt"; head -c 300 "$OUT/replica-request.txt"; echo
pkill -f "kvcascade-cuda replica" || true
echo "at $SECONDS s"
if [ "$SECONDS" -lt 300 ]; then
  OUT=$OUT ROUNDS4="1 2|3 4" ROUNDS2="" bash bench/results/runs/2026-12-06-s18-routers-16core/call.sh
fi
