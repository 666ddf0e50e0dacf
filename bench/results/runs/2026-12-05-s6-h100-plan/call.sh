#!/usr/bin/env bash
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name --format=csv,noheader; date
timeout 200 gpu-bin/kernels_cuda_test --gtest_brief=1 > $OUT/kernels_cuda_test.txt 2>&1; echo "kernels rc=$?"; grep -E "FAILED|PASSED|Failure" $OUT/kernels_cuda_test.txt | head
timeout 100 gpu-bin/replica_cuda_test --gtest_brief=1 --gtest_filter='-CudaTensorParallel*' > $OUT/replica_cuda_test.txt 2>&1; echo "replica rc=$?"; grep -E "FAILED|PASSED|Failure" $OUT/replica_cuda_test.txt | head
timeout 60 gpu-bin/kvcascade bench kernels --quick --kv-cache-dtype fp8 > $OUT/kernels-fp8-new.txt 2>&1; grep -E "^seed|^tree|passes alone" $OUT/kernels-fp8-new.txt | head -8
i=0; for v in old new old new; do i=$((i+1)); b=gpu-bin; [ $v = old ] && b=gpu-bin-old
  timeout 90 $b/kvcascade bench engine --quantization fp8 --kv-cache-dtype fp8 --attention cascade --graphs on --no-profile > $OUT/engine-$i-$v.txt 2>&1
  echo "== engine $v"; grep -E "^ +(16|256|1024) +[0-9]|rollout:" $OUT/engine-$i-$v.txt
done; date
# second call, same warm H100:
#   gpu-bin/kvcascade bench kernels --quick > kernels-bf16-new.txt
#   {gpu-bin-old,gpu-bin}/kvcascade bench engine --attention cascade --graphs on --no-profile > engine-bf16-{old,new}.txt
# gpu-bin-old: kvcascade + kvcascade-cuda built at 140ffc5 (the session's start); gpu-bin at 07a2040.
