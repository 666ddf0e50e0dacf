#!/usr/bin/env bash
# Nineteenth session: the A10G Mooncake row with a host memory tier on every sim replica
# (--kv-host-memory-gb: KV evicted from the 24 GB GPU's pool kept in host memory and loaded back
# over PCIe 4.0 at 25 GB/s instead of recomputed; replica/core/block_pool.h "Host tier"), every
# policy alike. Input as ../2026-12-06-s10-mooncake/run.sh ($MOONCAKE: hiverge/dynamo's
# mooncake_trace.jsonl, sha256 42af0f9a...). From the repository root, on the 2-core VM, nothing
# else running; each replay about 3.5 minutes.
set -u
d=bench/results/runs/2026-12-06-s19-host-tier
k=build/cli/kvcascade
python3 bench/mooncake_trace.py "$MOONCAKE" /tmp/mooncake-x1.jsonl --time-scale 1
replay() {  # name [bench routing options...]
  local name=$1; shift
  $k bench routing --sim-preset a10g-llama3-8b --replicas 16 --trace /tmp/mooncake-x1.jsonl \
    --out "$d/$name.json" "$@" 2>&1 | grep -v '^  \[' > "$d/$name.txt"
}
replay a10g-x1-host32-kvcascade --policy kvcascade --kv-host-memory-gb 32
replay a10g-x1-host32 --policy kvcascade sglang_cache_aware consistent_hash --kv-host-memory-gb 32
rm -rf /tmp/s19dec; mkdir -p /tmp/s19dec
replay a10g-x1-host32-dec --policy kvcascade --kv-host-memory-gb 32 --decisions /tmp/s19dec
gzip -c /tmp/s19dec/*.tsv > $d/a10g-x1-host32-dec.tsv.gz
python3 bench/results/runs/2026-12-06-s18-mooncake-pools/per_pool.py /tmp/mooncake-x1.jsonl \
  <(zcat $d/a10g-x1-host32-dec.tsv.gz) 17899 > $d/a10g-x1-host32-dec-per-pool.txt  # 2,641 + 15,258
python3 bench/mooncake_trace.py "$MOONCAKE" /tmp/mooncake-x0.75.jsonl --time-scale 0.75
$k bench routing --sim-preset a10g-llama3-8b --replicas 16 --trace /tmp/mooncake-x0.75.jsonl \
  --policy kvcascade sglang_cache_aware --kv-host-memory-gb 32 --out $d/a10g-x0.75-host32.json \
  2>&1 | grep -v '^  \[' > $d/a10g-x0.75-host32.txt
for i in 2 3; do replay a10g-x1-host32-kvcascade-run$i --policy kvcascade --kv-host-memory-gb 32; done
