#!/usr/bin/env bash
# Eighteenth session: where the A10G Mooncake row's 16 pools lose against one pooled cache.
# Input as in ../2026-12-06-s10-mooncake/run.sh ($MOONCAKE: hiverge/dynamo's mooncake_trace.jsonl,
# sha256 42af0f9a...). From the repository root; each replay about 3.5 minutes on the 2-core VM.
set -u
d=bench/results/runs/2026-12-06-s18-mooncake-pools
k=build/cli/kvcascade
python3 bench/mooncake_trace.py "$MOONCAKE" /tmp/mooncake-x1.jsonl --time-scale 1
python3 bench/mooncake_trace.py "$MOONCAKE" /tmp/mooncake-x0.75.jsonl --time-scale 0.75
replay() {  # name trace [bench routing options...]
  local name=$1 trace=$2; shift 2
  rm -rf /tmp/s18dec/$name; mkdir -p /tmp/s18dec/$name
  $k bench routing --sim-preset a10g-llama3-8b --replicas 16 --trace "$trace" \
    --decisions /tmp/s18dec/$name --out "$d/$name.json" "$@" 2>&1 | grep -v '^  \[' > "$d/$name.txt"
}
# a10g-x1-decisions: the same replay before the decisions file had sent_s and e2e_ms.
replay a10g-x1-times /tmp/mooncake-x1.jsonl --policy kvcascade
replay a10g-x1-lip /tmp/mooncake-x1.jsonl --policy kvcascade --kv-cold-reuse-rate 1
replay a10g-x0.75 /tmp/mooncake-x0.75.jsonl --policy kvcascade sglang_cache_aware consistent_hash
for f in /tmp/s18dec/a10g-x1-times/*.tsv; do gzip -c "$f" > $d/a10g-x1-times.tsv.gz; done
for f in /tmp/s18dec/a10g-x1-lip/*.tsv; do gzip -c "$f" > $d/a10g-x1-lip.tsv.gz; done
for p in kvcascade sglang_cache_aware; do
  gzip -c /tmp/s18dec/a10g-x0.75/*-$p-routers1.tsv > $d/a10g-x0.75-$p.tsv.gz
done
# Offline, from the replays' decisions (seconds each):
for run in a10g-x1-decisions a10g-x1-times a10g-x1-lip; do
  python3 $d/per_pool.py /tmp/mooncake-x1.jsonl <(zcat $d/$run.tsv.gz) 2641 > $d/$run-per-pool.txt
done
for p in kvcascade sglang_cache_aware; do
  python3 $d/per_pool.py /tmp/mooncake-x0.75.jsonl <(zcat $d/a10g-x0.75-$p.tsv.gz) 2641 \
    > $d/a10g-x0.75-$p-per-pool.txt
done
python3 $d/bounded_routing.py /tmp/mooncake-x1.jsonl 16 0 2641 > $d/bounded-unbounded.txt
python3 $d/bounded_routing.py /tmp/mooncake-x1.jsonl 16 2641 0 lru > $d/bounded-lru2641.txt
python3 $d/bounded_routing.py /tmp/mooncake-x1.jsonl 16 2641 0 lip > $d/bounded-lip2641.txt
python3 $d/bounded_routing.py /tmp/mooncake-x1.jsonl 16 2641 0 slru0.8 > $d/bounded-slru2641.txt
python3 $d/bounded_routing.py /tmp/mooncake-x1.jsonl 16 2641 0 lru history > $d/bounded-lru-history.txt
python3 $d/bounded_routing.py /tmp/mooncake-x1.jsonl 16 2641 0 lip history > $d/bounded-lip-history.txt
# Temporary builds (not committed; router/policy/policies.cc make_policy reading KVC_BUSY_CAP and
# KVC_WORK_BOUND into KvCascadePolicyConfig::busy_cap / work_bound_factor), with LIP:
#   KVC_BUSY_CAP=0.95 kvcascade bench routing ... --kv-cold-reuse-rate 1   -> temp-busycap0.95.txt
#   KVC_WORK_BOUND=1.5 kvcascade bench routing ... --kv-cold-reuse-rate 1  -> temp-workbound1.5.txt
(cd $d && python3 reuse_classes.py /tmp/mooncake-x1.jsonl > reuse_classes.txt)
# The default against LIP, alternating, two more runs each:
for run in 2 3; do
  for rate in 0.1 1; do
    $k bench routing --sim-preset a10g-llama3-8b --replicas 16 --trace /tmp/mooncake-x1.jsonl \
      --policy kvcascade --kv-cold-reuse-rate $rate --out "$d/ab-rate$rate-run$run.json" 2>&1 |
      grep -v '^  \[' > "$d/ab-rate$rate-run$run.txt"
  done
done
# Routes that stay put (bound 1.2, pools under LRU / LIP), with the live replay's times, held:
for r in lru lip; do
  (cd $d && python3 greedy_held.py /tmp/mooncake-x1.jsonl <(zcat a10g-x1-times.tsv.gz) $r /tmp/greedy-$r.tsv &&
    python3 per_pool.py /tmp/mooncake-x1.jsonl /tmp/greedy-$r.tsv 2641 | grep -v "replay\|greedy  \|by the router")
done > $d/greedy-held.txt
