#!/usr/bin/env bash
# Twenty-fourth session: one against four routers, the new defaults (kvcascade-exp as built for
# call2/call3: ca12b25's rule, switches3.patch; KVC_EXP_SLACK=2) against the old ones
# (KVC_EXP_KEEP=0, slack 4), alternating, on the 2-core VM, H200 rl mix, seed 1, 5,000 requests.
set -u
d=bench/results/runs/2026-12-07-s24-cost-moves/after
k=gpu-bin/kvcascade-exp
for i in ${ROUNDS:-3 4}; do
  for v in "new KVC_EXP_SLACK=2" "old KVC_EXP_KEEP=0 KVC_EXP_SLACK=4"; do
    set -- $v; tag=$1; shift
    for n in 1 4; do
      env "$@" $k bench routing --replicas 16 --requests 5000 --mix rl --seed 1 --policy kvcascade \
        --routers $n 2>&1 | grep -v '^  \[' >"$d/rl-$tag-r$n-$i.txt"
    done
  done
done
