#!/usr/bin/env python3
"""Tiny Hugging Face checkpoints and their logits, for tests/models/hf_convert_test.cc.

Builds three random-initialised models from a fixed seed with transformers and saves each the way
Hugging Face does (save_pretrained), into tests/models/golden/convert/:

  llama_gqa/     LlamaForCausalLM, GQA 4 query / 2 kv heads, untied, rope_theta 5e5 with Llama 3.1
                 scaling (rope_type llama3, factor 8, low 1, high 4, original context 8192), float32,
                 one model.safetensors. Its config.json is rewritten in the layout of the Hub's
                 Llama 3.1 configs (rope_theta and rope_scaling at the top, torch_dtype), which
                 transformers 4 wrote, so both config layouts are read.
  llama_tied/    LlamaForCausalLM, 4 / 4 heads, tie_word_embeddings, default RoPE, float32, sharded
                 (model-0000k-of-0000n.safetensors + model.safetensors.index.json); transformers 5's
                 config layout (rope_parameters, dtype).
  mistral_swa/   MistralForCausalLM, 4 query / 1 kv head, sliding_window 5 (shorter than the 12
                 tokens, so the window matters), rope_theta 1e6, saved in bfloat16.

and for each <name>/ a <name>.logits.safetensors with
  tokens  int32 [B, T]      fixed token ids
  logits  f32 [B, T, V]     the model's logits in float32, computed from the saved folder as
                            transformers loads it (a bfloat16 checkpoint is upcast exactly)

The Llama 3.1 scaling constants are the ones Tessera's rope_type=llama3.1 uses (MaxText's). All
dimensions are tiny and odd-sized (the files total about 260 KB).

Run with a Python that has torch, transformers and safetensors (never needed by Tessera itself):
    /work/venv-tools/bin/python tools/make_convert_golden.py
"""
import json
import os
import shutil

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "models", "golden", "convert")

B, T = 2, 12
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192}


def randomise_norms(model):
    # HF initialises norm weights to 1; move them away so a wrong norm weight cannot hide.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))


def legacy_config(path):
    """Rewrites config.json the way transformers 4 wrote it (and the Hub's Llama 3.1 has it)."""
    with open(path) as f:
        cfg = json.load(f)
    rope = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rope.pop("rope_theta")
    cfg["rope_scaling"] = None if rope.get("rope_type") == "default" else rope
    cfg["torch_dtype"] = cfg.pop("dtype", "float32")
    cfg["transformers_version"] = "4.44.0"
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def save(name, model, tokens, dtype=torch.float32, max_shard_size=None, legacy=False):
    folder = os.path.join(OUT, name)
    shutil.rmtree(folder, ignore_errors=True)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.to(dtype).save_pretrained(folder, **kwargs)
    if legacy:
        legacy_config(os.path.join(folder, "config.json"))
    # The reference comes from the saved folder, loaded as a user loads it, in float32.
    loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    loaded.eval()
    with torch.no_grad():
        logits = loaded(input_ids=tokens).logits.float()
    save_file({"tokens": tokens.to(torch.int32).contiguous(), "logits": logits.contiguous()},
              os.path.join(OUT, name + ".logits.safetensors"),
              metadata={"transformers": __import__("transformers").__version__, "torch": torch.__version__})
    files = sorted(os.listdir(folder))
    print(f"{name}: {files}, logits {tuple(logits.shape)}, |logits| max {logits.abs().max():.3f}")


def main():
    torch.manual_seed(20240611)
    os.makedirs(OUT, exist_ok=True)

    # initializer_range 0.25 (HF: 0.02) makes attention far from uniform, so RoPE, the window and
    # GQA show in the logits.
    common = dict(num_hidden_layers=2, rms_norm_eps=1e-5, hidden_act="silu", attention_dropout=0.0,
                  initializer_range=0.25)
    gqa = LlamaConfig(vocab_size=61, hidden_size=40, intermediate_size=56, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=10, max_position_embeddings=131072,
                      rope_theta=500000.0, rope_scaling=dict(LLAMA3_SCALING), tie_word_embeddings=False,
                      attention_bias=False, mlp_bias=False, **common)
    tied = LlamaConfig(vocab_size=53, hidden_size=24, intermediate_size=44, num_attention_heads=4,
                       num_key_value_heads=4, head_dim=6, max_position_embeddings=256, rope_theta=10000.0,
                       tie_word_embeddings=True, attention_bias=False, mlp_bias=False, **common)
    swa = MistralConfig(vocab_size=59, hidden_size=32, intermediate_size=40, num_attention_heads=4,
                        num_key_value_heads=1, head_dim=8, max_position_embeddings=4096, rope_theta=1e6,
                        sliding_window=5, tie_word_embeddings=False, **common)

    for name, cfg, cls, kwargs in [
        ("llama_gqa", gqa, LlamaForCausalLM, {"legacy": True}),
        ("llama_tied", tied, LlamaForCausalLM, {"max_shard_size": "12KB"}),
        ("mistral_swa", swa, MistralForCausalLM, {"dtype": torch.bfloat16}),
    ]:
        cfg._attn_implementation = "eager"
        model = cls(cfg).float()
        randomise_norms(model)
        tokens = torch.randint(0, cfg.vocab_size, (B, T))
        save(name, model, tokens, **kwargs)


if __name__ == "__main__":
    main()
