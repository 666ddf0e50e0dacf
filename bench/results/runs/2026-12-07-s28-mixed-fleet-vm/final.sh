#!/usr/bin/env bash
# Twenty-eighth session: the committed build (sim grid of 123 steps) on the 2-core VM, one replay at
# a time, from the repository root: the mixed fleet (8 H200 + 8 A10G) chat@110 with its baselines,
# kvcascade again, two uniform cells, then mixed@60, chat@180 and chat@300 (more load than the
# H200s serve alone) each with SGLang's rule.
d=bench/results/runs/2026-12-07-s28-mixed-fleet-vm/final
K=build/cli/kvcascade
mf=(--sim-preset h200-llama3-8b,a10g-llama3-8b --replicas 16 --requests 5000 --seed 1)
$K bench routing "${mf[@]}" --mix chat --rate 110 \
  --policy kvcascade sglang_cache_aware consistent_hash --out $d/mixedfleet-chat.json 2>&1 |
  grep -v '^  \[' >$d/mixedfleet-chat.txt
$K bench routing "${mf[@]}" --mix chat --rate 110 --policy kvcascade \
  --out $d/mixedfleet-chat-kv2.json 2>&1 | grep -v '^  \[' >$d/mixedfleet-chat-kv2.txt
$K bench routing --sim-preset h200-llama3-8b --replicas 16 --requests 5000 --mix chat --rate 200 \
  --seed 1 --policy kvcascade --out $d/h200-chat-s1.json 2>&1 | grep -v '^  \[' >$d/h200-chat-s1.txt
$K bench routing --sim-preset a10g-llama3-8b --replicas 16 --requests 5000 --mix chat --rate 40 \
  --seed 1 --policy kvcascade --out $d/a10g-chat-s1.json 2>&1 | grep -v '^  \[' >$d/a10g-chat-s1.txt
$K bench routing "${mf[@]}" --mix mixed --rate 60 --policy kvcascade sglang_cache_aware \
  --out $d/mixedfleet-mixed.json 2>&1 | grep -v '^  \[' >$d/mixedfleet-mixed.txt
$K bench routing "${mf[@]}" --mix chat --rate 180 --policy kvcascade sglang_cache_aware \
  --out $d/mixedfleet-chat180.json 2>&1 | grep -v '^  \[' >$d/mixedfleet-chat180.txt
$K bench routing "${mf[@]}" --mix chat --rate 300 --policy kvcascade sglang_cache_aware \
  --out $d/mixedfleet-chat300.json 2>&1 | grep -v '^  \[' >$d/mixedfleet-chat300.txt
# After the re-read mends (dc73e87: a kind of one replica bounded by the fleet's mean), chat@110
# once more with SGLang's rule:
$K bench routing "${mf[@]}" --mix chat --rate 110 --policy kvcascade sglang_cache_aware \
  --out $d/mixedfleet-chat-dc73e87.json 2>&1 | grep -v '^  \[' >$d/mixedfleet-chat-dc73e87.txt
