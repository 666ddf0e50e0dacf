#!/usr/bin/env bash
# Twenty-first session: one against four routers (the eighteenth session's call.sh: H200 rl,
# seed 1, 5,000 requests, each replay alone, two pairs at a time, 16 cores of the GPU host) for
# the committed code (base) and the candidate (cap05: KVC_EXP_QUEUED_UNCACHED=1
# KVC_EXP_ALLOW_CAP=0.05, this folder's README.md), alternating sets of eight pairs, in one device
# call; gpu-bin as there (kvcascade of the temporary build, stripped, with its libraries).
set -u
c=bench/results/runs/2026-12-06-s18-routers-16core/call.sh
for set in ${SETS:-base cap05}; do
  mkdir -p "$OUT/$set"
  if [ "${set%%-*}" = cap05 ]; then
    export KVC_EXP_QUEUED_UNCACHED=1 KVC_EXP_ALLOW_CAP=0.05
  else
    unset KVC_EXP_QUEUED_UNCACHED KVC_EXP_ALLOW_CAP
  fi
  echo "== $set"
  OUT=$OUT/$set ROUNDS4="1 2|3 4|5 6|7 8" ROUNDS2="" bash $c
done
