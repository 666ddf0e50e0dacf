import csv,collections,sys
rows=list(csv.DictReader(open(sys.argv[1]),delimiter='\t'))
agg=collections.defaultdict(lambda:[0,0,0,0])
tot=sum(int(r['oracle']) for r in rows)
for r in rows:
    k=(r['reason'], 'grp' if r['group'] else 'nogrp', r['n'])
    a=agg[k]; a[0]+=1; a[1]+=int(r['oracle']); a[2]+=int(r['cached'])
print('oracle total',tot)
for k,v in sorted(agg.items(), key=lambda x:-(x[1][1]-x[1][2])):
    print(k, v[0], 'oracle',v[1],'cached',v[2],'lost %.2f%%'%(100*(v[1]-v[2])/tot))
