#!/usr/bin/env python3
"""The routing target table (kvcascade's hits, balance and TTFT p90 against bounds from
sglang_cache_aware and consistent_hash) from a folder of `bench routing` outputs named
PROFILE-MIX-sSEED.txt (kvcascade, sglang_cache_aware and consistent_hash in each).

Usage: bench/routing_target_table.py DIR"""
import glob, os, re, sys
if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
    sys.exit('usage: bench/routing_target_table.py DIR (a folder of bench routing outputs)')
here = sys.argv[1]
rows = []
for path in sorted(glob.glob(os.path.join(here, '*-s[0-9].txt'))):
    name = os.path.basename(path)[:-4]
    profile, mix, seed = re.match(r'(\w+)-(\w+)-s(\d)', name).groups()
    pol = {}
    mixrate = ''
    for line in open(path):
        f = line.split()
        if len(f) >= 14 and '@' in f[0] and f[1] in ('kvcascade', 'sglang_cache_aware', 'consistent_hash'):
            mixrate = f[0].replace('/s', '')
            pol[f[1]] = dict(hit=float(f[4].rstrip('%')), bal=float(f[6]), p90=float(f[9]), err=int(f[13]))
    if len(pol) < 3:
        continue
    k, s, c = pol['kvcascade'], pol['sglang_cache_aware'], pol['consistent_hash']
    bound = 0.8 * min(s['p90'], c['p90'])
    why = [w for w, bad in (('hit', k['hit'] < 95), ('bal', k['bal'] > 1.2), ('p90', k['p90'] > bound)) if bad]
    fmt = lambda p: f"{p['hit']:.1f}% / {p['bal']:.2f} / {p['p90']:,.1f}" + (f" ({p['err']} errors)" if p['err'] else '')
    rows.append((profile, mixrate, seed, fmt(k), fmt(s), fmt(c), f'{bound:,.1f}', 'yes' if not why else 'no (' + ', '.join(why) + ')'))
order = {'h200': 0, 'a10g': 1, 'cpu': 2}
rows.sort(key=lambda r: (order.get(r[0], 9), r[1], r[2]))
print('| profile | mix | seed | kvcascade hit / bal / p90 | sglang_cache_aware | consistent_hash | bound (0.8 x better) | met |')
print('|---|---|---|---|---|---|---|---|')
for r in rows:
    print('| ' + ' | '.join((r[0].upper().replace('A10G', 'A10G'),) + r[1:]) + ' |')
