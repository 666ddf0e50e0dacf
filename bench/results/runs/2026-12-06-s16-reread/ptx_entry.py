import re,sys
# print the body of the first .entry whose name contains sys.argv[2], with the hash-dependent names normalised
s=open(sys.argv[1]).read()
name=sys.argv[2]
i=[m.start() for m in re.finditer(r'\.entry ', s) if name in s[m.start():m.start()+300]]
if not i: sys.exit('none')
start=i[0]; end=s.find('\n}\n',start)
body=s[start:end]
body=re.sub(r'_ZN3kvc[0-9A-Za-z_]+','FN',body)
body=re.sub(r'\$L__BB\d+_\d+','L',body)
print(body)
