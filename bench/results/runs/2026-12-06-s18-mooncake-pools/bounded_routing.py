#!/usr/bin/env python3
"""Eighteenth session: the hits a routing can keep at a given balance on this trace, offline.

    python3 bounded_routing.py TRACE.jsonl REPLICAS [BLOCKS_PER_REPLICA [MIN_BLOCKS [RULE [history]]]]

Each request in arrival order goes to the replica holding most of its prompt among those whose
work so far, with this request's, stays within BOUND x the fleet's mean work (+ one mean request);
if none, to the least worked. Work as bench routing's max/mean counts it: uncached prompt tokens +
completion tokens (max_tokens), summed over the whole trace (no time, no queues, no decay: only
the final balance the table's max/mean reads). Caches: unbounded per replica, or of
BLOCKS_PER_REPLICA blocks (nothing held by running requests) under RULE: lru, lip (a prompt's new
blocks at the evicting end, promoted when found again) or slruS (blocks never found again evicted
first while those found again hold over S of the pool). With `history`, the routing matches each
prompt against everything a replica ever computed (an index that keeps evicted blocks as the
replica's), the hits against what its pool holds. Blocks as in per_pool.py.
Prints, per BOUND, the hits as a share of the unbounded oracle's and the final max/mean work;
with MIN_BLOCKS, also what Belady's MIN on each replica's pool of that size serves with the
requests routed as they were (not online: MIN knows the pool's future requests).
"""
import json
import sys
from collections import OrderedDict

from pools import belady, blocks_of, lead, lru_insert, unbounded

trace = [json.loads(l) for l in open(sys.argv[1])]
n = int(sys.argv[2])
cap = int(sys.argv[3]) if len(sys.argv) > 3 else 0
mincap = int(sys.argv[4]) if len(sys.argv) > 4 else 0
RULE = sys.argv[5] if len(sys.argv) > 5 else "lru"
BY_HISTORY = len(sys.argv) > 6 and sys.argv[6] == "history"


reqs = [(blocks_of(r["prompt"]), len(r["prompt"].encode()), r.get("max_tokens", 0)) for r in trace]

oracle = unbounded([bl for bl, _, _ in reqs])


def route(bound):
    caches = [OrderedDict() for _ in range(n)]
    protected = [OrderedDict() for _ in range(n)]
    history = [set() for _ in range(n)]
    work, hits, assign = [0.0] * n, 0, []
    for k, (bl, plen, out) in enumerate(reqs):
        match = [lead(bl, c) for c in caches]
        found = match
        if BY_HISTORY:  # route by what each replica ever computed; hits are what its pool holds
            match = [lead(bl, h) for h in history]
        cost = [plen - 16 * m + out for m in match]
        total = sum(work)
        mean_req = total / k if k else plen + out
        limit = bound * (total + plen + out) / n + mean_req
        ok = [r for r in range(n) if work[r] + cost[r] <= limit]
        pick = (max(ok, key=lambda r: (match[r], -work[r])) if ok else
                min(range(n), key=lambda r: work[r]))
        hits += found[pick]
        assign.append(pick)
        history[pick].update(bl)
        work[pick] += plen - 16 * found[pick] + out  # what its pool makes it compute
        c = caches[pick]
        new = lru_insert(c, bl, 0)
        if RULE == "lip":  # new blocks at the evicting end (the tail the nearest), promoted
            for b in reversed(new):  # when found again
                c.move_to_end(b, last=False)
        if RULE.startswith("slru"):  # probation (never found again) evicted first, down to
            # the protected segment's share SHARE of the pool; found blocks promoted
            share = float(RULE[4:] or 0.8)
            prot = protected[pick]
            for b in reversed(bl[:found[pick]]):  # the head the most recent
                prot[b] = True
                prot.move_to_end(b)
            while cap and len(c) > cap:
                if len(prot) > share * cap or len(prot) == len(c):
                    v, _ = prot.popitem(last=False)
                    del c[v]
                else:
                    for v in c:
                        if v not in prot:
                            break
                    del c[v]
        while cap and len(c) > cap:
            c.popitem(last=False)
    return hits / oracle, max(work) / (sum(work) / n), assign


print(f"{len(reqs)} prompts, {n} replicas, caches "
      f"{'of %d blocks (%s)' % (cap, RULE) if cap else 'unbounded'}"
      f"{', routed by what each replica ever computed' if BY_HISTORY else ''}:")
for bound in (1.0, 1.05, 1.1, 1.2, 1.3, 1.5, 2.0, 1e9):
    h, b, assign = route(bound)
    line = f"  bound {bound:<6g} hits {h:.4f} of the oracle, max/mean work {b:.2f}"
    if mincap:  # Belady's MIN on each replica's own requests, in this routing
        got = sum(belady([reqs[i][0] for i in range(len(reqs)) if assign[i] == r], mincap)
                  for r in range(n))
        line += f"; this routing with MIN per replica of {mincap} blocks: {got / oracle:.4f}"
    print(line)
