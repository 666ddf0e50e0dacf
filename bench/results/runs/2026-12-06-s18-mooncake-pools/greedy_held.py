#!/usr/bin/env python3
"""Eighteenth session: routes that stay put, with the running requests' blocks held.

    python3 greedy_held.py TRACE.jsonl DECISIONS.tsv RULE OUT.tsv   (from this folder)

Routes each request as bounded_routing.py does at bound 1.2 with pools of 2,641 blocks under RULE
(lru or lip), then writes DECISIONS with its replicas replaced by those routes (the times, TTFT and
durations kept from the live replay, which stand in for these routes' own; `cached` -1: not
replayed), for per_pool.py's held figures.
"""
import csv
import sys

trace_path, decisions, rule, out = sys.argv[1:5]
sys.argv = ["bounded_routing.py", trace_path, "16", "2641", "0", rule]
exec(open("bounded_routing.py").read().split('print(f"{len(reqs)} prompts')[0])
hits, balance, assign = route(1.2)
print(f"routes at bound 1.2 under {rule}: hits {hits:.4f} of the oracle, max/mean work {balance:.2f}")
rows = list(csv.DictReader(open(decisions), delimiter="\t"))
with open(out, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()), delimiter="\t")
    w.writeheader()
    for row, pick in zip(rows, assign):
        w.writerow(dict(row, replica=f"g{pick}", reason="greedy", cached=-1))
