#!/usr/bin/env python3
"""Writes the tiny Hugging Face checkpoints and transformers' logits that
tests/replica/model/hf_reference_test.cc checks the CPU backend against.

Run where torch and transformers are installed (the GPU host has them; a CPU is enough):

    python3 tests/replica/model/hf_reference/make_hf_reference.py OUT_DIR

For each family it builds a small random model with transformers itself, scales the weights so
that attention, RoPE, biases and norm weights all change the output (transformers' own 0.02 init
gives near-uniform attention, under which a wrong RoPE or bias barely shows), saves it with
`save_pretrained` (safetensors, bf16, the config.json layout transformers writes today), reloads
it from disk in float32 and records the logits of greedy continuations of a fixed set of prompts.
Nothing in the committed reference was written by this project's code: the checkpoint and the
logits both come from transformers. `config.classic.json` is the same config in the layout older
transformers wrote (rope_theta and rope_scaling at the top level), which the test also loads.
"""
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../../bench"))
from hf_parity import build_checkpoint, classic_layout  # noqa: E402

# Positions past original_max_position_embeddings (32) make llama3 RoPE scaling matter.
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 10000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}

COMMON = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=320,
    max_position_embeddings=512,
    rms_norm_eps=1e-5,
    bos_token_id=1,
    eos_token_id=2,
    hidden_act="silu",
)

FAMILIES = {
    # Llama 3.x: llama3 RoPE scaling, untied head.
    "llama3": dict(model_type="llama", tie_word_embeddings=False, rope_parameters=LLAMA3_ROPE,
                   generation=dict(eos_token_id=[2, 3, 4])),
    # Llama 3.2 small: tied embeddings, head_dim given (32 != 64 / 4).
    "llama32": dict(model_type="llama", tie_word_embeddings=True, head_dim=32,
                    rope_parameters=LLAMA3_ROPE,
                    generation=dict(eos_token_id=[2, 3], temperature=0.6, top_p=0.9,
                                    do_sample=True)),
    # Mistral: no sliding window, decoupled head_dim (Mistral-Nemo style).
    "mistral": dict(model_type="mistral", tie_word_embeddings=False, head_dim=32,
                    sliding_window=None,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                    generation=dict()),
    # Qwen2 / Qwen2.5: q/k/v biases, tied embeddings.
    "qwen2": dict(model_type="qwen2", tie_word_embeddings=True, use_sliding_window=False,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                  generation=dict(eos_token_id=[2, 5], temperature=0.7, top_p=0.8, top_k=20,
                                  repetition_penalty=1.05, do_sample=True)),
    # Qwen3 dense: per-head q/k RMSNorm before RoPE, head_dim given, no biases.
    "qwen3": dict(model_type="qwen3", tie_word_embeddings=True, head_dim=32,
                  attention_bias=False, use_sliding_window=False,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                  generation=dict(eos_token_id=[2, 6], temperature=0.6, top_p=0.95, top_k=20,
                                  do_sample=True)),
}

# Token-id prompts (ids 7..319; 0-6 are the special ids above): a short one, one across the
# original RoPE context, one long enough for several 16-token blocks. Each is continued greedily
# by transformers for GENERATED tokens; the logits that chose each of them are recorded, so a
# test can run the engine greedily on the prompt and compare its prefill and decode logits.
PROMPT_LENGTHS = [5, 41, 97]
GENERATED = 6


def prompts():
    g = torch.Generator().manual_seed(1234)
    return [torch.randint(7, 320, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    summary = {"transformers": transformers.__version__, "torch": torch.__version__,
               "families": {}}
    for seed, (family, spec) in enumerate(FAMILIES.items()):
        spec = dict(spec)
        model_type = spec["model_type"]
        generation = spec.pop("generation")
        folder = os.path.join(out_dir, family)
        saved = build_checkpoint(folder, COMMON, spec, seed, generation)
        classic = classic_layout(saved)
        if classic is not None:
            with open(os.path.join(folder, "config.classic.json"), "w") as f:
                json.dump(classic, f, indent=2, sort_keys=True)
                f.write("\n")

        ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        if classic is not None:  # transformers reads the classic layout as the same model
            cfg2 = type(ref.config).from_dict(classic)
            if cfg2.rope_parameters != ref.config.rope_parameters:
                print("WARNING", family, "classic layout reads as", cfg2.rope_parameters,
                      "not", ref.config.rope_parameters)
        records = []
        with torch.no_grad():
            for prompt in prompts():
                seq = list(prompt)
                rows = []
                for _ in range(GENERATED):  # greedy, EOS not special: always GENERATED tokens
                    logits = ref(torch.tensor([seq])).logits[0, -1].float()
                    rows.append([float(f"{x:.8g}") for x in logits.tolist()])
                    seq.append(int(torch.argmax(logits)))
                records.append({"prompt": prompt, "generated": seq[len(prompt):],
                                "logits": rows})
        with open(os.path.join(folder, "reference.json"), "w") as f:
            json.dump({"family": family, "model_type": model_type,
                       "transformers": transformers.__version__, "prompts": records}, f)
            f.write("\n")
        summary["families"][family] = {
            "architectures": saved.get("architectures"),
            "bytes": sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder)),
        }
        print(family, json.dumps(saved, sort_keys=True))
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
