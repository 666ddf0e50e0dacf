#!/usr/bin/env bash
# Twenty-fifth session, device call E (the last of its device time, an H100 host's 16 cores;
# gpu-bin: kvcascade-exp = the tree at 3eca987 with ../2026-12-07-s24-cost-moves/switches3.patch,
# switches unset = the committed defaults; its libraries; the gzip'd 4x Mooncake trace): the H200
# chat@200 seed-2 cell with its two baselines in one call (call B measured 23.6 ms against a bound
# from another machine's baselines), then the H200 Mooncake row, committed against
# KVC_EXP_LEAD=0, two and two.
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib
mkdir -p $OUT/e
chat() { timeout 90 gpu-bin/kvcascade-exp bench routing --sim-preset h200-llama3-8b --replicas 16 --requests 5000 --mix chat --rate 200 --seed 2 --policy "$1" --out "$OUT/e/chat-s2-$1.json" 2>&1 | grep -E "^chat" > "$OUT/e/chat-s2-$1.txt"; }
chat kvcascade & chat sglang_cache_aware & chat consistent_hash & wait
cat $OUT/e/chat-s2-*.txt
gunzip -k gpu-bin/mooncake-x4.jsonl.gz
h200() { local tag=$1; shift; env "$@" timeout 100 gpu-bin/kvcascade-exp bench routing --sim-preset h200-llama3-8b --replicas 16 --trace gpu-bin/mooncake-x4.jsonl --policy kvcascade --out "$OUT/e/h200-$tag.json" 2>&1 | grep -E "kvcascade  " > "$OUT/e/h200-$tag.txt"; }
h200 base-r1 & h200 base-r2 & h200 lead0-r1 KVC_EXP_LEAD=0 & h200 lead0-r2 KVC_EXP_LEAD=0 & wait
for f in $OUT/e/h200-*.txt; do echo "$(basename $f): $(cut -c1-110 $f)"; done
tar czf $OUT/e.tar.gz -C $OUT e && rm -rf $OUT/e
