#!/usr/bin/env bash
# Eighteenth session: the CUDA code of main that never ran on a GPU (7f42f9a .. 9051ff4, see
# ../2026-12-06-s17-no-device/README.md), then the rebased hand-over diff
# (../2026-12-06-s16-ws-handover/) built beside it. Made here with
#   BENCH_KERNELS=1 bash bench/pack_gpu_bin.sh            # HEAD's build
#   git apply ../2026-12-06-s16-ws-handover/handover.diff; ninja -C build kernels_cuda_test bench_kernels
#   cp those two into gpu-bin/ho/, strip, git checkout the diff away; rm gpu-bin/kvcascade*
#   gpu-bin/bench_engine_host (not run here; the tree and gpu-bin must stay under 64 MiB)
# and run with gpu-bin carried: OUT=... bash bench/results/runs/2026-12-06-s18-gpu-check/call.sh
set -u
here=bench/results/runs
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}
root=$OUT
mkdir -p "$root/head" "$root/handover"
echo "== HEAD"
OUT=$root/head BIN=gpu-bin bash $here/2026-12-06-s16-ws-final/call.sh
echo "== hand-over diff"
OUT=$root/handover BIN=gpu-bin/ho bash $here/2026-12-06-s16-ws-handover/call.sh
