import json,csv,sys,collections
tsv=sys.argv[1]; outj=sys.argv[2]; trace=sys.argv[3]
tr=[json.loads(l) for l in open(trace)]
rows=list(csv.DictReader(open(tsv),delimiter='\t'))
out=json.load(open(outj))['results'][0]
pb=sum(int(r['prompt_bytes']) for r in rows)
ratio=out['prompt_tokens']/pb
reps=sorted(set(r['replica'] for r in rows),key=lambda s:int(s[3:]))
cum=collections.defaultdict(float); dec=collections.defaultdict(float)
N=len(rows)
rows.sort(key=lambda r:int(r['request']))
marks=set(int(N*f) for f in (0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9))|{N-1}
for i,r in enumerate(rows):
    t=tr[int(r['request'])]
    w=int(r['prompt_bytes'])*ratio-int(r['cached'])+t['max_tokens']
    for k in dec: dec[k]*=0.999
    cum[r['replica']]+=w; dec[r['replica']]+=w
    if i in marks:
        m=sum(cum.values())/16; md=sum(dec.values())/16
        print(f"{i:4d} cum max/mean {max(cum.values())/m:.2f} min/mean {min(cum.values())/m:.2f} argmax {max(cum,key=cum.get)} | dec max/mean {max(dec.values())/md:.2f} argmax {max(dec,key=dec.get)} mean_dec {md:.0f}")
print("tokens/byte",ratio)
print("computed",{k:int(v) for k,v in sorted(cum.items(),key=lambda kv:int(kv[0][3:]))})
print(collections.Counter(r['reason'] for r in rows))
