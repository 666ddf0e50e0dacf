#!/usr/bin/env bash
# Twenty-sixth session: 1939118 on the VM, one replay at a time: the mixed fleet twice, the A10G
# and H200 Mooncake rows once (TRACE files from bench/mooncake_trace.py --time-scale 1 and 4).
cd /work/main
d=bench/results/runs/2026-12-07-s26-leverage
for r in 1 2; do
  build/cli/kvcascade bench routing --sim-preset h200-llama3-8b,a10g-llama3-8b --replicas 16 --requests 5000 --mix chat --rate 110 --policy kvcascade --out $d/final-mixed-r$r.json 2>&1 | grep -v '^  \[' | sed -n 3p > $d/final-mixed-r$r.txt
done
build/cli/kvcascade bench routing --sim-preset a10g-llama3-8b --replicas 16 --trace /tmp/mooncake-x1.jsonl --policy kvcascade --kv-host-memory-gb 32 --out $d/final-a10g-r1.json 2>&1 | grep -v '^  \[' | sed -n 3p > $d/final-a10g-r1.txt
build/cli/kvcascade bench routing --sim-preset h200-llama3-8b --replicas 16 --trace /tmp/mooncake-x4.jsonl --policy kvcascade --out $d/final-h200-r1.json 2>&1 | grep -v '^  \[' | sed -n 3p > $d/final-h200-r1.txt
