#!/usr/bin/env python3
"""Eighteenth session: which hits the pools' eviction loses with routes that stay put, and whether
anything at insertion time tells the blocks found again from the rest.

    python3 reuse_classes.py TRACE.jsonl   (from this folder; reads bounded_routing.py)

Routes: bounded_routing.py's at bound 1.2 with unbounded pools (max/mean 1.04). Then each pool of
2,641 blocks under LRU, LIP and the replicas' insertion by reuse (the branch rule of
../2026-12-06-s17-mooncake-min/pooled_eviction.py, per pool); the oracle's hits found and lost by
how often the trace uses the block (2, 3-9, 10+ requests). Then every prompt's new blocks (those
no earlier prompt had): how many are found again by a later prompt, by the prompt's kind (its
match reaching past the blocks used 10+ times: a continuation), its new part's length, and the
block's position in that part.
"""
import sys
trace_path = sys.argv[1]
sys.argv = ["bounded_routing.py", trace_path, "16", "2641", "0", "lip"]
exec(open("bounded_routing.py").read().split('print(f"{len(reqs)} prompts')[0])
import collections  # noqa: E402

uses = collections.Counter(b for bl, _, _ in reqs for b in bl)


def kind(b):
    u = uses[b]
    return "2" if u == 2 else "3-9" if u < 10 else "10+"


RULE, cap = "lru", 0  # the routes: unbounded pools
_, _, assign = route(1.2)


def replay(rule, capb, rate=0.1):
    got, lost = collections.Counter(), collections.Counter()
    pools = [dict(od=OrderedDict(), counts={}, tag={}, reused=set()) for _ in range(n)]
    seen = set()
    for i, (bl, _, _) in enumerate(reqs):
        p = pools[assign[i]]
        od, counts, tag, reused = p["od"], p["counts"], p["tag"], p["reused"]
        o, m = lead(bl, seen), lead(bl, od)
        for b in bl[m:o]:
            lost[kind(b)] += 1
        for b in bl[:m]:
            got[kind(b)] += 1
        seen.update(bl)
        for b in bl[:m]:  # the branch rule's counts (rule "reuse")
            if b not in reused:
                reused.add(b)
                if tag.get(b) in counts:
                    counts[tag[b]][1] += 1
        at = bl[m - 1] if m > 0 else 0
        c = counts.setdefault(at, [0, 0])
        cold = rule == "lip" or (rule == "reuse" and (c[1] + 1) / (c[0] + 2) < rate)
        new = []
        for b in reversed(bl[m:]):
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
        for b in reversed(bl[:m]):
            od.move_to_end(b)
        while len(od) > capb:
            b, _ = od.popitem(last=False)
            tag.pop(b, None)
            reused.discard(b)
            counts.pop(b, None)
    return got, lost


print("the oracle's hits found / lost per pool of 2641 blocks, routes of bound 1.2, by the "
      "block's uses in the trace:")
for rule in ("lru", "lip", "reuse"):
    got, lost = replay(rule, 2641)
    print(f"  {rule:6} found {sum(got.values()) / oracle:.3f} "
          + " ".join(f"{k}: {got[k] / oracle:.3f}/{lost[k] / oracle:.3f}" for k in ("10+", "3-9", "2")))

print("new blocks found again by a later prompt:")
stats = collections.defaultdict(lambda: [0, 0, 0])
pos = collections.defaultdict(lambda: [0, 0])
seen = set()
for bl, _, _ in reqs:
    m = lead(bl, seen)
    tail = bl[m:]
    again = sum(1 for b in tail if uses[b] > 1)
    what = "continuation" if m > 0 and uses[bl[m - 1]] < 10 else "after a hot prefix" if m else "cold"
    size = ("new part < 64 blocks" if len(tail) < 64 else "< 256" if len(tail) < 256 else
            "< 1024" if len(tail) < 1024 else ">= 1024")
    for key in (what, size):
        s = stats[key]
        s[0] += 1
        s[1] += len(tail)
        s[2] += again
    for j, b in enumerate(tail):
        k = ("0-15" if j < 16 else "16-63" if j < 64 else "64-255" if j < 256 else
             "256-1023" if j < 1024 else "1024+")
        pos[k][0] += 1
        pos[k][1] += uses[b] > 1
    seen.update(bl)
for k, (reqn, blocks, again) in stats.items():
    print(f"  {k:22} {reqn:4} prompts, {blocks:7} new blocks, found again {again / max(blocks, 1):.3f}")
for k in ("0-15", "16-63", "64-255", "256-1023", "1024+"):
    print(f"  at {k:9} of the new part: {pos[k][0]:7} blocks, found again {pos[k][1] / pos[k][0]:.3f}")
print(f"distinct blocks {len(uses)}, used once {sum(1 for v in uses.values() if v == 1) / len(uses):.3f}")

# The blocks used by 2-9 requests: how many of their pool's requests after the last one that
# touched them (routes of bound 1.2) they are found again.
order = collections.Counter()
at = {}
for i, p in enumerate(assign):
    at[i] = order[p]
    order[p] += 1
last, seen, gaps = {}, set(), collections.Counter()
for i, (bl, _, _) in enumerate(reqs):
    p = assign[i]
    for b in bl[:lead(bl, seen)]:
        if 2 <= uses[b] <= 9:
            j = last.get((p, b))
            d = None if j is None else at[i] - at[j]
            gaps["another pool" if d is None else "1" if d <= 1 else "2-3" if d <= 3 else
                 "4-10" if d <= 10 else "11-30" if d <= 30 else "> 30"] += 1
    for b in bl:
        last[(p, b)] = i
    seen.update(bl)
print("blocks used by 2-9 requests, found again this many of their pool's requests later "
      "(share of the oracle's hits): " +
      ", ".join(f"{k}: {gaps[k] / oracle:.3f}" for k in ("1", "2-3", "4-10", "11-30", "> 30",
                                                           "another pool")))
