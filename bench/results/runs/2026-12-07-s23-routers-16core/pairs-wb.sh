#!/usr/bin/env bash
# Twenty-third session: one against four routers with the work bound at 1.05x the mean
# (gpu-bin/kvcascade-exp with KVC_EXP_WORK_BOUND=1.05, ../2026-12-07-s23-mooncake-16core/
# switches.patch) beside the committed 1.1 (gpu-bin/kvcascade) in the same rounds: the pairs of
# pairs.sh, each round wb105 one router, wb105 four, base one, base four. Called by
# ../2026-12-07-s23-mooncake-16core/ab.sh when PAIRS is set (PAIRS="41 42 43 44"), logs in
# $OUT/logs, summary in $OUT/pairs-summary.txt.
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}
replay() {  # name, pair, routers
  local bin=gpu-bin/kvcascade env=()
  [ "$1" = wb105 ] && bin=gpu-bin/kvcascade-exp env=(KVC_EXP_WORK_BOUND=1.05)
  env "${env[@]}" timeout 280 $bin bench routing --replicas 16 --requests 5000 --mix rl --seed 1 \
    --policy kvcascade --routers "$3" >"$OUT/logs/rl-$1-r$3-$2.txt" 2>&1
}
for i in $PAIRS; do
  replay wb105 "$i" 1 & replay wb105 "$i" 4 & replay base "$i" 1 & replay base "$i" 4 &
  wait
  echo "pairs $i done at $SECONDS s"
done
for name in wb105 base; do
  for i in $PAIRS; do
    for n in 1 4; do
      echo "$name pair $i routers $n: $(grep -E '^rl +kvcascade' "$OUT/logs/rl-$name-r$n-$i.txt" | awk '{print $5, $6, $7, $9, $10, $11, $14}')"
    done
  done
done | tee "$OUT/pairs-summary.txt"
