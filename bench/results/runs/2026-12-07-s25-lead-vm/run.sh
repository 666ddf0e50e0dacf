#!/usr/bin/env bash
# Twenty-fifth session, on the 2-core VM with nothing else running: the A10G Mooncake row with the
# committed defaults against KVC_EXP_LEAD=0 (no lead allowance above the work bound), alternating,
# with --decisions. K: kvcascade-exp (this session's tree with
# ../2026-12-07-s24-cost-moves/switches3.patch); TRACE: bench/mooncake_trace.py --time-scale 1.
set -u
d=bench/results/runs/2026-12-07-s25-lead-vm
k=${K:-/tmp/expbin/kvcascade-exp}
trace=${TRACE:-/tmp/mooncake-x1.jsonl}
a10g() {  # tag, then VAR=value switches
  local tag=$1; shift
  mkdir -p "/tmp/dec25-$tag"
  env "$@" "$k" bench routing --sim-preset a10g-llama3-8b --replicas 16 --trace "$trace" \
    --policy kvcascade --kv-host-memory-gb 32 --decisions "/tmp/dec25-$tag" \
    --out "$d/a10g-$tag.json" 2>&1 | grep -v '^  \[' >"$d/a10g-$tag.txt"
  gzip -c /tmp/dec25-"$tag"/*.tsv >"$d/decisions-$tag.tsv.gz"
}
for i in ${ROUNDS:-1 2}; do
  a10g "base-v$i"
  a10g "lead0-v$i" KVC_EXP_LEAD=0
done
