#!/usr/bin/env bash
# Twenty-second session: one against four routers with the replicas' work announcements (KvWork:
# every router counts a send once the replica announces it, not at the next load report) against
# the build before them, in one device call: the eighteenth session's pairs (H200 rl mix, seed 1,
# 5,000 requests, 16 sim replicas, kvcascade, every replay in an invocation of its own), four
# replays at a time on the GPU host's 16 cores, each round: base one router, base four routers,
# announced one router, announced four routers. gpu-bin: kvcascade (this build, stripped),
# kvcascade-base (the build before, a251720) and their
# libraries (kvcascade-base was built with ../2026-12-07-s22-routers-poll/global-unacked.patch,
# whose switch is off here). SLOTS: the replays of a round, name:routers (default the four
# above). With gpu-bin carried:
#   OUT=... ROUNDS="1 2 3 4 5 6 7 8" bash bench/results/runs/2026-12-07-s22-routers-announced/announced.sh
#   OUT=... ROUNDS="9 10 11 12 13 14 15 16" SLOTS="announced:1 announced:2 announced:4 base:4" bash ...
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}
nproc
mkdir -p "$OUT/logs"
replay() {  # name, binary, pair, routers
  timeout 280 "$2" bench routing --replicas 16 --requests 5000 --mix rl --seed 1 \
    --policy kvcascade --routers "$4" >"$OUT/logs/rl-$1-r$4-$3.txt" 2>&1
}
SECONDS=0
for i in ${ROUNDS:-1 2 3 4 5 6}; do
  for slot in ${SLOTS:-base:1 base:4 announced:1 announced:4}; do
    name=${slot%%:*}
    bin=gpu-bin/kvcascade
    [ "$name" = base ] && bin=gpu-bin/kvcascade-base
    replay "$name" "$bin" "$i" "${slot##*:}" &
  done
  wait
  echo "round $i done at $SECONDS s"
done
for name in base announced; do
  for i in ${ROUNDS:-1 2 3 4 5 6}; do
    for n in 1 2 4; do
      f="$OUT/logs/rl-$name-r$n-$i.txt"
      [ -f "$f" ] || continue
      echo "$name pair $i routers $n: $(grep -E '^rl +kvcascade' "$f" | awk '{print $5, $6, $7, $9, $10, $11, $14}')"
    done
  done
done | tee "$OUT/summary.txt"
tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$OUT/logs"
