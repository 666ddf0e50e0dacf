#!/usr/bin/env bash
# Twenty-seventh session: the mixed fleet (as run.sh) once more, kvcascade and SGLang's rule with
# each request's decision and TTFT (--decisions, into /tmp/mfd), for tail.py.
d=bench/results/runs/2026-12-07-s27-mixed-fleet-vm
build/cli/kvcascade bench routing --sim-preset h200-llama3-8b,a10g-llama3-8b --replicas 16 \
  --requests 5000 --mix chat --rate 110 --seed 1 --policy kvcascade sglang_cache_aware \
  --decisions /tmp/mfd --out $d/decisions.json 2>&1 | grep -v '^  \[' > $d/decisions.txt
