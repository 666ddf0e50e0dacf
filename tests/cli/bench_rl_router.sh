#!/usr/bin/env bash
# `bench rl --router` against a fleet started as processes that serves neither the bench's first
# checkpoint nor version step-0: a replica on checkpoint B at version "v7". The bench loads the
# first checkpoint (A) as step-0 before the first step, and every check holds (exit 0). A is the
# reference Llama checkpoint (tests/replica/model/hf_reference/llama3), B the same with the signs
# of lm_head flipped (other outputs, every value finite).
set -euo pipefail
kvc=$1
ref=$2
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
for ck in a b; do
  mkdir -p "$work/$ck"
  cp "$ref/config.json" "$ref/model.safetensors" "$work/$ck/"
done
python3 "$(dirname "$0")/patch_bf16_tensor.py" "$work/b/model.safetensors" lm_head.weight flip
source "$(dirname "$0")/fleet.sh"
start_replica_and_router "$work" --model "$work/b" --served-model-name tiny --weight-version v7
"$kvc" bench rl --router "127.0.0.1:$port" --model tiny --checkpoints "$work/a,$work/b" \
  --steps 3 --prompts 2 -n 4 --max-tokens 16 --prompt-bytes 128
