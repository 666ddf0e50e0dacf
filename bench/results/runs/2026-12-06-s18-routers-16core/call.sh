#!/usr/bin/env bash
# Eighteenth session: more of the fourteenth session's one-against-four-routers pairs on the GPU
# host's 16 CPU cores (../2026-12-06-s14-routers-16core/call.sh: H200 rl mix, seed 1, 5,000
# requests, 16 sim replicas, kvcascade, every replay in an invocation of its own, two pairs = four
# replays at a time), six more pairs, then two one-against-two pairs alike. gpu-bin here holds only
# kvcascade (stripped) and the libraries the host lacks:
#   mkdir -p gpu-bin/lib; cp build/cli/kvcascade gpu-bin/; strip gpu-bin/kvcascade; cp -L the
#   prometheus/utf8proc/simdjson/tcmalloc libraries of `ldd build/cli/kvcascade` into gpu-bin/lib
# then with gpu-bin carried: OUT=... bash bench/results/runs/2026-12-06-s18-routers-16core/call.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}
nproc
k=gpu-bin/kvcascade
mkdir -p "$OUT/logs"
replay() {  # pair, routers
  timeout 280 $k bench routing --replicas 16 --requests 5000 --mix rl --seed 1 \
    --policy kvcascade --routers "$2" >"$OUT/logs/rl-r$2-$1.txt" 2>&1
}
SECONDS=0
# ROUNDS4 / ROUNDS2: the rounds to run, '|' between them (fewer where device time is short).
IFS='|' read -ra rounds4 <<<"${ROUNDS4-1 2|3 4|5 6}"
IFS='|' read -ra rounds2 <<<"${ROUNDS2-7 8}"
for round in "${rounds4[@]}"; do
  for i in $round; do
    replay "$i" 1 &
    replay "$i" 4 &
  done
  wait
  echo "round $round (1 and 4 routers) done at $SECONDS s"
done
for round in "${rounds2[@]}"; do
  for i in $round; do
    replay "$i" 1 &
    replay "$i" 2 &
  done
  wait
  echo "round $round (1 and 2 routers) done at $SECONDS s"
done
for i in $(seq 1 8); do
  for n in 1 2 4; do
    f="$OUT/logs/rl-r$n-$i.txt"
    [ -f "$f" ] || continue
    echo "pair $i routers $n: $(grep -E '^rl +kvcascade' "$f" | awk '{print $5, $6, $7, $9, $10, $11, $14}')"
  done
done | tee "$OUT/summary.txt"
tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$OUT/logs"
