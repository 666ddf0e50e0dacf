#!/usr/bin/env bash
# Twenty-eighth session: one against four routers (issue 28 §2; H200 rl, 5,000 requests, seed 1)
# on the 2-core VM, from the repository root: pairs 1-4 with this session's build (rl-rN-i.txt),
# then pairs 5-10 alternating it (new-*) with 426d0db's (s27-*, gpu-bin/kvcascade-s27).
d=bench/results/runs/2026-12-07-s28-mixed-fleet-vm/pairs
for i in 1 2 3 4; do
  for n in 1 4; do
    build/cli/kvcascade bench routing --replicas 16 --requests 5000 --mix rl --seed 1 \
      --policy kvcascade --routers $n >$d/rl-r$n-$i.txt 2>&1
  done
done
for i in 5 6 7 8 9 10; do
  for b in new s27; do
    K=build/cli/kvcascade; [ $b = s27 ] && K=gpu-bin/kvcascade-s27
    for n in 1 4; do
      $K bench routing --replicas 16 --requests 5000 --mix rl --seed 1 --policy kvcascade \
        --routers $n >$d/$b-rl-r$n-$i.txt 2>&1
    done
  done
done
