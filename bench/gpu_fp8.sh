#!/usr/bin/env bash
# Device calls for FP8 weights (--quantization fp8), over gpu-bin/ (bench/pack_gpu_bin.sh);
# everything under $OUT.
#   bash bench/gpu_fp8.sh tests   the CUDA kernel and whole-model tests, then bench gemm at 16,
#                                 128 and 256 rows (bf16 and FP8 side by side)
#   bash bench/gpu_fp8.sh engine  the PyTorch anchor (anchor/ carried), then bench engine: FP8
#                                 cascade + flat and bf16 cascade, each beside the anchor
#   bash bench/gpu_fp8.sh all     both
#   bash bench/gpu_fp8.sh kv      the FP8 KV cache (--kv-cache-dtype fp8): the CUDA tests, the
#                                 anchor, bench engine with FP8 weights + FP8 KV (cascade and
#                                 flat, profiled), bench kernels --quick over E4M3 codes, then
#                                 cascade alone for bf16 weights + FP8 KV, FP8 weights + bf16 KV
#                                 and bf16 + bf16 (same run)
#   bash bench/gpu_fp8.sh scales  where the FP8 GEMMs' scales are applied: the CUDA tests, bench
#                                 gemm at 16 and 128 rows (block-scaled vs raw), then bench
#                                 engine with FP8 weights + FP8 KV, scales in the GEMMs' readers
#                                 (the default) and in cuBLASLt (--fp8-scales-in-gemm), each
#                                 beside the anchor
set -u -o pipefail
mode=${1:-tests}
out=${OUT:-gpu-out}
bin=${BIN:-gpu-bin}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/$bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv

# The PyTorch anchor (anchor/ carried) into $out; sets anchor=(--anchor FILE) when it ran.
run_anchor() {
  if [ -f anchor/torch_cascade_anchor.py ]; then
    OUT="$out" PYTHONUNBUFFERED=1 timeout 200 python3 anchor/torch_cascade_anchor.py \
      >"$out/anchor.txt" 2>&1
    tail -3 "$out/anchor.txt"
  fi
  anchor=()
  [ -f "$out/anchor.json" ] && anchor=(--anchor "$out/anchor.json")
}

case "$mode" in
  tests)
    timeout 200 "$bin/kernels_cuda_test" --gtest_filter='CudaFp8*' 2>&1 | tee "$out/fp8_test.txt" |
      tail -15
    timeout 240 "$bin/kernels_cuda_test" --gtest_brief=1 2>&1 >"$out/kernels_cuda_test.txt"
    tail -4 "$out/kernels_cuda_test.txt"
    timeout 200 "$bin/replica_cuda_test" 2>&1 >"$out/replica_cuda_test.txt"
    grep -E "fp8|FAILED|PASSED|Failure" -A2 "$out/replica_cuda_test.txt" | head -40
    for rows in 16 128; do
      timeout 60 "$bin/kvcascade" bench gemm --rows $rows --out "$out/gemm-$rows.json" \
        >"$out/gemm-$rows.txt" 2>&1
      tail -8 "$out/gemm-$rows.txt"
    done
    ;;
  engine)
    run_anchor
    timeout 300 "$bin/kvcascade" bench engine --quantization fp8 --attention both --graphs on \
      --out "$out/engine-fp8.json" "${anchor[@]}" >"$out/engine-fp8.txt" 2>&1
    tail -45 "$out/engine-fp8.txt"
    timeout 150 "$bin/kvcascade" bench engine --attention cascade --graphs on --no-profile \
      --out "$out/engine-bf16.json" "${anchor[@]}" >"$out/engine-bf16.txt" 2>&1
    tail -14 "$out/engine-bf16.txt"
    ;;
  all)
    OUT="$out" bash "$0" tests
    OUT="$out" bash "$0" engine
    ;;
  kv)
    timeout 200 "$bin/kernels_cuda_test" --gtest_brief=1 2>&1 >"$out/kernels_cuda_test.txt"
    tail -3 "$out/kernels_cuda_test.txt"
    timeout 200 "$bin/replica_cuda_test" 2>&1 >"$out/replica_cuda_test.txt"
    grep -E "fp8 KV|FAILED|PASSED" "$out/replica_cuda_test.txt" | head -20
    run_anchor
    timeout 200 "$bin/kvcascade" bench engine --quantization fp8 --kv-cache-dtype fp8 \
      --attention both --graphs on --out "$out/engine-fp8-kv8.json" "${anchor[@]}" \
      >"$out/engine-fp8-kv8.txt" 2>&1
    head -30 "$out/engine-fp8-kv8.txt" | tail -22
    tail -5 "$out/engine-fp8-kv8.txt"
    timeout 120 "$bin/kvcascade" bench kernels --quick --kv-cache-dtype fp8 \
      --out "$out/kernels-fp8.json" >"$out/kernels-fp8.txt" 2>&1
    grep -A6 "^case" "$out/kernels-fp8.txt"
    # The same rollout, cascade only, for the other three combinations.
    for v in "bf16-kv8 --kv-cache-dtype fp8" "fp8 --quantization fp8" "bf16"; do
      set -- $v
      name=$1
      shift
      timeout 100 "$bin/kvcascade" bench engine "$@" --attention cascade --graphs on --no-profile \
        --out "$out/engine-$name.json" "${anchor[@]}" >"$out/engine-$name.txt" 2>&1
      echo "== $name"
      grep -E "^ +(16|256|1024) +20|rollout:" "$out/engine-$name.txt" | head -4
    done
    ;;
  scales)
    timeout 240 "$bin/kernels_cuda_test" --gtest_brief=1 2>&1 >"$out/kernels_cuda_test.txt"
    grep -E "FAILED|Failure|PASSED" -A3 "$out/kernels_cuda_test.txt" | head -30
    timeout 240 "$bin/replica_cuda_test" 2>&1 >"$out/replica_cuda_test.txt"
    grep -E "FAILED|PASSED|scales in the readers|fp8 (llama|qwen)" "$out/replica_cuda_test.txt" |
      head -30
    for rows in 16 128; do
      timeout 60 "$bin/kvcascade" bench gemm --rows $rows --out "$out/gemm-$rows.json" \
        >"$out/gemm-$rows.txt" 2>&1
      tail -9 "$out/gemm-$rows.txt"
    done
    run_anchor
    for v in "readers" "in-gemm --fp8-scales-in-gemm"; do
      set -- $v
      name=$1
      shift
      timeout 150 "$bin/kvcascade" bench engine --quantization fp8 --kv-cache-dtype fp8 "$@" \
        --attention cascade --graphs on --out "$out/engine-$name.json" "${anchor[@]}" \
        >"$out/engine-$name.txt" 2>&1
      echo "== $name"
      grep -E "^ +(16|256|1024) +20|rollout:|gemm|proj" "$out/engine-$name.txt" | head -14
    done
    ;;
esac
