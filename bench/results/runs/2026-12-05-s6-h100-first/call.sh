#!/usr/bin/env bash
# temporary device-call script (not committed): tests, then A/B of gpu-bin-old vs gpu-bin
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name --format=csv,noheader
date
timeout 200 gpu-bin/kernels_cuda_test --gtest_brief=1 > $OUT/kernels_cuda_test.txt 2>&1; echo "kernels rc=$?"; tail -3 $OUT/kernels_cuda_test.txt
OUT=$OUT/tp bash bench/gpu_tp.sh tests 2>&1 | grep -E "OK|FAILED|PASSED|SKIPPED" | head
timeout 240 gpu-bin/replica_cuda_test --gtest_brief=1 --gtest_filter='-CudaTensorParallel*' > $OUT/replica_cuda_test.txt 2>&1; echo "replica rc=$?"; tail -3 $OUT/replica_cuda_test.txt
date
for v in old new; do b=gpu-bin; [ $v = old ] && b=gpu-bin-old
  timeout 60 $b/kvcascade bench kernels --quick --kv-cache-dtype fp8 > $OUT/kernels-fp8-$v.txt 2>&1
  echo "== kernels fp8 $v"; grep -iE "cascade|flat" $OUT/kernels-fp8-$v.txt | head -12
done
i=0; for v in old new old new; do i=$((i+1)); b=gpu-bin; [ $v = old ] && b=gpu-bin-old
  timeout 90 $b/kvcascade bench engine --quantization fp8 --kv-cache-dtype fp8 --attention cascade --graphs on --no-profile > $OUT/engine-$i-$v.txt 2>&1
  echo "== engine $v"; grep -E "^ +(16|256|1024) +[0-9]|rollout:" $OUT/engine-$i-$v.txt
done
date
nccl_dir=$(python3 -c "import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], 'lib'))" 2>/dev/null)
LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$nccl_dir timeout 80 gpu-bin/kvcascade bench engine --quantization fp8 --kv-cache-dtype fp8 --attention cascade --graphs on --no-profile --gen 256 --tensor-parallel-size 1 > $OUT/engine-tp1.txt 2>&1
grep -E "all-reduce|^ +(16|256) +[0-9]|rollout:" $OUT/engine-tp1.txt
