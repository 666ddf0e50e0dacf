#!/usr/bin/env python3
"""Where the mixed fleet's TTFT tail is: for each policy's --decisions TSV (decisions.sh), the
requests each kind of replica served (sim replica i is the (i mod 2)-th preset: even H200, odd
A10G), their TTFT p50 / p90, how many are over the fleet's p90, and the route reasons and
replicas of those.   python3 tail.py /tmp/mfd   (or: python3 tail.py decisions, the gzip'd copies)"""
import collections
import csv
import gzip
import os
import sys

folder = sys.argv[1] if len(sys.argv) > 1 else "/tmp/mfd"
for policy in ["kvcascade", "sglang_cache_aware"]:
    packed = f"{folder}/{policy}.tsv.gz"
    f = gzip.open(packed, "rt") if os.path.exists(packed) else open(
        f"{folder}/chat@110_s-{policy}-routers1.tsv")
    rows = list(csv.DictReader(f, delimiter="\t"))
    rows = [r for r in rows if float(r["ttft_ms"]) >= 0]
    ttft = sorted(float(r["ttft_ms"]) for r in rows)
    p90 = ttft[int(0.9 * len(ttft))]
    print(f"{policy}: {len(rows)} requests, TTFT p90 {p90:.1f} ms")

    def kind(r):
        digits = "".join(c for c in r["replica"] if c.isdigit())
        return "?" if not digits else ("H200" if int(digits) % 2 == 0 else "A10G")

    for k in ["H200", "A10G"]:
        sub = sorted(float(r["ttft_ms"]) for r in rows if kind(r) == k)
        over = sum(1 for t in sub if t > p90)
        print(f"  {k}: {len(sub)} requests ({100 * len(sub) / len(rows):.1f}%), TTFT p50 "
              f"{sub[len(sub) // 2]:.1f} p90 {sub[int(0.9 * len(sub))]:.1f}, {over} over the "
              f"fleet's p90")
    over = [r for r in rows if float(r["ttft_ms"]) > p90]
    print("  over p90 by reason:", collections.Counter(r["reason"] for r in over).most_common(6))
