#!/usr/bin/env bash
# Twenty-fourth session, device call 1 (an H100 host; gpu-bin from `bash bench/pack_gpu_bin.sh;
# rm gpu-bin/bench_engine_host`, plus gzip'd Mooncake traces from bench/mooncake_trace.py):
#  1. the CUDA move_blocks null checks of 1f3fe4c on a GPU (kernels_cuda_test, replica_cuda_test;
#     kvcascade-cuda left out: the device tool's 64 MiB), see ../2026-12-07-s23-cuda-move-checks;
#  2. the Mooncake rows with KVC_EXP_STICK=1 (a holder under the work bound keeps its prefix:
#     the costs choose only among the replicas holding the longest match) against the committed
#     rule (kvcascade-exp: the committed source with switches.patch), four replays at a time on
#     the host's 16 cores.
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
mkdir -p "$OUT/logs"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.total --format=csv | tee "$OUT/logs/gpu.txt"
timeout 240 gpu-bin/kernels_cuda_test --gtest_brief=1 >"$OUT/logs/kernels_cuda_test.txt" 2>&1
stamp "kernels_cuda_test rc=$?: $(tail -1 "$OUT/logs/kernels_cuda_test.txt")"
grep -E "FAILED|CudaMoveBlocks" "$OUT/logs/kernels_cuda_test.txt" | head
timeout 200 gpu-bin/replica_cuda_test >"$OUT/logs/replica_cuda_test.txt" 2>&1
stamp "replica_cuda_test rc=$?: $(tail -1 "$OUT/logs/replica_cuda_test.txt")"
grep -E "FAILED|SKIPPED \[" "$OUT/logs/replica_cuda_test.txt" | head
gunzip -k gpu-bin/mooncake-x1.jsonl.gz
a10g() {  # tag, then VAR=value switches for kvcascade-exp (/tmp/switches24.patch, kept as
  # switches.patch in this folder)
  local tag=$1; shift
  mkdir -p "$OUT/logs/dec-$tag"
  env "$@" timeout 330 gpu-bin/kvcascade-exp bench routing --sim-preset a10g-llama3-8b --replicas 16 \
    --trace gpu-bin/mooncake-x1.jsonl --policy kvcascade --kv-host-memory-gb 32 \
    --decisions "$OUT/logs/dec-$tag" --out "$OUT/logs/a10g-$tag.json" 2>&1 | grep -v '^  \[' >"$OUT/logs/a10g-$tag.txt"
}
gunzip -k gpu-bin/mooncake-x4.jsonl.gz
h200() {  # as a10g: the H200 row (arrivals 4x)
  local tag=$1; shift
  env "$@" timeout 200 gpu-bin/kvcascade-exp bench routing --sim-preset h200-llama3-8b --replicas 16 \
    --trace gpu-bin/mooncake-x4.jsonl --policy kvcascade \
    --out "$OUT/logs/h200-$tag.json" 2>&1 | grep -v '^  \[' >"$OUT/logs/h200-$tag.txt"
}
a10g stick-r1 KVC_EXP_STICK=1 & a10g stick-r2 KVC_EXP_STICK=1 & a10g base-r1 & h200 stick-r1 KVC_EXP_STICK=1 &
wait
stamp "round 1 done"
h200 stick-r2 KVC_EXP_STICK=1 & h200 stick-r3 KVC_EXP_STICK=1 & h200 stick-r4 KVC_EXP_STICK=1 & h200 base-r1 &
wait
stamp "round 2 done"
for f in "$OUT"/logs/a10g-*.txt "$OUT"/logs/h200-*.txt; do
  echo "$(basename "$f" .txt): $(grep -E '^[^ ]+ +kvcascade ' "$f" | head -1)"
done | tee "$OUT/summary.txt"
tar czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
