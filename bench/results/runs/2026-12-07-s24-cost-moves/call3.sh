#!/usr/bin/env bash
# Twenty-fourth session, device call 3 (call2.sh cut to what the session's device time left
# allows: two rounds, no router pairs), same gpu-bin (kvcascade-exp: the tree with
# holders_keep_prefixes and holder_lead_bytes 2048, plus switches3.patch). Each round's logs are
# packed as soon as it ends (the device tool returns at most 8 files).
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
gunzip -k gpu-bin/mooncake-x1.jsonl.gz gpu-bin/mooncake-x4.jsonl.gz
run() {  # round, preset, trace, tag, then VAR=value switches
  local round=$1 preset=$2 trace=$3 tag=$4; shift 4
  local extra=""
  [ "$preset" = a10g-llama3-8b ] && extra="--kv-host-memory-gb 32"
  env "$@" timeout 300 gpu-bin/kvcascade-exp bench routing --sim-preset "$preset" --replicas 16 \
    --trace "gpu-bin/$trace" --policy kvcascade $extra \
    --out "$OUT/$round/$tag.json" 2>&1 | grep -v '^  \[' >"$OUT/$round/$tag.txt"
}
pack() {
  for f in "$OUT/$1"/*.txt; do
    echo "$1/$(basename "$f" .txt): $(grep -E '^[^ ]+ +kvcascade ' "$f" | head -1)"
  done | tee -a "$OUT/summary.txt"
  tar czf "$OUT/$1.tar.gz" -C "$OUT" "$1" && rm -rf "${OUT:?}/$1"
}
mkdir -p "$OUT/h200" "$OUT/a10g"
x4=mooncake-x4.jsonl; x1=mooncake-x1.jsonl
run h200 h200-llama3-8b $x4 keep-r1 & run h200 h200-llama3-8b $x4 keep-r2 &
run h200 h200-llama3-8b $x4 keep-r3 & run h200 h200-llama3-8b $x4 slack2-r1 KVC_EXP_SLACK=2 &
wait
stamp "h200 round done"
pack h200
run a10g a10g-llama3-8b $x1 keep-r1 & run a10g a10g-llama3-8b $x1 keep-r2 &
run a10g a10g-llama3-8b $x1 slack2-r1 KVC_EXP_SLACK=2 &
run a10g a10g-llama3-8b $x1 hor300-r1 KVC_EXP_MAX_HORIZON_S=300 &
wait
stamp "a10g round done"
pack a10g
