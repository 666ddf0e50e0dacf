#!/usr/bin/env bash
# Session 7, call 6: programmatic dependent launch of the step's own kernels (pdl.h). Tests with
# it on, then bench engine with it on and off (KVC_NO_PDL=1) back to back, same binary.
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 gpu-bin/kernels_cuda_test --gtest_brief=1 >$OUT/kernels_cuda_test.txt 2>&1; tail -2 $OUT/kernels_cuda_test.txt; grep -E "FAILED|Failure" -A3 $OUT/kernels_cuda_test.txt | head -20
timeout 200 gpu-bin/replica_cuda_test --gtest_brief=1 >$OUT/replica_cuda_test.txt 2>&1; tail -2 $OUT/replica_cuda_test.txt; grep -E "FAILED|Failure" -A3 $OUT/replica_cuda_test.txt | head -20
run() {  # name, env, args...
  local name=$1 envv=$2; shift 2
  env $envv timeout 150 gpu-bin/kvcascade bench engine --attention cascade --graphs on --no-profile "$@" --out $OUT/e-$name.json >$OUT/e-$name.txt 2>&1
  echo "== $name"; grep -E "^ +(16|256|1024) +20 |rollout:" $OUT/e-$name.txt | cut -c1-110
}
for i in 1 2; do
  run fp8-pdl-$i X=1 --quantization fp8 --kv-cache-dtype fp8
  run fp8-nopdl-$i KVC_NO_PDL=1 --quantization fp8 --kv-cache-dtype fp8
done
run bf16-pdl X=1
run bf16-nopdl KVC_NO_PDL=1
