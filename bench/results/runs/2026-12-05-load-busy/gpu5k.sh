#!/bin/bash
cd /tmp/bx
for row in "h200-llama3-8b chat 200" "h200-llama3-8b mixed 100" "h200-llama3-8b rl 100" \
           "a10g-llama3-8b chat 40" "a10g-llama3-8b mixed 20" "a10g-llama3-8b rl 20"; do
  set -- $row
  for v in base cap; do
    if [ $v = cap ]; then export KVC_TMP_BUSY_CAP=0.8; else unset KVC_TMP_BUSY_CAP; fi
    ./kvc bench routing --sim-preset $1 --replicas 16 --requests 5000 --mix $2 --rate $3 --policy kvcascade --no-progress > g5k-$v-$1-$2.txt 2>&1
    echo "$v $1 $(grep "^$2@" g5k-$v-$1-$2.txt | head -1)"
  done
done
