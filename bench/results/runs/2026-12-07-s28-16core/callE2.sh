#!/usr/bin/env bash
# Twenty-eighth session, the second call on the warm host after callE.sh (as run, on one line):
# §3 at 400 KB for 5 s with this session's build and ae10301's router (--router-binary), then the
# mixed fleet's chat@110 with 426d0db's build (gpu-bin/kvcascade-s27) alone.
#   OUT=... bash bench/results/runs/2026-12-07-s28-16core/callE2.sh   (results: f/)
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib
mkdir -p $OUT/f
for b in new base; do
  extra=()
  [ $b = base ] && extra=(--router-binary $PWD/gpu-bin/kvcascade-base)
  timeout 60 gpu-bin/kvcascade bench router --prompt-bytes 400000 --tenants 8 --concurrency 4 \
    --seconds 5 --nginx $PWD/gpu-bin/nginx "${extra[@]}" --out $OUT/f/400kb-$b.json \
    >$OUT/f/400kb-$b.txt 2>&1
  echo "$b: $(grep -E 'proxy CPU per request|throughput|added p99' $OUT/f/400kb-$b.txt | tr '\n' ' ')"
done
timeout 150 gpu-bin/kvcascade-s27 bench routing --sim-preset h200-llama3-8b,a10g-llama3-8b \
  --replicas 16 --requests 5000 --mix chat --rate 110 --seed 1 --policy kvcascade \
  --out $OUT/f/fleet-s27.json 2>&1 | grep -v '^  \[' >$OUT/f/fleet-s27.txt
grep -E '^chat.*kvcascade' $OUT/f/fleet-s27.txt
