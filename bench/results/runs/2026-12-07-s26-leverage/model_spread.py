#!/usr/bin/env python3
"""Each replica's reference-step figure (api/step_model.h: 256 prefill tokens, 16 decode rows,
0.25 GB of KV, over 272 tokens) against the median of the figures routers would use at that
moment (reference_error <= 0.1), by reference_error (or reference_leverage) bucket.
Usage: model_spread.py models-vm-11.tsv.gz [error|leverage] [odd-even]
(odd-even: even- and odd-numbered replicas apart, the mixed fleet's H200s and A10Gs)."""
import collections, gzip, sys

path = sys.argv[1]
field = 'reference_' + (sys.argv[2] if len(sys.argv) > 2 else 'error')
split = len(sys.argv) > 3
edges = ([0.05, 0.1, 0.2, 0.5, 1] if field == 'reference_error' else [100, 300, 1000, 3000, 10000]) + [float('inf')]
by = collections.defaultdict(dict)
with gzip.open(path, 'rt') as f:
    head = f.readline().rstrip('\n').split('\t')
    for line in f:
        v = dict(zip(head, line.rstrip('\n').split('\t')))
        if int(v['steps']) < 100:
            continue
        fig = (float(v['overhead_s']) + 256 * float(v['prefill_token_s']) + 16 * float(v['decode_seq_s'])
               + 0.25 * float(v['kv_gb_s'])) / 272
        by[v['t_s']][v['replica']] = (fig, float(v[field]), float(v['reference_error']))
buckets = collections.defaultdict(list)
for t, m in by.items():
    groups = [list(m.items())]
    if split:
        groups = [[x for x in m.items() if int(x[0].lstrip('sim')) % 2 == k] for k in (0, 1)]
    for g, items in enumerate(groups):
        used = sorted(fig for _, (fig, _, err) in items if err <= 0.1)
        if len(used) < 3:
            continue
        med = used[len(used) // 2]
        for _, (fig, x, _) in items:
            buckets[(g, next(e for e in edges if x <= e))].append(fig / med)
print('group', field, '<=', 'fits', 'p5 p50 p95 min max', 'beyond 0.8-1.25', sep='\t')
for key in sorted(buckets):
    x = sorted(buckets[key])
    out = sum(1 for r in x if r > 1.25 or r < 0.8) / len(x)
    print(key[0], key[1], len(x), ' '.join(f'{x[i]:.2f}' for i in (len(x) // 20, len(x) // 2, len(x) * 19 // 20, 0, -1)),
          f'{out:.1%}', sep='\t')
