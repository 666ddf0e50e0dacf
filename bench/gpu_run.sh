#!/usr/bin/env bash
# One device call: the CUDA tests, the kernel benchmark and (optionally) the PyTorch anchor and
# Nsight Compute, on a build-gpu/ made on the development machine (docs/kernels-cuda.md). Writes
# everything under $OUT (or ./gpu-out).
#   bash bench/gpu_run.sh quick      tests + bench --quick + ncu of the prefix pass
#   bash bench/gpu_run.sh full       tests + full bench + PyTorch anchor (anchor/ carried)
#   bash bench/gpu_run.sh sanitize   compute-sanitizer memcheck + racecheck on a subset
#   bash bench/gpu_run.sh final      full, then sanitize (one device call)
#   bash bench/gpu_run.sh ab BASE... the four main rows with each BASE (older bench_kernels
#                                    binaries) and this build, alternately, twice: a same-machine A/B
#   bash bench/gpu_run.sh profile    Nsight Compute on the cascade and merge launches of the
#                                    worked example at S=16 and S=1024 (durations, DRAM, stalls)
set -u -o pipefail
mode=${1:-quick}
out=${OUT:-gpu-out}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
test_bin=build-gpu/tests/kernels/cuda/kernels_cuda_test
bench_bin=build-gpu/bench/bench_kernels

case "$mode" in
  quick)
    cuobjdump -sass build-gpu/kernels/cuda/CMakeFiles/kvc_kernels_cuda.dir/attention.cu.o \
      >"$out/attention.sass" 2>&1
    $test_bin --gtest_brief=1 2>&1 | tee "$out/tests.txt" | tail -15
    $bench_bin --quick --out "$out/quick.json" 2>&1 | tee "$out/quick.txt"
    ncu --clock-control none -k regex:cascade_kernel --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section SchedulerStats \
      --section WarpStateStats --section LaunchStats --section SourceCounters \
      -o "$out/prefix" $bench_bin --only 0 --iters 3 >"$out/ncu_log.txt" 2>&1
    ncu --import "$out/prefix.ncu-rep" --page details >"$out/prefix_details.txt" 2>&1
    ncu --import "$out/prefix.ncu-rep" --page source --csv --print-source sass \
      >"$out/prefix_source.csv" 2>&1
    rm -f "$out/prefix.ncu-rep"
    grep -E 'Duration|Issued Warp|No Eligible|Registers Per|Achieved Active' \
      "$out/prefix_details.txt"
    ;;
  full)
    $test_bin --gtest_brief=1 2>&1 | tee "$out/tests.txt" | tail -15
    # Clocks, power and throttle reasons every second while the benchmark runs.
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
      --format=csv -l 1 >"$out/clocks.csv" 2>&1 &
    smi=$!
    $bench_bin --out "$out/kernels.json" 2>&1 | tee "$out/kernels.txt"
    kill $smi
    if [ -f anchor/torch_cascade_anchor.py ]; then
      OUT="$out" PYTHONUNBUFFERED=1 python3 anchor/torch_cascade_anchor.py 2>&1 |
        tee "$out/anchor.txt" | tail -30
    fi
    ;;
  sanitize)
    for tool in memcheck racecheck; do
      timeout 240 compute-sanitizer --tool $tool \
        $test_bin --gtest_filter='*RoutesAgree*:*AllHeadsCascade*:*MergeState*:*PartialHeadGroups*:*RisingScores*' \
        2>&1 | tee "$out/sanitize-$tool.txt" | tail -5
    done
    ;;
  final)
    bash "$0" full
    bash "$0" sanitize
    ;;
  ab)
    [ $# -ge 2 ] || { echo "usage: gpu_run.sh ab BASE_BENCH_BINARY..." >&2; exit 2; }
    shift
    for round in 1 2; do
      for bin in "$@" "$bench_bin"; do
        echo "== $bin (round $round)"
        for c in 0 1 2 3; do
          $bin --only $c --iters 30 2>&1 | grep -A1 -E '^(seed|tree)'
        done
      done
    done 2>&1 | tee "$out/ab.txt"
    ;;
  profile)
    for c in 0 2; do
      ncu --clock-control none --cache-control none -k 'regex:cascade_kernel|merge_kernel' \
        --launch-count 2 --section SpeedOfLight --section SchedulerStats \
        --section WarpStateStats --section LaunchStats \
        $bench_bin --only $c --cascade-only --iters 1 >"$out/profile-$c.txt" 2>&1
      grep -E '^  [a-z].*(cascade|merge)_kernel|Duration|DRAM Throughput|Issued Warp|Grid Size' \
        "$out/profile-$c.txt"
    done
    ;;
esac
