#!/bin/bash
cd /tmp/bx
for v in base cap; do
  for row in "chat 150" "rl 70"; do
    set -- $row
    if [ $v = cap ]; then export KVC_TMP_BUSY_CAP=0.8; else unset KVC_TMP_BUSY_CAP; fi
    ./kvc bench routing --sim-preset cpu-llama3-8b --replicas 16 --requests 5000 --mix $1 --rate $2 --policy kvcascade --no-progress > cpu5k-$v-$1.txt 2>&1
    echo "$v $(grep "^$1@" cpu5k-$v-$1.txt | head -1)"
  done
done
