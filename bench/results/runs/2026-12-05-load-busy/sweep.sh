#!/bin/bash
# $1: tag; env passes the variant. 9 rows: 3 profiles x 3 mixes, 1,500 requests, kvcascade only.
cd /tmp/bx
tag=$1; N=${N:-1500}
for row in "h200-llama3-8b chat 200" "h200-llama3-8b mixed 100" "h200-llama3-8b rl 100" \
           "a10g-llama3-8b chat 40" "a10g-llama3-8b mixed 20" "a10g-llama3-8b rl 20" \
           "cpu-llama3-8b chat 150" "cpu-llama3-8b mixed 70" "cpu-llama3-8b rl 70"; do
  set -- $row
  ./kvc bench routing --sim-preset $1 --replicas 16 --requests $N --mix $2 --rate $3 --policy kvcascade --no-progress > $tag-$1-$2.txt 2>&1
  echo "$1 $(grep "^$2@" $tag-$1-$2.txt | head -1)"
done
