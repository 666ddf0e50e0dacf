#!/usr/bin/env bash
# A checkpoint holding NaN (the reference Llama checkpoint with model.norm.weight all bf16 0x7fc0)
# stops `kvcascade replica --model DIR` at start-up with exit code 2 and the tensor named, instead
# of serving token 0 forever with /health at 200.
set -euo pipefail
kvc=$1
ref=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/nan"
cp "$ref/config.json" "$ref/model.safetensors" "$work/nan/"
python3 "$(dirname "$0")/patch_bf16_tensor.py" "$work/nan/model.safetensors" model.norm.weight nan
rc=0
timeout 30 "$kvc" replica --model "$work/nan" --host 127.0.0.1 --port "${KVC_TEST_PORT:-0}" \
  >"$work/out" 2>"$work/err" || rc=$?
cat "$work/err"
if [ "$rc" != 2 ]; then
  echo "exit code $rc, want 2" >&2
  exit 1
fi
grep -q "tensor 'model.norm.weight' holds NaN or infinite values" "$work/err" ||
  { echo "the message does not name model.norm.weight" >&2; exit 1; }
echo "refused: exit 2"
