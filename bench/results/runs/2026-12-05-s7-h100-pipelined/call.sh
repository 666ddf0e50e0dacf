#!/usr/bin/env bash
# Session 7, call 7: the software-pipelined 16-bit prefix pass (P through shared memory).
# Tests, then old/new bench_kernels --quick (bf16) back to back, then bench engine bf16 and FP8.
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 gpu-bin/kernels_cuda_test --gtest_brief=1 >$OUT/kernels_cuda_test.txt 2>&1; tail -2 $OUT/kernels_cuda_test.txt; grep -E "FAILED|Failure" -A4 $OUT/kernels_cuda_test.txt | head -30
for b in old new old new; do
  d=gpu-bin; [ $b = old ] && d=gpu-bin-old
  timeout 120 $d/bench_kernels --quick --out $OUT/k-$b.json >$OUT/k-$b.txt 2>&1
  echo "== bf16 $b"; grep -E "^(seed|tree)" -A1 $OUT/k-$b.txt | grep -v "^--" | cut -c1-200
done
timeout 200 gpu-bin/replica_cuda_test --gtest_brief=1 >$OUT/replica_cuda_test.txt 2>&1; tail -2 $OUT/replica_cuda_test.txt; grep -E "FAILED|Failure" -A4 $OUT/replica_cuda_test.txt | head -20
timeout 150 gpu-bin/kvcascade bench engine --attention cascade --graphs on --no-profile --out $OUT/e-bf16.json >$OUT/e-bf16.txt 2>&1
grep -E "^ +(16|256|1024) +20 |rollout:" $OUT/e-bf16.txt | cut -c1-110
