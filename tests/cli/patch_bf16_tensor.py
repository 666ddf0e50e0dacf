#!/usr/bin/env python3
"""Rewrites one BF16 tensor of a .safetensors file in place, for the CLI tests' checkpoints.

usage: patch_bf16_tensor.py FILE TENSOR flip|nan
  flip: every value's sign flipped (other outputs, every value finite)
  nan:  every value NaN (bf16 0x7fc0)
"""
import json
import struct
import sys

path, name, how = sys.argv[1:4]
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", bytes(data[:8]))[0]
entry = json.loads(bytes(data[8:8 + n]))[name]
assert entry["dtype"] == "BF16", entry
begin, end = entry["data_offsets"]
if how == "flip":
    for i in range(8 + n + begin + 1, 8 + n + end, 2):  # the high byte of each little-endian word
        data[i] ^= 0x80
elif how == "nan":
    data[8 + n + begin:8 + n + end] = b"\xc0\x7f" * ((end - begin) // 2)
else:
    sys.exit("how: flip or nan")
open(path, "wb").write(data)
