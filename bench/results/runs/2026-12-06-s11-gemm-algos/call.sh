#!/usr/bin/env bash
# Session 11: cuBLASLt's first heuristic pick against the fastest of up to 64 it offers at the
# seed's decode GEMM shapes (bench/cuda/gemm_algo_probe.cu, built on the development machine:
# nvcc -std=c++17 -O2 -o gpu-bin/gemm_algo_probe bench/cuda/gemm_algo_probe.cu -lcublasLt).
# Run: OUT=... bash bench/results/runs/2026-12-06-s11-gemm-algos/call.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 300 gpu-bin/gemm_algo_probe | tee "$OUT/probe.txt"
