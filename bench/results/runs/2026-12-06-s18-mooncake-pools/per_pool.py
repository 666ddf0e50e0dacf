#!/usr/bin/env python3
"""Eighteenth session: where the fleet's 16 pools lose against one pooled cache, offline.

    python3 per_pool.py TRACE.jsonl DECISIONS.tsv BLOCKS_PER_REPLICA

TRACE: the `bench routing --trace` file; DECISIONS: that replay's `--decisions` file (the replica
each request went to, and the tokens it found cached). Blocks as in
../2026-12-06-s17-mooncake-min/pooled_eviction.py (16 bytes, chained). Each replica's requests,
in arrival order, are replayed against a cache of its own size under each rule; hits are a
prompt's leading blocks found. Printed as shares of the unbounded oracle's hits over the whole
trace (one cache of unbounded size, every request):
  routed, unbounded  - every replica's cache unbounded: what the split of the trace loses alone
  routed, MIN        - Belady's MIN per replica: a bound on any eviction given this routing
  routed, LRU        - LRU per replica, without blocks pinned by running requests (the
                       replicas' insertion by reuse is left out: the pooled script's model of it
                       gave 59.6% per pool here, against the replay's 84.9% with the engine's
                       rule, so it does not model the engine in pools this small; not looked into)
  replay             - what the replay's replicas found (usage.cached_tokens / 16)
Then by the router's reason for each request: the oracle's hits of those requests (oracle: the
same as what the replica that computed most of the prompt would find, had every replica kept
everything); what its replica would find had it kept everything it computed (unb); what its
replica holds under LRU offline (lru); the most any replica holds under LRU offline (best_lru);
what the replay found (replay).
"""
import csv
import json
import sys
from collections import OrderedDict, defaultdict

from pools import belady, blocks_of, lead, lru, lru_insert, unbounded

trace = [json.loads(l) for l in open(sys.argv[1])]
rows = list(csv.DictReader(open(sys.argv[2]), delimiter="\t"))
cap = int(sys.argv[3])
assert len(rows) == len(trace), (len(rows), len(trace))


reqs = [blocks_of(r["prompt"]) for r in trace]


oracle = unbounded(reqs)
by_replica = defaultdict(list)
replay = 0
for i, row in enumerate(rows):
    if row["replica"]:
        by_replica[row["replica"]].append(i)
    replay += max(0, int(row["cached"])) // 16
print(f"{len(reqs)} prompts, {len(by_replica)} replicas of {cap} blocks; share of the unbounded "
      f"oracle's hits ({oracle} blocks):")
for name, fn in (("routed, unbounded", lambda rs: unbounded(rs)),
                 ("routed, MIN", lambda rs: belady(rs, cap)),
                 ("routed, LRU", lambda rs: lru(rs, cap))):
    hits = sum(fn([reqs[i] for i in idx]) for idx in by_replica.values())
    print(f"  {name:<18} {hits / oracle:.4f}")
print(f"  {'replay':<18} {replay / oracle:.4f}")

class AnyOf:  # held by any of the caches
    def __init__(self, caches):
        self.caches = list(caches)

    def __contains__(self, b):
        return any(b in c for c in self.caches)


print("by the router's reason (shares of the oracle's hits over the whole trace):")
agg = defaultdict(lambda: defaultdict(int))
caches, pools = defaultdict(set), defaultdict(OrderedDict)
for bl, row in zip(reqs, rows):
    rep, a = row["replica"], agg[row["reason"]]
    a["n"] += 1
    a["oracle"] += lead(bl, AnyOf(caches.values()))
    a["unb"] += lead(bl, caches[rep])
    a["lru"] += lead(bl, pools[rep])
    a["best_lru"] += max([lead(bl, od) for od in pools.values()] + [0])
    a["replay"] += max(0, int(row["cached"])) // 16
    if not rep:
        continue
    caches[rep].update(bl)
    lru_insert(pools[rep], bl, cap)
for reason, a in sorted(agg.items(), key=lambda kv: -kv[1]["oracle"]):
    print(f"  {reason:<16} {a['n']:4} requests: " +
          " ".join(f"{k} {a[k] / oracle:.3f}" for k in ("oracle", "unb", "lru", "best_lru", "replay")))

# With blocks held by running requests (decisions files with sent_s and e2e_ms): a request's
# blocks are looked up, inserted and held from its first token (sent_s + ttft_ms: its prompt
# was admitted before then, so this holds them for less time than the replicas did) until it
# ended (sent_s + e2e_ms); only blocks no running request holds can be evicted. Where running
# requests hold more than the pool, it overflows (counted), which the replicas' queues avoided by
# waiting: both favour these figures. Requests are taken in the order of their first tokens, the
# oracle in arrival order, so a share can pass 1 (a later arrival's blocks found by an earlier one).
if "e2e_ms" in rows[0]:
    def held_replay(idx, cap, rule):
        events = []  # (time, kind 0 = end before 1 = start at equal times, request)
        for i in idx:
            r = rows[i]
            s, t, e = float(r["sent_s"]), float(r["ttft_ms"]) / 1e3, float(r["e2e_ms"]) / 1e3
            if t < 0:
                continue
            events.append((s + t, 1, i))
            events.append((s + max(e, t), 0, i))
        events.sort()
        starts = [i for _, k, i in events if k == 1]
        order = [b for i in starts for b in reqs[i]]
        nxt, last = [len(order)] * len(order), {}
        for p in range(len(order) - 1, -1, -1):
            nxt[p] = last.get(order[p], len(order))
            last[order[p]] = p
        pos, pins, free, nu = 0, defaultdict(int), OrderedDict(), {}
        hits = overflow = 0
        for _, kind, i in events:
            bl = reqs[i]
            if kind == 0:
                for b in reversed(bl):  # the tail first: the engine's release_chain order
                    pins[b] -= 1
                    if pins[b] == 0:
                        del pins[b]
                        free[b] = True  # released: the most recent end
                continue
            hits += lead(bl, AnyOf((pins, free)))
            for b in bl:
                free.pop(b, None)
                pins[b] += 1
                nu[b] = nxt[pos]
                pos += 1
            excess = len(pins) + len(free) - cap
            if excess > 0:
                if rule == "MIN":
                    for b in sorted(free, key=lambda b: -nu[b])[:excess]:
                        del free[b]
                else:
                    for _ in range(min(excess, len(free))):
                        free.popitem(last=False)
                overflow += len(pins) > cap
        return hits, overflow

    print("with the blocks of running requests held (per replica; pooled: one cache of the "
          "fleet's blocks, every request):")
    for rule in ("MIN", "LRU"):
        got = [held_replay(idx, cap, rule) for idx in by_replica.values()]
        hits, over = sum(g[0] for g in got), sum(g[1] for g in got)
        print(f"  routed, {rule} held   {hits / oracle:.4f} ({over} starts over the pool)")
    for rule in ("MIN", "LRU"):
        hits, over = held_replay(range(len(rows)), cap * len(by_replica), rule)
        print(f"  pooled, {rule} held   {hits / oracle:.4f} ({over} starts over the pool)")
