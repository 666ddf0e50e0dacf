#!/usr/bin/env bash
# One device call for tensor parallelism on the CUDA backend (a model split over the host's GPUs,
# docs/architecture.md "Tensor parallelism"), over gpu-bin/
# (bench/pack_gpu_bin.sh); everything under $OUT. NCCL is dlopen'ed (kernels/cuda/nccl_group.h):
# on the GPU host it comes from PyTorch's nvidia-nccl package (or the toolkit's lib64), put on
# the library path here; KVC_REQUIRE_NCCL=1 turns the tests' "NCCL missing" skip into a failure.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
#   bash bench/gpu_tp.sh tests   the NCCL group test (every visible GPU) and the split backend's
#                                tests: one rank through the split path == the one-GPU model
#                                (bit for bit), and 2/4 ranks within bf16 where there are GPUs
#   bash bench/gpu_tp.sh engine  bench engine (seed rollout, 256 tokens, cascade, graphs) on one
#                                GPU and through the split's path with one rank, back to back:
#                                what the collectives and the vocab gather cost at N = 1; on a
#                                machine with N GPUs also --tensor-parallel-size N (TP_SIZES)
set -u -o pipefail
mode=${1:-tests}
out=${OUT:-gpu-out}
bin=${BIN:-gpu-bin}
mkdir -p "$out"
nccl_dir=$(python3 -c "import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], 'lib'))" \
  2>/dev/null || true)
export LD_LIBRARY_PATH=$PWD/$bin/lib:/usr/local/cuda/lib64:${nccl_dir}:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 KVC_REQUIRE_NCCL=1
nvidia-smi --query-gpu=index,name --format=csv
echo "NCCL from: ${nccl_dir:-(not found in python) } and /usr/local/cuda/lib64"
case "$mode" in
  tests)
    timeout 120 "$bin/kernels_cuda_test" --gtest_filter='Nccl*' 2>&1 | tee "$out/nccl_test.txt" |
      grep -E "NCCL|OK|FAILED|PASSED|SKIPPED|Failure" -A2 | head -20
    timeout 300 "$bin/replica_cuda_test" --gtest_filter='CudaTensorParallel*' 2>&1 |
      tee "$out/tp_test.txt" | grep -E "tp [0-9]|OK|FAILED|PASSED|SKIPPED|Failure" -A2 | head -30
    ;;
  engine)
    for tp in 0 1 ${TP_SIZES:-}; do
      a=()
      [ "$tp" != 0 ] && a=(--tensor-parallel-size "$tp")
      timeout 150 "$bin/kvcascade" bench engine --gen 256 --attention cascade --graphs on \
        "${a[@]}" --out "$out/engine-tp$tp.json" >"$out/engine-tp$tp.txt" 2>&1
      echo "== tensor-parallel-size ${tp/#0/none}"
      grep -E "^ +(16|128|256) +[0-9]|rollout:|all-reduce|tensor parallelism" \
        "$out/engine-tp$tp.txt" | head -12
    done
    ;;
  *)
    echo "usage: $0 tests|engine" >&2
    exit 2
    ;;
esac
