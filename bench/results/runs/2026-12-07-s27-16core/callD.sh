#!/usr/bin/env bash
# Twenty-seventh session, device call D (prepared, see README): issue 28 §3's router CPU on an
# H100 host's 16 cores, where no hypervisor charges each sleep and wake-up as on the 2-core VM.
# gpu-bin: kvcascade (this session's build, stripped), kvcascade-base (ae10301), nginx
# (/usr/sbin/nginx of the VM) and, in gpu-bin/lib, the libraries both need. The base router runs
# under the new build's load generator and fakes (--router-binary). nginx runs as many workers as
# the host has cores; the router one I/O thread.
#   OUT=... bash bench/results/runs/2026-12-07-s27-16core/callD.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}
nproc
mkdir -p "$OUT/d"
for r in 1 2 3; do
  for b in base new; do
    extra=()
    [ "$b" = base ] && extra=(--router-binary "$PWD/gpu-bin/kvcascade-base")
    timeout 120 gpu-bin/kvcascade bench router --seconds 4 --nginx "$PWD/gpu-bin/nginx" \
      "${extra[@]}" --out "$OUT/d/2kb-$b-r$r.json" >"$OUT/d/2kb-$b-r$r.txt" 2>&1
    echo "2 KB $b r$r: $(grep 'proxy CPU per request' "$OUT/d/2kb-$b-r$r.txt")"
  done
done | tee "$OUT/summary-d.txt"
for r in 1 2; do
  timeout 120 gpu-bin/kvcascade bench router --prompt-bytes 400000 --tenants 8 --concurrency 4 \
    --seconds 3 --nginx "$PWD/gpu-bin/nginx" --out "$OUT/d/400kb-new-r$r.json" \
    >"$OUT/d/400kb-new-r$r.txt" 2>&1
  echo "400 KB new r$r: $(grep -E 'proxy CPU per request|throughput|added p99' "$OUT/d/400kb-new-r$r.txt" | tr '\n' ' ')"
done | tee -a "$OUT/summary-d.txt"
