#!/usr/bin/env bash
# Eleventh session: issue 28 §2 (several routers) after replicas announce each prompt they queue
# (KvQueued events: every router counts its blocks held there, not only the router that sent
# it). From the repository root, nothing else running.
#  cpu-on-S.txt:  the CPU sim profile's rl mix, 1 and 4 routers, seeds 1 and 2, this build.
#  cpu-off-S.txt: the same with the routers ignoring queued events (a temporary build with
#                 FleetIndexes::note_queued_locked returning at once; not committed): the before.
#  h200-rl-N.txt: the H200 profile's rl mix, 1 / 2 / 4 routers, twice (compare
#                 runs/2026-12-06-s10-routers/rl-*.txt, before).
set -u
d=bench/results/runs/2026-12-06-s11-queued
k=build/cli/kvcascade
for seed in 1 2; do
  $k bench routing --sim-preset cpu-llama3-8b --replicas 16 --requests 5000 --mix rl --rate 70 \
    --seed $seed --policy kvcascade --routers 1 --routers 4 > "$d/cpu-on-$seed.txt" 2>&1
done
for i in 1 2; do
  $k bench routing --replicas 16 --requests 5000 --mix rl --policy kvcascade \
    --routers 1 --routers 2 --routers 4 > "$d/h200-rl-$i.txt" 2>&1
done
# targets-spot/: two cells of issue 28 §1's table after the change (one router: queued events
# only repeat what the router inserted itself), as runs/2026-12-06-s10-targets/run.sh runs them:
#   run h200-rl h200-llama3-8b rl 100 1; run cpu-rl cpu-llama3-8b rl 70 1
# (into targets-spot/), then: python3 bench/routing_target_table.py DIR > DIR/table.md
