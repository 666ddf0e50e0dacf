#!/usr/bin/env bash
# `kvcascade bench rl` on the GPU host with the Llama-3-8B shape: two random 16 GB checkpoints
# (bench/weight_update_bench.py's writer), one CUDA replica serving the first, a router in front,
# then the RL loop alternating the two folders. After `bash bench/pack_gpu_bin.sh` here, carry
# gpu-bin:   bash bench/gpu_rl.sh OUT_DIR [bench rl flags...]
set -euo pipefail
out=${1:?usage: gpu_rl.sh OUT_DIR [flags]}
shift
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
ck=$(mktemp -d /tmp/rl-ck-XXXXXX)
python3 -c "import sys; sys.path.insert(0, 'bench'); from weight_update_bench import write_checkpoint; write_checkpoint('$ck/step-0', 1); write_checkpoint('$ck/step-1', 2)"
gpu-bin/kvcascade replica --backend cuda --model "$ck/step-0" --served-model-name m \
  --weight-version step-0 --port 8200 >"$out/replica.log" 2>&1 &
replica=$!
gpu-bin/kvcascade router --port 8300 --replica 127.0.0.1:8200 >"$out/router.log" 2>&1 &
router=$!
trap 'kill $router $replica 2>/dev/null; wait 2>/dev/null; rm -rf "$ck"' EXIT
python3 - <<'PY'
import json, time, urllib.request
for _ in range(600):
    try:
        s = json.load(urllib.request.urlopen("http://127.0.0.1:8300/router/state", timeout=2))
        if any(r.get("weight_version") == "step-0" and r.get("healthy") for r in s["replicas"]):
            break
    except Exception:
        pass
    time.sleep(0.5)
PY
gpu-bin/kvcascade bench rl --router 127.0.0.1:8300 --model m \
  --checkpoints "$ck/step-0,$ck/step-1" --out "$out/rl.json" "$@" | tee "$out/rl.txt"
