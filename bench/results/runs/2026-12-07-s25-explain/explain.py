#!/usr/bin/env python3
"""Twenty-fifth session: what the policy saw when the A10G Mooncake row ran unbalanced.

    python3 explain.py MOONCAKE_TRACE.jsonl DECISIONS.tsv[.gz] ...

DECISIONS: `kvcascade bench routing --decisions DIR` files whose last column is the policy's view
of every replica (RouteDecision::detail, since ef88a97). For the busiest replica at the end (work
as the benchmark counts it: uncached prompt + completion) and the least busy, prints:
  - of the decisions that chose it: how many had no replica under the bounds (none_allowed), its
    work over its bound (w/b) at the decision (median, quartiles);
  - of every decision, what kept it from being chosen: over its bounds (ok=0), kept from by a
    holder (kept=1), or allowed but costlier than the chosen replica (by how much), or allowed
    and no costlier (the tie pass's rendezvous chose another).
"""
import collections, csv, gzip, json, statistics, sys

def parse(detail):
    parts = [p.strip() for p in detail.split(';') if p.strip()]
    head = dict(kv.split('=') for kv in parts[0].split())
    cands = {}
    for p in parts[1:]:
        rid, *kvs = p.split()
        cands[rid] = {k: float(v) for k, v in (kv.split('=') for kv in kvs)}
    return head, cands

trace = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
trace = [r for r in trace if r['input_length'] + r['output_length'] <= 32768]
csv.field_size_limit(1 << 24)
for path in sys.argv[2:]:
    f = gzip.open(path, 'rt') if path.endswith('.gz') else open(path)
    rows = list(csv.DictReader(f, delimiter='\t'))
    work = collections.Counter()
    for i, r in enumerate(rows):
        work[r['replica']] += int(r['prompt_bytes']) - int(r['cached']) + trace[i]['output_length']
    mean = sum(work.values()) / len(work)
    busiest = max(work, key=work.get)
    least = min(work, key=work.get)
    print(f"{path}: busiest {busiest} {work[busiest] / mean:.2f}, least {least} "
          f"{work[least] / mean:.2f} of the mean")
    for who in (busiest, least):
        chosen = [r for r in rows if r['replica'] == who and r['detail']]
        none = sum(parse(r['detail'])[0].get('none_allowed') == '1' for r in chosen)
        ratios = []
        for r in chosen:
            c = parse(r['detail'])[1].get(who)
            if c and c['b'] not in (float('inf'),) and c['b'] > 0:
                ratios.append(c['w'] / c['b'])
        q = statistics.quantiles(ratios, n=4) if len(ratios) >= 4 else ratios
        print(f"  {who}: chosen {len(chosen)} times, {none} with none under the bounds; w/b "
              f"quartiles {' '.join(f'{x:.2f}' for x in q)}; by reason "
              f"{dict(collections.Counter(r['reason'] for r in chosen))}")
        why = collections.Counter()
        extra = []
        for r in rows:
            if r['replica'] == who or not r['detail']:
                continue
            head, cands = parse(r['detail'])
            c, ch = cands.get(who), cands.get(r['replica'])
            if c is None or ch is None:
                why['absent'] += 1
            elif c['ok'] == 0:
                why['over its bounds' + (' (w > b)' if c['w'] > c['b'] else ' (decode cap)')] += 1
            elif c['kept'] == 1:
                why['kept from by a holder'] += 1
            elif c['cost'] > ch['cost']:
                why['allowed, costlier'] += 1
                extra.append(c['cost'] - ch['cost'])
            else:
                why['allowed, no costlier (tie pass / spread)'] += 1
        print(f"  {who} not chosen: {dict(why)}")
        if extra:
            print(f"    costlier by (tokens): median {statistics.median(extra):.0f}, "
                  f"quartiles {' '.join(f'{x:.0f}' for x in statistics.quantiles(extra, n=4))}")
