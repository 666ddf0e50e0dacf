#!/usr/bin/env bash
# What a load from the host tier costs against computing the prompt, on the GPU: a CUDA replica
# (Llama-3-8B shape, random weights, LRU eviction) with a pool of 400 blocks; four different
# 2,500-byte prompts (157 blocks each) in turn, then again, max_tokens 1, so that each second-round
# prompt finds its 156 full blocks in host memory (with the tier) or nowhere (without). Each
# request's wall time from curl (prefill or load, one decode step, HTTP) and its cached tokens.
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
run() {  # port, name, extra replica flags...
  local port=$1 name=$2; shift 2
  (timeout 150 gpu-bin/kvcascade-cuda replica --backend cuda --preset llama3-8b --kv-blocks 400 \
    --kv-cold-reuse-rate 0 --port "$port" "$@" >"$OUT/$name-start.txt" 2>&1 &)
  for i in $(seq 1 60); do curl -s localhost:$port/readyz >/dev/null 2>&1 && break; sleep 1; done
  local model
  model=$(curl -s localhost:$port/v1/models | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
  for round in 1 2; do
    for p in a b c d; do
      python3 -c 'import json,sys; print(json.dumps({"model": sys.argv[2], "prompt": sys.argv[1] * 2500, "max_tokens": 1}))' \
        "$p" "$model" >/tmp/body.json
      curl -s -o /tmp/answer.json -w '%{time_total}' localhost:$port/v1/completions \
        -H 'content-type: application/json' -d @/tmp/body.json >/tmp/t.txt
      echo "$name round $round prompt $p: $(python3 -c 'import sys; print(round(float(open("/tmp/t.txt").read()) * 1e3, 1))') ms, cached $(python3 -c 'import json; print(json.load(open("/tmp/answer.json"))["usage"]["prompt_tokens_details"]["cached_tokens"])')"
    done
  done
  curl -s localhost:$port/metrics | grep -E '^kvcascade_kv_host_transfers_total'
  pkill -f "port $port" || true
  sleep 1
}
run 18131 with-tier --kv-host-memory-gb 1 | tee "$OUT/load-time.txt"
run 18132 without | tee -a "$OUT/load-time.txt"
