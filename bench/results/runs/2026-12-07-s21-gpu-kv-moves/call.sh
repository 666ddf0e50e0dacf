#!/usr/bin/env bash
# Twenty-first session: the CUDA side of df8ef59 (one ordered list of KV moves; copy-on-write
# copies through move_blocks with or without a host tier; copy_blocks gone) on a GPU, one device
# call, binaries built here (bash bench/pack_gpu_bin.sh; carry gpu-bin):
#   the CUDA kernel and backend tests, a tiny CUDA generate with n = 4 (copies without a tier),
#   the nineteenth session's host-tier replica (copies and the tier's moves in one list), and
#   `kvcascade bench engine` (the seed's rollout, 2 x 64 siblings: the forks' copies) for the
#   decode step times against engine-h200.md.
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
timeout 240 gpu-bin/kernels_cuda_test --gtest_brief=1 >"$OUT/kernels_cuda_test.txt" 2>&1
stamp "kernels_cuda_test rc=$?: $(tail -1 "$OUT/kernels_cuda_test.txt")"
grep -E "FAILED|KvBlocks" "$OUT/kernels_cuda_test.txt" | head
timeout 200 gpu-bin/replica_cuda_test >"$OUT/replica_cuda_test.txt" 2>&1
stamp "replica_cuda_test rc=$?: $(tail -1 "$OUT/replica_cuda_test.txt")"
grep -E "FAILED|SKIPPED \[" "$OUT/replica_cuda_test.txt" | head
timeout 120 gpu-bin/kvcascade generate --backend cuda --preset tiny --prompt "Hello" -n 4 \
  --max-tokens 16 --json >"$OUT/generate.json" 2>"$OUT/generate.err"
stamp "generate rc=$?: block copies $(python3 -c 'import json,sys; print(sum(s["block_copies"] for s in json.load(open(sys.argv[1]))["stats"]["steps"]))' "$OUT/generate.json")"
mkdir -p "$OUT/replica"
OUT=$OUT/replica bash bench/results/runs/2026-12-06-s19-gpu-host-tier/replica.sh
stamp "host-tier replica done"
timeout 300 gpu-bin/kvcascade bench engine --out "$OUT/engine.json" >"$OUT/engine.txt" 2>&1
stamp "bench engine rc=$?"
tail -30 "$OUT/engine.txt"
