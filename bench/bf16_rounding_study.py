#!/usr/bin/env python3
"""Where a bf16 engine's disagreements with float32 come from (issue 25's near-tie rule).

The forward pass of the families' models in float32 (numpy), with bf16 rounding at chosen
points only, scored against the same forward without rounding by bench/hf_parity.py's rule: a
position agrees when its argmax is float32's; a disagreement is a near-tie when float32's margin
between its argmax and the chosen token is at most 5% of its top-1 to top-5 gap.

    python3 bench/bf16_rounding_study.py --check     # the forward against transformers' logits
    python3 bench/bf16_rounding_study.py --seeds 3   # the study (about 15 minutes on 2 cores)

Needs numpy only (Debian: python3-numpy; with libopenblas0-pthread it is 25x faster). Not part
of the build or the tests.

--check runs the unrounded forward on the CI fixtures (tests/replica/model/hf_reference: tiny
checkpoints written by transformers, with transformers' float32 logits) and compares logits, so
the study's forward is transformers' math, not ours.

The study: random checkpoints of the parity harness's shapes and weight scales (hf_parity.py:
hidden 512, 4 layers, 8 query / 2 KV heads, vocabulary 320, unit-scale weights, norm weights
1 +- 0.3, biases 0.5), stored in bf16 as a checkpoint is; the harness's three ~930-token prompts,
every position scored. The points are where the CUDA backend (kernels/cuda/llama_step.cu) stores
bf16 -- the residual stream is float32 there and here, and so are the LM head's logits:
  xn        the RMSNorm outputs (the GEMMs' inputs)
  qkv       the q/k/v GEMM's output (after Qwen2's biases / Qwen3's q/k norms: one rounding)
  q         q after RoPE (the attention kernels' input)
  kv        the KV cache (k after RoPE, v)
  p         the attention probabilities before P.V (the tensor-core operand)
  attn      the attention output (the o projection's input)
  o_out     the o projection's output
  gate_up   the gate/up GEMM's output
  act       SwiGLU's output (the down projection's input)
  down_out  the down projection's output
"engine" rounds at every point; "-X" is the engine without X; "only X" rounds at X alone.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

POINTS = ["xn", "qkv", "q", "kv", "p", "attn", "o_out", "gate_up", "act", "down_out"]
HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "replica", "model", "hf_reference")

# The parity harness's prompts (bench/hf_parity.py SYSTEM, QUESTIONS) and model shapes.
SYSTEM = ("You are a careful assistant. Read the document below and answer the question at the "
          "end in one short sentence, citing the paragraph you used. ") * 6
QUESTIONS = ["Q: who wrote the first paragraph?", "Q: what is the main claim of section two?",
             "Q: list the dates mentioned."]
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 256}
COMMON = dict(hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
              num_attention_heads=8, num_key_value_heads=2, vocab_size=320, rms_norm_eps=1e-5)
DEFAULT_ROPE = {"rope_type": "default", "rope_theta": 1000000.0}
FAMILIES = {
    "llama3": dict(tie_word_embeddings=False, rope_parameters=LLAMA3_ROPE),
    "llama32-tied": dict(tie_word_embeddings=True, head_dim=128, rope_parameters=LLAMA3_ROPE),
    "mistral": dict(tie_word_embeddings=False, head_dim=128, rope_parameters=DEFAULT_ROPE),
    "qwen2": dict(tie_word_embeddings=True, rope_parameters=DEFAULT_ROPE, bias=True),
    "qwen3": dict(tie_word_embeddings=True, head_dim=128, rope_parameters=DEFAULT_ROPE,
                  qk_norm=True),
}
DRAWN_VOCAB = 257  # the ids the byte tokenizer draws (hf_parity.py DRAWN_VOCAB)


def bf16(x):
    """Round-to-nearest-even to bfloat16, returned as float32."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + ((u >> 16) & 1) + 0x7FFF) & 0xFFFF0000).astype(np.uint32).view(np.float32)


class Model:
    """Weights (float32 holding bf16 values) and the config fields the forward reads."""

    def __init__(self, config, weights):
        self.c = config
        self.w = weights
        self.heads = config["num_attention_heads"]
        self.kv_heads = config["num_key_value_heads"]
        self.head_dim = config.get("head_dim") or config["hidden_size"] // self.heads
        self.layers = config["num_hidden_layers"]
        self.eps = config["rms_norm_eps"]
        rope = config.get("rope_parameters") or {
            "rope_theta": config.get("rope_theta", 10000.0), **(config.get("rope_scaling") or {})}
        self.inv_freq = inv_freq(rope, self.head_dim)

    def get(self, name):
        return self.w.get(name)


