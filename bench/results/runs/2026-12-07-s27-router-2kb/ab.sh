#!/usr/bin/env bash
# Twenty-seventh session: router CPU per request at 2 KB prompts (issue 28 §3), the committed
# ae10301's router (/tmp/kvc-base, its build, stripped) against this session's (/tmp/kvc-new, the
# build of the commit that adds this script), alternating, under the same load generator and fakes
# (both runs are /tmp/kvc-new's `bench router`, the base through --router-binary), nothing else
# running on the 2-core VM.
#   ROUNDS="1 2 3 4" bash bench/results/runs/2026-12-07-s27-router-2kb/ab.sh
d=bench/results/runs/2026-12-07-s27-router-2kb
for r in ${ROUNDS:-1 2 3 4}; do
  for b in base new; do
    extra=()
    [ "$b" = base ] && extra=(--router-binary /tmp/kvc-base)
    /tmp/kvc-new bench router --seconds 4 "${extra[@]}" --out $d/$b-r$r.json > $d/$b-r$r.txt 2>&1
    echo "$b r$r: $(grep 'proxy CPU per request' $d/$b-r$r.txt)"
  done
done
