#!/usr/bin/env bash
# Eighth session: the tie-break key change (0b033ad) A/B against its parent (b321afc), alternating,
# on the 2-core development VM with nothing else running. kvc-old / kvc-new: build/cli/kvcascade
# built at each commit.
for i in 1 2 3; do for v in old new; do
  ./kvc-$v bench routing --replicas 16 --requests 5000 --mix rl --policy kvcascade \
    --routers 1 --routers 2 --out ab-$v-$i.json > ab-$v-$i.txt 2>&1
done; done
for i in 4 5 6; do for v in old new; do
  ./kvc-$v bench routing --replicas 16 --requests 5000 --mix rl --policy kvcascade \
    --routers 1 --routers 2 --routers 4 --out ab-$v-$i.json > ab-$v-$i.txt 2>&1
done; done
# All three mixes at the new commit:
./kvc-new bench routing --replicas 16 --requests 5000 --mix chat --mix rl --mix mixed \
  --policy kvcascade --routers 1 --routers 2 --routers 4 --out final-routers.json \
  --plot final-routers.svg > final-routers.txt 2>&1
# The group idle wait (--group-idle-ms 250, SchedulerConfig::affinity_idle) A/B: kvc-new (before
# it) against kvc-idle, alternating, then mixed and the CPU profile's rl row with it.
for i in 1 2 3; do for v in new idle; do
  ./kvc-$v bench routing --replicas 16 --requests 5000 --mix rl --policy kvcascade \
    --routers 1 --routers 2 --out id-$v-$i.json > id-$v-$i.txt 2>&1
done; done
./kvc-idle bench routing --replicas 16 --requests 5000 --mix mixed --policy kvcascade \
  --routers 1 --routers 2 --out id-mixed.json > id-mixed.txt 2>&1
./kvc-idle bench routing --sim-preset cpu-llama3-8b --replicas 16 --requests 5000 --mix rl \
  --rate 70 --seed 1 --policy kvcascade > id-cpu1.txt 2>&1
# At 4cbeb4e (the idle wait in): all three mixes once, then the rl mix five times.
kvcascade bench routing --replicas 16 --requests 5000 --mix chat --mix rl --mix mixed \
  --policy kvcascade --routers 1 --routers 2 --routers 4 --out canon.json --plot canon.svg \
  > canon.txt 2>&1
for i in 1 2 3 4 5; do
  kvcascade bench routing --replicas 16 --requests 5000 --mix rl --policy kvcascade \
    --routers 1 --routers 2 --routers 4 --out fin-$i.json > fin-$i.txt 2>&1
done