def inv_freq(rope, dim):
    """transformers' default and llama3 RoPE frequencies."""
    inv = 1.0 / (rope["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "llama3":
        factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        orig = rope["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > orig / low, inv / factor, inv)
        smooth = (orig / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < orig / high) & ~(wavelen > orig / low)
        inv = np.where(medium, smoothed, scaled)
    elif kind != "default":
        raise ValueError(f"RoPE type {kind}")
    return inv.astype(np.float32)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "BF16":
            raise ValueError(f"{name}: {t['dtype']} (bf16 checkpoints only)")
        a, b = t["data_offsets"]
        raw = np.frombuffer(data[8 + n + a:8 + n + b], dtype=np.uint16)
        out[name] = (raw.astype(np.uint32) << 16).view(np.float32).reshape(t["shape"])
    return out


def load(folder):
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    return Model(config, read_safetensors(os.path.join(folder, "model.safetensors")))


def random_model(family, seed):
    """A checkpoint of the harness's shapes and scales (hf_parity.py scale_weights), in bf16."""
    spec = dict(FAMILIES[family])
    bias, qk_norm = spec.pop("bias", False), spec.pop("qk_norm", False)
    c = {**COMMON, **spec}
    rng = np.random.default_rng(seed)
    hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    h, ff = c["hidden_size"], c["intermediate_size"]
    nq, nkv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd

    def mat(o, i):
        return bf16(rng.standard_normal((o, i)) / math.sqrt(i))

    def norm(n):
        return bf16(1.0 + 0.3 * rng.standard_normal(n))

    w = {"model.embed_tokens.weight": mat(c["vocab_size"], h), "model.norm.weight": norm(h)}
    if not c["tie_word_embeddings"]:
        w["lm_head.weight"] = mat(c["vocab_size"], h)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(h)
        w[p + "post_attention_layernorm.weight"] = norm(h)
        for name, o in (("q", nq), ("k", nkv), ("v", nkv)):
            w[p + f"self_attn.{name}_proj.weight"] = mat(o, h)
            if bias:
                w[p + f"self_attn.{name}_proj.bias"] = bf16(0.5 * rng.standard_normal(o))
        w[p + "self_attn.o_proj.weight"] = mat(h, nq)
        if qk_norm:
            w[p + "self_attn.q_norm.weight"] = norm(hd)
            w[p + "self_attn.k_norm.weight"] = norm(hd)
        w[p + "mlp.gate_proj.weight"] = mat(ff, h)
        w[p + "mlp.up_proj.weight"] = mat(ff, h)
        w[p + "mlp.down_proj.weight"] = mat(h, ff)
    return Model(c, w)


def forward(m, ids, rounded):
    """float32 logits [T, vocab] of the token ids, rounded to bf16 at the points in `rounded`."""
    def r(x, point):
        return bf16(x) if point in rounded else x

    def rms(x, weight):
        return (x / np.sqrt((x * x).mean(-1, keepdims=True) + m.eps)) * weight

    T, hd, nh, nkv = len(ids), m.head_dim, m.heads, m.kv_heads
    emb = m.get("model.embed_tokens.weight")
    residual = emb[ids].astype(np.float32)
    angles = np.arange(T, dtype=np.float32)[:, None] * m.inv_freq[None]
    cos = np.cos(np.concatenate([angles, angles], -1)).astype(np.float32)
    sin = np.sin(np.concatenate([angles, angles], -1)).astype(np.float32)

    def rope(x):  # [heads, T, hd], rotate_half
        return x * cos + np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1) * sin

    causal = np.tril(np.ones((T, T), dtype=bool))
    for i in range(m.layers):
        p = f"model.layers.{i}."
        xn = r(rms(residual, m.get(p + "input_layernorm.weight")), "xn")
        qkv = []
        for name, heads in (("q", nh), ("k", nkv), ("v", nkv)):
            y = r(xn @ m.get(p + f"self_attn.{name}_proj.weight").T, "qkv")
            b = m.get(p + f"self_attn.{name}_proj.bias")
            if b is not None:
                y = r(y + b, "qkv")
            qkv.append(y.reshape(T, heads, hd).transpose(1, 0, 2))
        q, k, v = qkv
        if m.get(p + "self_attn.q_norm.weight") is not None:
            q = r(rms(q, m.get(p + "self_attn.q_norm.weight")), "qkv")
            k = r(rms(k, m.get(p + "self_attn.k_norm.weight")), "qkv")
        q, k, v = r(rope(q), "q"), r(rope(k), "kv"), r(v, "kv")
        k = np.repeat(k, nh // nkv, 0)
        v = np.repeat(v, nh // nkv, 0)
        s = np.where(causal, (q @ k.transpose(0, 2, 1)) / np.float32(math.sqrt(hd)), -np.inf)
        e = np.exp(s - s.max(-1, keepdims=True)).astype(np.float32)
        o = (r(e, "p") @ v) / e.sum(-1, keepdims=True)
        o = r(o.transpose(1, 0, 2).reshape(T, nh * hd), "attn")
        residual = residual + r(o @ m.get(p + "self_attn.o_proj.weight").T, "o_out")
        xn = r(rms(residual, m.get(p + "post_attention_layernorm.weight")), "xn")
        g = r(xn @ m.get(p + "mlp.gate_proj.weight").T, "gate_up")
        u = r(xn @ m.get(p + "mlp.up_proj.weight").T, "gate_up")
        act = r(g / (1 + np.exp(-g)) * u, "act")
        residual = residual + r(act @ m.get(p + "mlp.down_proj.weight").T, "down_out")
    xn = r(rms(residual, m.get("model.norm.weight")), "xn")
    head = m.get("lm_head.weight")
    return xn @ (emb if head is None else head).T


def check():
    """The unrounded forward against transformers' float32 logits of the CI fixtures."""
    worst = 0.0
    for family in sorted(os.listdir(FIXTURES)):
        folder = os.path.join(FIXTURES, family)
        if not os.path.isdir(folder):
            continue
        m = load(folder)
        with open(os.path.join(folder, "reference.json")) as f:
            ref = json.load(f)
        for rec in ref["prompts"]:
            seq = rec["prompt"] + rec["generated"]
            logits = forward(m, np.array(seq), set())
            n = len(rec["prompt"])
            for i, row in enumerate(rec["logits"]):
                want = np.array(row, dtype=np.float64)
                got = logits[n - 1 + i].astype(np.float64)
                rel = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
                worst = max(worst, rel)
        print(f"{family}: largest relative logit error up to this family {worst:.2e}")
    ok = worst <= 1e-4  # hf_reference_test.cc's bound for the CPU backend
    print("forward matches transformers" if ok else "forward DIFFERS from transformers")
    return ok


def score(ref, got):
    ref, got = ref[:, :DRAWN_VOCAB], got[:, :DRAWN_VOCAB]
    best, mine = ref.argmax(-1), got.argmax(-1)
    top = -np.sort(-ref, -1)[:, :5]
    rows = np.arange(len(ref))
    margin = ref[rows, best] - ref[rows, mine]
    miss = mine != best
    gap = top[:, 0] - top[:, 4]
    share = np.where(miss, margin / gap, 0.0)
    # Each disagreement that is not a near-tie: its position, share of the gap and the gap.
    events = [[int(i), round(float(share[i]), 4), round(float(gap[i]), 4)]
              for i in np.nonzero(share > 0.05)[0]]
    return {"positions": len(ref), "disagreements": int(miss.sum()),
            "not_near_ties": int((share > 0.05).sum()), "worst_share": float(share.max()),
            "sq_err": float(((got - ref) ** 2).sum()), "n_err": int(ref.size), "events": events}


def shared_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def study(seeds):
    configs = {"engine": set(POINTS)}
    configs.update({f"-{p}": set(POINTS) - {p} for p in POINTS})
    configs["-o_out -down_out"] = set(POINTS) - {"o_out", "down_out"}
    configs["-o_out -down_out -gate_up"] = set(POINTS) - {"o_out", "down_out", "gate_up"}
    configs["every GEMM output float32 (xn q kv p attn act)"] = {"xn", "q", "kv", "p", "attn",
                                                                 "act"}
    configs["attention's operands only (q kv p)"] = {"q", "kv", "p"}
    configs["attention's operands and output (q kv p attn)"] = {"q", "kv", "p", "attn"}
    configs.update({f"only {p}": {p} for p in POINTS})
    totals = {c: {} for c in configs}
    for fi, family in enumerate(FAMILIES):
        for k in range(seeds):
            m = random_model(family, 100 + fi + 1000 * k)
            scored = []  # the prompts scored so far: a position they share is scored once
            for question in QUESTIONS:
                ids = [1] + list((SYSTEM + question).encode())
                # Causal attention: a position whose tokens up to it another prompt has too has
                # that prompt's logits, and is not scored again.
                start = max([shared_prefix(ids, other) for other in scored], default=0)
                scored.append(ids)
                ids = np.array(ids)
                ref = forward(m, ids, set())
                for name, rounded in configs.items():
                    got = forward(m, ids, rounded)
                    for key, val in score(ref[start:], got[start:]).items():
                        t = totals[name]
                        if key == "events":  # [family, seed, prompt, position, share, gap]
                            t.setdefault(key, []).extend(
                                [family, k, len(scored) - 1, start + e[0], e[1], e[2]]
                                for e in val)
                        elif key == "worst_share":
                            t[key] = max(t.get(key, 0.0), val)
                        else:
                            t[key] = t.get(key, 0) + val
            print(f"{family} seed {k}: engine so far {totals['engine']}", flush=True)
    return totals


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--json", help="write the study's totals here")
    args = ap.parse_args()
    if not check():
        return 1
    if args.check:
        return 0
    totals = study(args.seeds)
    print("| configuration | positions | disagreements | not near-ties | worst share of the "
          "top-1/5 gap | RMS logit error |\n|---|---|---|---|---|---|")
    for name, t in totals.items():
        print(f"| {name} | {t['positions']} | {t['disagreements']} "
              f"({100 * t['disagreements'] / t['positions']:.2f}%) | {t['not_near_ties']} | "
              f"{100 * t['worst_share']:.1f}% | {math.sqrt(t['sq_err'] / t['n_err']):.2e} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(totals, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
