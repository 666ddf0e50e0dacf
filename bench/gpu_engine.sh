#!/usr/bin/env bash
# One device call for the engine on the GPU: the CUDA tests, the whole-model tests,
# compute-sanitizer on the whole-model test, and a serving run (replica --backend cuda + router +
# loadgen). Runs binaries built on the development machine and copied, with the shared libraries
# the GPU host lacks, into gpu-bin/ (bench/pack_gpu_bin.sh); writes everything under $OUT.
#   bash bench/gpu_engine.sh tests      kernel tests + whole-model tests
#   bash bench/gpu_engine.sh sanitize   compute-sanitizer memcheck on the whole-model tests
#   bash bench/gpu_engine.sh serve      llama3-8b replica + router + loadgen (2 prompts x n=64);
#                                       REPLICA_ARGS adds replica options (e.g. "--quantization
#                                       fp8 --kv-cache-dtype fp8"), MAX_TOKENS and
#                                       SECONDS_MEASURED size the run
#   bash bench/gpu_engine.sh bench      kvcascade bench engine (+ the PyTorch anchor if anchor/ is
#                                       carried: ../shared/bench/torch_cascade_anchor.py)
#   bash bench/gpu_engine.sh all        tests, serve, sanitize
set -u -o pipefail
mode=${1:-tests}
out=${OUT:-gpu-out}
bin=${BIN:-gpu-bin}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=$PWD/$bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv

run_tests() {
  timeout 240 "$bin/kernels_cuda_test" --gtest_brief=1 2>&1 | tee "$out/kernels_cuda_test.txt" | tail -25
  timeout 180 "$bin/replica_cuda_test" 2>&1 | tee "$out/replica_cuda_test.txt" | tail -40
}

run_sanitize() {
  timeout 200 compute-sanitizer --tool memcheck --leak-check full "$bin/replica_cuda_test" \
    --gtest_filter='*TinyLogitsMatchCpuBackend*' >"$out/memcheck.txt" 2>&1
  tail -5 "$out/memcheck.txt"
}

wait_http() {  # host port seconds
  for _ in $(seq 1 "$3"); do
    if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
    sleep 1
  done
  return 1
}

run_serve() {
  local rp=18101 pp=18100
  "$bin/kvcascade" replica --backend cuda --preset llama3-8b --port $rp --max-num-seqs 256 \
    --max-tokens-per-step 512 ${REPLICA_ARGS:-} >"$out/replica.log" 2>&1 &
  local replica=$!
  if ! wait_http 127.0.0.1 $rp 240; then
    echo "replica did not start"; tail -20 "$out/replica.log"; kill $replica; return 1
  fi
  "$bin/kvcascade" router --replica 127.0.0.1:$rp --port $pp >"$out/router.log" 2>&1 &
  local router=$!
  wait_http 127.0.0.1 $pp 30
  sleep 2
  "$bin/kvcascade" loadgen --url http://127.0.0.1:$pp --model llama3-8b --tenants 2 \
    --prompt-bytes 4096 -n 64 --max-tokens "${MAX_TOKENS:-256}" --concurrency 2 --ignore-eos \
    --seconds "${SECONDS_MEASURED:-60}" --timeout 600 --out "$out/loadgen.json" 2>&1 |
    tee "$out/loadgen.txt"
  curl -s http://127.0.0.1:$rp/metrics >"$out/replica_metrics.txt" 2>/dev/null ||
    true
  kill $router $replica
  wait $replica 2>/dev/null
  tail -5 "$out/replica.log"
}

run_bench() {
  if [ -f anchor/torch_cascade_anchor.py ]; then
    OUT="$out" PYTHONUNBUFFERED=1 timeout 300 python3 anchor/torch_cascade_anchor.py \
      >"$out/anchor.txt" 2>&1
    tail -5 "$out/anchor.txt"
  fi
  local anchor=()
  [ -f "$out/anchor.json" ] && anchor=(--anchor "$out/anchor.json")
  timeout 480 "$bin/kvcascade" bench engine --out "$out/engine.json" "${anchor[@]}" ${BENCH_ARGS:-} \
    2>&1 | tee "$out/engine.txt"
}

run_generate() {
  timeout 120 "$bin/kvcascade" generate --backend cuda --preset tiny --prompt "Hello" -n 4 \
    --max-tokens 16 2>&1 | tee "$out/generate.txt" | tail -8
}

case "$mode" in
  bench) run_bench ;;
  generate) run_generate ;;
  tests) run_tests ;;
  sanitize) run_sanitize ;;
  serve) run_serve ;;
  all)
    run_tests
    run_serve
    run_sanitize
    ;;
  *)
    echo "usage: $0 tests|sanitize|serve|all" >&2
    exit 2
    ;;
esac
