#!/usr/bin/env python3
"""Turns a trace in the Mooncake format into a `kvcascade bench routing --trace` file.

Mooncake (kvcache-ai/Mooncake, FAST'25) published request traces of its production service, one
JSON object per line:
    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}
timestamp in ms, lengths in tokens, and hash_ids naming the prompt's blocks of 512 tokens: two
requests whose hash_ids begin alike share that prefix. Only the sharing structure is published,
not the text. This writes a prompt for each request whose blocks are those hash ids, each id
always the same `--block-bytes` bytes of text (the sim replicas tokenize bytes, so a byte is a
token), the last block cut to the request's input length; max_tokens is its output length.
It is an independent workload for the routing benchmark: its prefixes, lengths and arrivals come
from a production service, not from bench/trace.cc's generator.

Usage: bench/mooncake_trace.py IN.jsonl OUT.jsonl [--time-scale S] [--block-bytes B] [--max-len L]
  --time-scale S: arrivals S times faster (S = 2: the trace's rate doubled). Default 1.
  --max-len L: leave out requests whose input + output exceeds L tokens (the served model's
    length: a replica refuses them with a 400, whatever the routing). Default 32768.
"""
import argparse
import json
import random
import sys

WORDS = ("cache prefix token batch router replica policy block model query value tenant "
         "document answer question system user assistant sample decode prefill the a of "
         "and to in is for on with as by").split()


def block_text(block_id, size):
    """The same `size` bytes of words for a hash id, every time."""
    rng = random.Random(block_id * 2654435761 + 97)
    out = [f"[{block_id}]"]
    length = len(out[0])
    while length < size:
        w = rng.choice(WORDS)
        out.append(w)
        length += len(w) + 1
    return " ".join(out)[:size]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--block-bytes", type=int, default=512)
    ap.add_argument("--max-len", type=int, default=32768)
    a = ap.parse_args()
    if a.time_scale <= 0 or a.block_bytes <= 0:
        sys.exit("mooncake_trace.py: --time-scale and --block-bytes must be positive")
    rows = []
    left_out = 0
    with open(a.input) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                ts, n_in, n_out, ids = (r["timestamp"], int(r["input_length"]),
                                        int(r["output_length"]), r["hash_ids"])
            except (ValueError, KeyError, TypeError) as e:
                sys.exit(f"mooncake_trace.py: {a.input}:{number}: not a Mooncake trace line ({e})")
            if n_in + n_out <= a.max_len:
                rows.append((ts, n_in, n_out, ids))
            else:
                left_out += 1
    if not rows:
        sys.exit(f"mooncake_trace.py: {a.input}: no requests")
    t0 = min(r[0] for r in rows)
    cache = {}
    with open(a.output, "w") as out:
        for ts, n_in, n_out, ids in rows:
            # Blocks of block_bytes each, the last one what is left of the input length (the
            # trace's lengths are a real tokenizer's; here a byte is a token).
            parts = []
            left = max(n_in, 1)
            for i, h in enumerate(ids):
                size = a.block_bytes if i + 1 < len(ids) else min(a.block_bytes, left)
                if size <= 0:
                    break
                if h not in cache:
                    cache[h] = block_text(h, a.block_bytes)
                parts.append(cache[h][:size])
                left -= size
            out.write(json.dumps({"arrival_s": (ts - t0) / 1000.0 / a.time_scale,
                                  "prompt": "".join(parts),
                                  "max_tokens": max(1, min(n_out, 4096))}) + "\n")
    span = (max(r[0] for r in rows) - t0) / 1000.0 / a.time_scale
    print(f"mooncake_trace.py: {len(rows)} requests ({left_out} over {a.max_len} tokens left "
          f"out), {span:.1f} s -> {a.output}")


if __name__ == "__main__":
    main()
