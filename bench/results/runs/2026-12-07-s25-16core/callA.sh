#!/usr/bin/env bash
# Twenty-fifth session, device call A (an H100 host's 16 cores; gpu-bin from
# `bash bench/pack_gpu_bin.sh; rm gpu-bin/kvcascade-cuda gpu-bin/kernels_cuda_test` at the
# session's tree, plus the gzip'd Mooncake traces of bench/mooncake_trace.py --time-scale 1 and 4):
#  1. replica_cuda_test on the GPU: the CUDA backend now runs check_forward_batch every step
#     (CudaBackendTest.InconsistentBatchesAreRefusedBeforeAnythingRuns);
#  2. bench_engine_host: the engine's host work per step with the check's share;
#  3. the A10G Mooncake row with the committed defaults (holders keep their prefixes, slack 2),
#     four replays at a time.
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
mkdir -p "$OUT/a"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.total --format=csv | tee "$OUT/a/gpu.txt"
lscpu | grep -E "Model name|^CPU\(s\)" | tee -a "$OUT/a/gpu.txt"
timeout 240 gpu-bin/replica_cuda_test >"$OUT/a/replica_cuda_test.txt" 2>&1
stamp "replica_cuda_test rc=$?: $(tail -1 "$OUT/a/replica_cuda_test.txt")"
grep -E "FAILED|SKIPPED \[|Inconsistent" "$OUT/a/replica_cuda_test.txt" | head
for args in "" "4 64 4096 1024" "2 128 4096 512 same"; do
  # shellcheck disable=SC2086
  gpu-bin/bench_engine_host $args
done 2>&1 | tee "$OUT/a/bench_engine_host.txt"
gunzip -k gpu-bin/mooncake-x1.jsonl.gz
a10g() {
  timeout 330 gpu-bin/kvcascade bench routing --sim-preset a10g-llama3-8b --replicas 16 \
    --trace gpu-bin/mooncake-x1.jsonl --policy kvcascade --kv-host-memory-gb 32 \
    --out "$OUT/a/a10g-$1.json" 2>&1 | grep -v '^  \[' >"$OUT/a/a10g-$1.txt"
}
a10g r1 & a10g r2 & a10g r3 & a10g r4 &
wait
stamp "a10g round done"
for f in "$OUT"/a/a10g-*.txt; do
  echo "$(basename "$f" .txt): $(grep -E '^[^ ]+ +kvcascade ' "$f" | head -1)"
done | tee "$OUT/summary-a.txt"
tar czf "$OUT/a.tar.gz" -C "$OUT" a && rm -rf "${OUT:?}/a"
