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
python3 - "$work/nan/model.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", bytes(data[:8]))[0]
entry = json.loads(bytes(data[8:8 + n]))["model.norm.weight"]
assert entry["dtype"] == "BF16", entry
begin, end = entry["data_offsets"]
data[8 + n + begin:8 + n + end] = b"\xc0\x7f" * ((end - begin) // 2)
open(path, "wb").write(data)
PY
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
