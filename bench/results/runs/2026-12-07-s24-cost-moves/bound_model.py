#!/usr/bin/env python3
"""Offline model of the Mooncake trace's routing trade-off (no timing, no queues).

Requests in arrival order; each replica's cache is infinite (the A10G row's 32 GB tier holds
all: fleet LRU 100%). A request's cached tokens on a replica: the longest prefix of its hash ids
seen there, x 512, capped at its input. Work: uncached input + output. The rule: the replica
holding the longest prefix, unless its accounted work would exceed factor x the mean + slack
mean requests + lead (the tokens it holds beyond any other), else the cheapest replica under
the bound (uncached tokens, then least work). Accounting: cumulative (no decay) or decayed
with a horizon in seconds of the trace's time.
"""
import json, math, sys

BLOCK = 512


def load(path, max_len=32768, scale=1.0):
    rows = []
    for line in open(path):
        if not line.strip():
            continue
        r = json.loads(line)
        if r["input_length"] + r["output_length"] <= max_len:
            rows.append((r["timestamp"] / 1000.0 / scale, r["input_length"], r["output_length"],
                         r["hash_ids"]))
    t0 = rows[0][0]
    return [(t - t0, i, o, ids) for t, i, o, ids in rows]


def prefix_len(seen, ids):
    n = 0
    for i in range(len(ids)):
        if tuple(ids[: i + 1]) in seen:
            n = i + 1
        else:
            break
    return n


def run(rows, R=16, factor=1.05, slack=4.0, lead_factor=1.0, horizon=None, seed_rr=0):
    caches = [set() for _ in range(R)]
    oracle = set()
    work = [0.0] * R  # accounted (maybe decayed)
    total = [0.0] * R  # cumulative, the bench's measure
    last_t = 0.0
    mean_req = 0.0
    n = 0
    hits = 0
    ohits = 0
    for t, n_in, n_out, ids in rows:
        if horizon:
            k = math.exp(-(t - last_t) / horizon)
            work = [w * k for w in work]
        last_t = t
        m = [prefix_len(c, ids) for c in caches]
        cached = [min(x * BLOCK, n_in) for x in m]
        om = min(prefix_len(oracle, ids) * BLOCK, n_in)
        wr = [n_in - c + n_out for c in cached]
        top = max(m)
        second = sorted(m)[-2]
        wt = sum(work)
        ok = []
        for r in range(R):
            lead = lead_factor * (top - second) * BLOCK if (m[r] == top and top > second) else 0
            bound = factor * (wt + wr[r]) / R + slack * mean_req + lead
            if mean_req == 0 or work[r] + wr[r] <= bound:
                ok.append(r)
        if not ok:
            ok = [min(range(R), key=lambda r: work[r])]
        # cheapest allowed: least uncached, then least work
        best = min(ok, key=lambda r: (wr[r], work[r], (r * 2654435761 + hash(tuple(ids[:1]))) % 97))
        work[best] += wr[best]
        total[best] += wr[best]
        hits += cached[best]
        ohits += om
        n += 1
        mean_req = wr[best] if n == 1 else 0.99 * mean_req + 0.01 * wr[best]
        for i in range(len(ids)):
            caches[best].add(tuple(ids[: i + 1]))
            oracle.add(tuple(ids[: i + 1]))
    mean = sum(total) / R
    return hits / ohits, max(total) / mean, sorted(round(x / mean, 2) for x in total)


if __name__ == "__main__":
    rows = load(sys.argv[1])
    print(len(rows), "requests", rows[-1][0], "s")
    for horizon in (None, 120, 300):
        for factor in (1.0, 1.05, 1.1, 1.2):
            for slack in (0, 2, 4):
                h, b, _ = run(rows, factor=factor, slack=slack, horizon=horizon)
                print(f"horizon {horizon} factor {factor} slack {slack}: hits {100*h:.1f}% max/mean {b:.3f}")
