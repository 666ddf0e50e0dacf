#!/usr/bin/env bash
# A device check of the CUDA replica beyond the tests: /v1/chat/completions with n=256 and
# streamed completions through loadgen (bench/results/runs/2026-12-01-cuda-serve-chat); carry gpu-bin.
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64
timeout 120 gpu-bin/replica_cuda_test 2>&1 | grep -E "OK|FAILED|PASSED" | tee $OUT/replica_cuda_test.txt
gpu-bin/kvcascade replica --backend cuda --preset llama3-8b --port 18201 > $OUT/replica.log 2>&1 &
r=$!
for i in $(seq 1 120); do (exec 3<>/dev/tcp/127.0.0.1/18201) 2>/dev/null && break; sleep 1; done
timeout 100 gpu-bin/kvcascade loadgen --url http://127.0.0.1:18201 --model llama3-8b --chat --tenants 1 --prompt-bytes 2048 -n 256 --max-tokens 32 --concurrency 1 --seconds 20 --timeout 60 --out $OUT/chat256.json 2>&1 | tee $OUT/chat256.txt
timeout 60 gpu-bin/kvcascade loadgen --url http://127.0.0.1:18201 --model llama3-8b --stream --tenants 2 --prompt-bytes 1024 -n 8 --max-tokens 32 --concurrency 4 --seconds 10 --timeout 60 --out $OUT/stream.json 2>&1 | tee $OUT/stream.txt
kill $r; wait $r; tail -3 $OUT/replica.log
