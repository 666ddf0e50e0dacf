#!/usr/bin/env bash
# Tenth session: issue 28 §1 on an independent trace. Input: Mooncake's published request trace
# (kvcache-ai/Mooncake, FAST'25: timestamps, lengths and 512-token prefix block ids of its
# production service), the 1,000 lines copied as mooncake_trace.jsonl in hiverge/dynamo at commit
# 4915d8fa2d362bfca6cd1ca5d46a85b122d6777d (149.6 s of arrivals, 6.7 requests/s, prompts 8,337
# tokens on average, up to 118,753), sha256 42af0f9a813095782299f34fff4e6df907326e3e846f25c0e9c7132b70e44cc8.
# Not committed (third-party data); put it at $MOONCAKE. bench/mooncake_trace.py writes prompts
# whose blocks are its hash ids (a byte per token), leaves out the 23 requests longer than the
# sim model's 32,768 tokens (refused with a 400 under every policy), arrivals sped up by --time-scale so that the
# fleet is about as busy as on the synthetic mixes. Three policies, 16 sim replicas, stream
# interval 16, nothing else running. From the repository root.
set -u
d=bench/results/runs/2026-12-06-s10-mooncake
k=build/cli/kvcascade
for s in 1 4; do python3 bench/mooncake_trace.py "$MOONCAKE" /tmp/mooncake-x$s.jsonl --time-scale $s; done
run() {  # name preset scale
  $k bench routing --sim-preset "$2" --replicas 16 --trace /tmp/mooncake-x$3.jsonl \
    --policy kvcascade sglang_cache_aware consistent_hash --out "$d/$1.json" > "$d/$1.txt" 2>&1
}
run h200-x4 h200-llama3-8b 4
run cpu-x1 cpu-llama3-8b 1
run a10g-x1 a10g-llama3-8b 1
