#!/usr/bin/env python3
"""Thirteenth session: the audit's fixes over HTTP on the CUDA backend (GPU host).

Writes two small random Llama checkpoints with transformers (head_dim 64, bf16) and a copy of
the first with a NaN in model.norm.weight, serves the first with `kvcascade replica --backend
cuda`, and checks: greedy completions with logprobs; stop_token_ids ending a choice at its
token; chat with add_generation_prompt false; a refused sampling field (400 naming it); /livez,
/readyz, /v1/info; a NaN checkpoint refused by a weight update (400, the old weights still
serving the same tokens); a streamed request cut by a weight update in abort mode ending every
choice with finish_reason "abort", then [DONE]. Prints one line per check and exits 1 on any
failure. Usage: python3 smoke.py KVCASCADE OUTDIR
"""
import json, os, subprocess, sys, threading, time, urllib.request

import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

kvc, out = sys.argv[1], sys.argv[2]
port = 18123
base = f"http://127.0.0.1:{port}"
failures = []


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + (f": {detail}" if detail else ""), flush=True)
    if not ok:
        failures.append(name)


def call(method, path, body=None, timeout=120):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def checkpoint(folder, seed):
    torch.manual_seed(seed)
    cfg = LlamaConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=8,
                      num_attention_heads=16, num_key_value_heads=4, head_dim=64, vocab_size=260,
                      max_position_embeddings=2048, bos_token_id=None, eos_token_id=256,
                      tie_word_embeddings=False)
    m = LlamaForCausalLM(cfg).to(torch.bfloat16)
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(8.0)  # peaked logits: greedy runs are not near-ties
    m.save_pretrained(folder, safe_serialization=True)


a, b, nan = (os.path.join(out, x) for x in ("ck-a", "ck-b", "ck-nan"))
checkpoint(a, 1)
checkpoint(b, 2)
subprocess.run(["cp", "-r", a, nan], check=True)
t = load_file(os.path.join(nan, "model.safetensors"))
t["model.norm.weight"][0] = float("nan")
save_file(t, os.path.join(nan, "model.safetensors"), metadata={"format": "pt"})

log = open(os.path.join(out, "replica.log"), "w")
proc = subprocess.Popen([kvc, "replica", "--backend", "cuda", "--model", a, "--port", str(port),
                         "--replica-id", "r0", "--weight-version", "step-0"],
                        stdout=log, stderr=subprocess.STDOUT)
try:
    for _ in range(600):
        try:
            if call("GET", "/readyz", timeout=2)[0] == 200:
                break
        except Exception:
            pass
        time.sleep(0.2)
    check("/livez and /readyz", call("GET", "/livez")[0] == 200 and call("GET", "/readyz")[0] == 200)
    st, info = call("GET", "/v1/info")
    check("/v1/info", st == 200, json.dumps(json.loads(info).get("generation_defaults")))
    model = json.loads(info)["model"] if st == 200 else "ck-a"

    greedy = {"model": model, "prompt": "The quick brown fox", "max_tokens": 12, "temperature": 0,
              "n": 4, "logprobs": 3, "return_token_ids": True}
    st, body = call("POST", "/v1/completions", greedy)
    ok = st == 200
    choices = json.loads(body)["choices"] if ok else []
    ids = choices[0]["token_ids"] if ok else []
    check("greedy completions, n=4, logprobs", ok and len(ids) == 12 and
          all(c["token_ids"] == ids for c in choices), body[:200] if not ok else str(ids))
    if ok:
        st, body = call("POST", "/v1/completions", dict(greedy, stop_token_ids=[ids[3]]))
        c = json.loads(body)["choices"][0] if st == 200 else {}
        first = ids.index(ids[3])
        check("stop_token_ids end the choice at the token", st == 200 and
              c.get("finish_reason") == "stop" and c.get("token_ids") == ids[:first + 1],
              body[:300])
    st, body = call("POST", "/v1/chat/completions",
                    {"model": model, "messages": [{"role": "user", "content": "hi"}],
                     "add_generation_prompt": False, "max_tokens": 4, "temperature": 0})
    check("chat with add_generation_prompt false", st == 200, body[:200])
    st, body = call("POST", "/v1/completions", dict(greedy, frequency_penalty=0.5))
    check("frequency_penalty 0.5 refused, named", st == 400 and
          json.loads(body)["error"].get("param") == "frequency_penalty", body[:200])

    st, body = call("POST", "/v1/admin/weights", {"path": nan, "version": "nan"})
    check("NaN checkpoint refused", st == 400 and "model.norm.weight" in body, body[:300])
    st, body = call("POST", "/v1/completions", greedy)
    check("old weights still serve the same tokens", st == 200 and
          json.loads(body)["choices"][0]["token_ids"] == ids)

    events = []
    first_event = threading.Event()

    def stream():
        req = urllib.request.Request(base + "/v1/completions", method="POST",
                                     headers={"content-type": "application/json"},
                                     data=json.dumps({"model": model, "prompt": "Once upon a time",
                                                      "max_tokens": 2000, "n": 8,
                                                      "ignore_eos": True, "stream": True,
                                                      "stream_options": {"include_usage": True}}).encode())
        with urllib.request.urlopen(req, timeout=120) as r:
            for line in r:
                line = line.decode().strip()
                if line.startswith("data: "):
                    events.append(line[6:])
                    first_event.set()

    th = threading.Thread(target=stream)
    th.start()
    first_event.wait(60)  # generating: cut it now
    st, body = call("POST", "/v1/admin/weights", {"path": b, "version": "step-1", "mode": "abort"})
    th.join()
    check("abort-mode update", st == 200 and json.loads(body).get("aborted_groups", 0) >= 1,
          body[:200])
    finish = {}
    for e in events:
        if e == "[DONE]":
            continue
        for c in json.loads(e).get("choices", []):
            if c.get("finish_reason"):
                finish[c["index"]] = c["finish_reason"]
    check("every streamed choice ends with finish_reason abort",
          len(finish) == 8 and set(finish.values()) == {"abort"} and events[-1] == "[DONE]",
          f"{finish}, last {events[-1] if events else None}")
    st, body = call("POST", "/v1/completions", greedy)
    check("new weights serve", st == 200 and json.loads(body)["choices"][0]["token_ids"] != ids)
finally:
    proc.terminate()
    proc.wait(timeout=30)
print("smoke:", "FAILED " + ", ".join(failures) if failures else "all passed")
sys.exit(1 if failures else 0)
