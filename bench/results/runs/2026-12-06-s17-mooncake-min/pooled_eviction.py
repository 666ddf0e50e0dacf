#!/usr/bin/env python3
"""Seventeenth session: eviction rules on the fleet's memory pooled as one cache, offline.

    python3 pooled_eviction.py TRACE.jsonl CAPACITY_BLOCKS

TRACE is a `bench routing --trace` file (bench/mooncake_trace.py writes Mooncake's). Blocks are
16 bytes, identified by their chain (as the oracle's hashes); hits are a prompt's leading blocks
found, as bench routing counts them. Rules (each touches every block of a prompt after its
lookup, the prompt's first block the most recent):
  LRU          - bench routing's "(fleet LRU)" line
  MIN          - Belady's MIN, every block an access (bench routing's "(fleet MIN)" line)
  LIP          - new blocks inserted at the evicting end (Qureshi et al., ISCA 2007), promoted
                 when found again
  branch/block - replica/core/block_pool.h's insertion by reuse: a prompt's new blocks go to the
                 evicting end when fewer than RATE of the blocks committed off the same cached
                 block were found again (prior one in two); counts go with the branch's block
"""
import heapq
import json
import sys
from collections import OrderedDict

trace = [json.loads(l) for l in open(sys.argv[1])]
cap = int(sys.argv[2])
reqs = []
for r in trace:
    p = r["prompt"].encode()
    blocks, h = [], 0
    for k in range(len(p) // 16):
        h = hash((h, p[16 * k:16 * k + 16]))
        blocks.append(h)
    reqs.append(blocks)


def lead(bl, present):
    i = 0
    while i < len(bl) and present(bl[i]):
        i += 1
    return i


seen, oracle = set(), 0
for bl in reqs:
    oracle += lead(bl, lambda b: b in seen)
    seen.update(bl)


def lru():
    od, hits = OrderedDict(), 0
    for bl in reqs:
        hits += lead(bl, lambda b: b in od)
        for b in reversed(bl):
            if b in od:
                od.move_to_end(b)
            else:
                od[b] = True
        while len(od) > cap:
            od.popitem(last=False)
    return hits


def belady():
    acc = [b for bl in reqs for b in bl]
    n = len(acc)
    nxt, last = [n] * n, {}
    for i in range(n - 1, -1, -1):
        nxt[i] = last.get(acc[i], n)
        last[acc[i]] = i
    res, heap, hits = {}, [], 0
    for i, b in enumerate(acc):
        if b in res:
            hits += 1
        elif len(res) >= cap:
            while True:
                nu, v = heapq.heappop(heap)
                if res.get(v) == -nu:
                    del res[v]
                    break
        res[b] = nxt[i]
        heapq.heappush(heap, (-nxt[i], b))
    return hits


def branch(rate):  # rate > 1: every new block cold (LIP)
    od, hits, counts, tag, reused = OrderedDict(), 0, {}, {}, set()
    for bl in reqs:
        n = lead(bl, lambda b: b in od)
        hits += n
        for b in bl[:n]:
            if b not in reused:
                reused.add(b)
                t = tag.get(b)
                if t in counts:
                    counts[t][1] += 1
        at = bl[n - 1] if n > 0 else 0
        c = counts.setdefault(at, [0, 0])
        cold = (c[1] + 1) / (c[0] + 2) < rate
        new = []
        for b in reversed(bl[n:]):
            if b in od:
                od.move_to_end(b)
                continue
            od[b] = True
            tag[b] = at
            c[0] += 1
            new.append(b)
        if cold:
            for b in reversed(new):
                od.move_to_end(b, last=False)
        for b in reversed(bl[:n]):
            od.move_to_end(b)
        while len(od) > cap:
            b, _ = od.popitem(last=False)
            tag.pop(b, None)
            reused.discard(b)
            counts.pop(b, None)
    return hits


print(f"{len(reqs)} prompts, capacity {cap} blocks; share of the unbounded oracle's hits:")
print(f"  LRU                 {lru() / oracle:.4f}")
print(f"  MIN (a bound)       {belady() / oracle:.4f}")
print(f"  LIP                 {branch(2.0) / oracle:.4f}")
for rate in (0.05, 0.1, 0.2):
    print(f"  branch/block {rate:<5}  {branch(rate) / oracle:.4f}")
