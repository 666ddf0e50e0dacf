#!/usr/bin/env bash
# Session 7, call 8 (review mend): the prefix item's products back in helpers (wgmma_scores,
# wgmma_pv, pack_p). CUDA tests; old (f98e6ee) / new bench_kernels --quick, bf16 and fp8, twice;
# bench engine FP8 + FP8 KV cascade. Everything in one tarball ($OUT/call8.tar.gz).
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
o=/tmp/call8; mkdir -p $o
nvidia-smi --query-gpu=name --format=csv,noheader | tee $o/device.txt
timeout 200 gpu-bin/kernels_cuda_test --gtest_brief=1 >$o/kernels_cuda_test.txt 2>&1; tail -2 $o/kernels_cuda_test.txt
timeout 200 gpu-bin/replica_cuda_test --gtest_brief=1 >$o/replica_cuda_test.txt 2>&1; tail -2 $o/replica_cuda_test.txt
for kv in bf16 fp8; do
  a=(); [ $kv = fp8 ] && a=(--kv-cache-dtype fp8)
  for b in old new old new; do
    d=gpu-bin; [ $b = old ] && d=gpu-bin-old
    timeout 120 $d/bench_kernels --quick "${a[@]}" --out $o/k-$kv-$b.json >>$o/k-$kv-$b.txt 2>&1
    echo "== $kv $b"; grep -E "^(seed|tree)" -A1 $o/k-$kv-$b.txt | tail -8 | grep -E "passes|^seed|^tree" | cut -c1-120
  done
done
timeout 150 gpu-bin/kvcascade bench engine --quantization fp8 --kv-cache-dtype fp8 --attention cascade --graphs on --no-profile --out $o/engine-fp8kv8.json >$o/engine-fp8kv8.txt 2>&1
grep -E "^ +(16|256|1024) +20 |rollout:" $o/engine-fp8kv8.txt | cut -c1-110
tar czf $OUT/call8.tar.gz -C /tmp call8
