#!/usr/bin/env bash
# The CUDA tests again at the session's last code (after the review mends of 5afcd9f: moot
# copy-on-write copies dropped from the ordered moves), and the replica's host tier once more.
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
timeout 240 gpu-bin/kernels_cuda_test >"$OUT/kernels_cuda_test.txt" 2>&1
echo "kernels_cuda_test rc=$?: $(tail -1 "$OUT/kernels_cuda_test.txt")"
timeout 240 gpu-bin/replica_cuda_test >"$OUT/replica_cuda_test.txt" 2>&1
echo "replica_cuda_test rc=$?: $(tail -1 "$OUT/replica_cuda_test.txt")"
grep -E "HostTier|FAILED" "$OUT/replica_cuda_test.txt" | head
OUT=$OUT bash bench/results/runs/2026-12-06-s19-gpu-host-tier/replica.sh
