#!/usr/bin/env python3
"""Twenty-fourth session: where the A10G Mooncake row's misses come from.

    python3 losses.py MOONCAKE_TRACE.jsonl DECISIONS.tsv

DECISIONS: a `kvcascade bench routing --decisions DIR` file of a replay of the trace made by
bench/mooncake_trace.py (same requests, same order). Replays the decisions in the order they were
sent: each replica holds every prefix of the prompts sent to it (the A10G row's 32 GB tier keeps
everything: fleet LRU 100%), "stored" once the request's first token came back. Each request's
loss (the oracle's cached tokens minus its own) goes to:
  moved-from-holder(stored): another replica held (and had computed) a longer prefix;
  moved-from-holder(only-in-flight): another replica had been sent a longer prefix, not computed;
  holder-but-not-yet-computed: sent to the holder while its prefix was still being computed;
by the router's reason for the decision (prefix_match / least_cost with the holder under the work
bound: the costs moved it; hot_spread: the holder was over the bound).
"""
import csv, json, sys, collections
trace = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
trace = [r for r in trace if r['input_length'] + r['output_length'] <= 32768]
rows = list(csv.DictReader(open(sys.argv[2]), delimiter='\t'))
assert len(rows) == len(trace)
B = 512
def pl(s, ids):
    n = 0
    for i in range(len(ids)):
        if tuple(ids[:i+1]) in s: n = i+1
        else: break
    return n
# order by sent time
order = sorted(range(len(rows)), key=lambda i: float(rows[i]['sent_s']))
held = collections.defaultdict(set)   # replica -> prefixes (all sent earlier)
stored = collections.defaultdict(set) # replica -> prefixes whose request's first token came before
events = []  # (time stored, replica, ids)
import heapq
loss = collections.Counter(); cnt = collections.Counter(); tot_oracle = 0; tot_cached = 0
cat_loss = collections.Counter()
for i in order:
    r = rows[i]; t = float(r['sent_s']); ids = trace[i]['hash_ids']; n_in = trace[i]['input_length']
    while events and events[0][0] <= t:
        _, rep, j = heapq.heappop(events)
        for k in range(len(trace[j]['hash_ids'])): stored[rep].add(tuple(trace[j]['hash_ids'][:k+1]))
    rep = r['replica']; oracle = int(r['oracle']); cached = int(r['cached'])
    tot_oracle += oracle; tot_cached += cached
    best_held = max([pl(s, ids) for s in held.values()] + [0])
    best_stored = max([pl(s, ids) for s in stored.values()] + [0])
    mine_held = pl(held[rep], ids); mine_stored = pl(stored[rep], ids)
    l = oracle - cached
    if mine_held < best_held:
        cat = 'moved-from-holder' + ('(stored)' if best_stored > mine_held else '(only-in-flight)')
    elif cached < min(mine_held * B, n_in):
        cat = 'holder-but-not-yet-computed'
    else:
        cat = 'other'
    key = (r['reason'], cat)
    loss[key] += l; cnt[key] += 1
    cat_loss[cat] += l
    for k in range(len(ids)): held[rep].add(tuple(ids[:k+1]))
    ttft = float(r['ttft_ms'])
    heapq.heappush(events, (t + ttft / 1000.0, rep, i))
print('hits', tot_cached / tot_oracle)
for k, v in sorted(loss.items(), key=lambda x: -x[1]):
    print(f'{k}: loss {100*v/tot_oracle:.2f}% of oracle over {cnt[k]} requests')
for k, v in cat_loss.items(): print(k, f'{100*v/tot_oracle:.2f}%')
