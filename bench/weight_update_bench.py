#!/usr/bin/env python3
"""Weight update speed of a kvcascade replica on the GPU host: POST /v1/admin/weights to the first
token on the new weights.

    python3 bench/weight_update_bench.py --kvcascade gpu-bin/kvcascade --out OUT_DIR

Writes a random Llama-3-8B-shaped checkpoint (bf16 safetensors, 4 shards, the shape of the
`llama3-8b` preset) with torch, starts `kvcascade replica --backend cuda --preset llama3-8b`
(random weights of the same shape), warms it with a completion, then updates it from the folder
`--updates` times (mode drain; the folder is in the page cache after it was written, and after the
first update in any case), each time timing: the update request (its load_seconds: reading and
writing the weights), and a one-token completion sent right after it answered (the first token on
the new weights). Prints a table and writes weight_update.json.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

# The llama3-8b preset (replica/model/model_config.cc) as transformers writes it.
CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "tie_word_embeddings": False, "hidden_act": "silu", "torch_dtype": "bfloat16",
}


def write_checkpoint(folder, seed):
    import torch
    from safetensors.torch import save_file
    c = CONFIG
    h, ff, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    g = torch.Generator(device="cuda").manual_seed(seed)

    def rand(*shape):
        return (torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32)
                / math.sqrt(shape[-1])).to(torch.bfloat16).cpu()

    layers = c["num_hidden_layers"]
    shards = [dict() for _ in range(4)]
    shards[0]["model.embed_tokens.weight"] = rand(v, h)
    shards[3]["lm_head.weight"] = rand(v, h)
    shards[3]["model.norm.weight"] = torch.ones(h, dtype=torch.bfloat16)
    for i in range(layers):
        s = shards[i * 4 // layers]
        p = f"model.layers.{i}."
        s[p + "input_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
        s[p + "post_attention_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
        s[p + "self_attn.q_proj.weight"] = rand(q, h)
        s[p + "self_attn.k_proj.weight"] = rand(kv, h)
        s[p + "self_attn.v_proj.weight"] = rand(kv, h)
        s[p + "self_attn.o_proj.weight"] = rand(h, q)
        s[p + "mlp.gate_proj.weight"] = rand(ff, h)
        s[p + "mlp.up_proj.weight"] = rand(ff, h)
        s[p + "mlp.down_proj.weight"] = rand(h, ff)
    os.makedirs(folder, exist_ok=True)
    for k, s in enumerate(shards):
        save_file(s, os.path.join(folder, f"model-{k + 1:05d}-of-00004.safetensors"),
                  metadata={"format": "pt"})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)


def post(port, path, body, timeout=600):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read() or b"{}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvcascade", default="gpu-bin/kvcascade")
    ap.add_argument("--out", required=True)
    ap.add_argument("--port", type=int, default=8190)
    ap.add_argument("--updates", type=int, default=3)
    ap.add_argument("--folder", default="", help="reuse this checkpoint folder")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    # The replica refuses a relative path (its working directory is not this script's).
    folder = os.path.abspath(args.folder or os.path.join(tempfile.mkdtemp(prefix="wu-"), "step-1"))
    t = time.time()
    if not args.folder:
        write_checkpoint(folder, 1)
    write_s = time.time() - t
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    print(f"checkpoint: {size / 1e9:.2f} GB in {folder} (written in {write_s:.1f} s)", flush=True)
    log = open(os.path.join(args.out, "replica.log"), "w")
    replica = subprocess.Popen(
        [args.kvcascade, "replica", "--backend", "cuda", "--preset", "llama3-8b", "--port",
         str(args.port), "--served-model-name", "m", "--weight-version", "random"],
        stdout=log, stderr=subprocess.STDOUT)
    rows = []
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{args.port}/health", timeout=1)
                break
            except Exception:
                time.sleep(0.5)
        prompt = {"model": "m", "prompt": "The weights change every RL step. " * 40,
                  "max_tokens": 1, "temperature": 0}
        st, _, warm = post(args.port, "/v1/completions", prompt)
        assert st == 200, warm
        for k in range(args.updates):
            version = f"step-{k + 1}"
            t0 = time.perf_counter()
            st, headers, rep = post(args.port, "/v1/admin/weights",
                                    {"path": folder, "version": version, "mode": "drain"})
            t1 = time.perf_counter()
            assert st == 200, rep
            st, headers, first = post(args.port, "/v1/completions", prompt)
            t2 = time.perf_counter()
            assert st == 200 and first["weight_version"] == version, first
            row = {"update": k + 1, "version": version, "load_seconds": rep["load_seconds"],
                   "drain_seconds": rep["drain_seconds"], "update_request_seconds": t1 - t0,
                   "first_token_seconds": t2 - t1, "request_to_first_token_seconds": t2 - t0,
                   "flushed_blocks": rep["flushed_blocks"], "gb": size / 1e9,
                   "load_GBps": size / 1e9 / rep["load_seconds"]}
            rows.append(row)
            print(f"update {k + 1}: load {rep['load_seconds']:.2f} s ({row['load_GBps']:.1f} GB/s)"
                  f", update request {t1 - t0:.2f} s, then first token {t2 - t1:.3f} s: "
                  f"request to first token on the new weights {t2 - t0:.2f} s (target <= 5 s)",
                  flush=True)
    finally:
        replica.terminate()
        replica.wait(timeout=60)
    with open(os.path.join(args.out, "weight_update.json"), "w") as f:
        json.dump({"checkpoint_gb": size / 1e9, "write_seconds": write_s, "rows": rows}, f,
                  indent=2)
    worst = max(r["request_to_first_token_seconds"] for r in rows)
    print(f"worst request to first token: {worst:.2f} s ({'meets' if worst <= 5 else 'misses'} "
          f"the 5 s target)")
    return 0 if worst <= 5 else 1


if __name__ == "__main__":
    sys.exit(main())
