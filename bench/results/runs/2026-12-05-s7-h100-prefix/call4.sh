#!/usr/bin/env bash
# Session 7, call 4: prefix-pass issue fixes (descriptor offsets, tree reductions, sequence
# indices loaded with the page table): tests, then old/new bench_kernels --quick back to back.
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 gpu-bin/kernels_cuda_test --gtest_brief=1 >$OUT/kernels_cuda_test.txt 2>&1; tail -2 $OUT/kernels_cuda_test.txt
for kv in bf16 fp8; do
  a=(); [ $kv = fp8 ] && a=(--kv-cache-dtype fp8)
  for b in old new old new; do
    d=gpu-bin; [ $b = old ] && d=gpu-bin-old
    timeout 120 $d/bench_kernels --quick "${a[@]}" --out $OUT/k-$kv-$b.json >$OUT/k-$kv-$b.txt 2>&1
    echo "== $kv $b"; grep -E "^(seed|tree)" -A1 $OUT/k-$kv-$b.txt | grep -v "^--" | cut -c1-200
  done
done
timeout 200 gpu-bin/replica_cuda_test --gtest_brief=1 >$OUT/replica_cuda_test.txt 2>&1; tail -2 $OUT/replica_cuda_test.txt
