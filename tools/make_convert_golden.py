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
  qwen2_tied/    Qwen2ForCausalLM (Qwen 2.5): q/k/v biases, GQA 4 / 2, tied embeddings, float32.
  qwen3_qknorm/  Qwen3ForCausalLM: QK-norm, head_dim 10 given in the config, untied, bfloat16.
  gpt2/          GPT2LMHeadModel: LayerNorm, learned positions (n_positions 16), fused c_attn,
                 tanh GELU, tied embeddings, float32.
  mixtral/       MixtralForCausalLM: 4 experts top-2 stored per expert (block_sparse_moe.experts.N.
                 w1/w2/w3, as the Hub's and save_pretrained's), sliding_window 5, bfloat16,
                 sharded.
  gpt_oss/       GptOssForCausalLM: 4 experts top-2 with the fused, interleaved gate_up_proj,
                 biases, sinks, router bias, YaRN, layers alternating a window of 4 and full
                 attention, float32.
  gpt_oss_mxfp4/ the same architecture (hidden 32, expert width 32: MXFP4 packs 32 values a block)
                 with its experts stored as openai/gpt-oss-* store them: gate_up_proj_blocks /
                 _scales and down_proj_blocks / _scales (uint8) and quantization_config mxfp4. Its
                 logits are those of the model with the weights dequantised by transformers' own
                 integrations/mxfp4.py convert_moe_packed_tensors.
  gemma/         GemmaForCausalLM: MQA 4 / 1 heads of 12 (head_dim != hidden / heads), GeGLU with
                 tanh GELU, tied, float32.
  gemma2/        Gemma2ForCausalLM: 3 layers (sliding window 5, full, sliding), GQA 4 / 2, scores
                 scaled by query_pre_attn_scalar 24^-1/2, attention and final soft caps that bite
                 (5 and 4), bfloat16.
  gemma3/        Gemma3ForCausalLM: 7 layers (five sliding of window 4, one full, one sliding), QK-norm,
                 RoPE theta 1e4 on the sliding layers and 1e6 with linear scaling x8 on the full one
                 (transformers 5's rope_parameters per layer type), no soft caps, float32, sharded.
  mxfp4_dequant.safetensors
                 a crafted MXFP4 tensor (blocks uint8 [3, 5, 2, 16] holding every byte value,
                 scales uint8 [3, 5, 2] over exponents -20..+20) and its dequantisation by
                 convert_moe_packed_tensors in float32 and bfloat16 ("dequantized", "dequantized_bf16").

and for each <name>/ a <name>.logits.safetensors with
  tokens  int32 [B, T]      fixed token ids
  logits  f32 [B, T, V]     the model's logits in float32, computed from the saved folder as
                            transformers loads it (a bfloat16 checkpoint is upcast exactly)

The Llama 3.1 scaling constants are the ones Tessera's rope_type=llama3.1 uses (MaxText's). All
dimensions are tiny and odd-sized (the files total about 260 KB).

Run with a Python that has torch, transformers and safetensors (never needed by Tessera itself):
    python3 tools/make_convert_golden.py          # every golden
    python3 tools/make_convert_golden.py --new    # all but llama_gqa, llama_tied, mistral_swa
    python3 tools/make_convert_golden.py --gemma  # only gemma, gemma2, gemma3
"""
import json
import os
import shutil

import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import (AutoModelForCausalLM, Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM,
                          Gemma3TextConfig, GemmaConfig, GemmaForCausalLM, GPT2Config, GPT2LMHeadModel, GptOssConfig,
                          GptOssForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, MixtralConfig,
                          MixtralForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)
from transformers.integrations.mxfp4 import convert_moe_packed_tensors

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "models", "golden", "convert")

B, T = 2, 12
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192}


def randomise_norms(model):
    # HF initialises norm weights to 1 (Gemma's, which scale by 1 + w, to 0); move them away so a
    # wrong norm weight cannot hide.
    centre = 0.0 if model.config.model_type.startswith("gemma") else 1.0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(centre + 0.1 * torch.randn_like(p))


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


def randomise_extras(model):
    # Biases and sinks start at 0; move them so that a missing one cannot hide.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or name.endswith("sinks"):
                p.copy_(0.1 * torch.randn_like(p))


def min_router_margin(model, tokens):
    """The smallest gap between the k-th and (k+1)-th router logit over tokens and layers."""
    k = model.config.num_experts_per_tok
    with torch.no_grad():
        out = model(input_ids=tokens, output_router_logits=True)
    gaps = [(lg.float().sort(-1, descending=True).values[:, k - 1] - lg.float().sort(-1, descending=True).values[:, k])
            .min().item() for lg in out.router_logits]
    return min(gaps)


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
    if hasattr(loaded.config, "num_experts_per_tok"):
        margin = min_router_margin(loaded, tokens)
        print(f"{name}: smallest router margin {margin:.4f}")
        assert margin > 1e-3, "a routing near-tie: choose another seed"
    write_logits(name, tokens, logits)
    files = sorted(os.listdir(folder))
    print(f"{name}: {files}, logits {tuple(logits.shape)}, |logits| max {logits.abs().max():.3f}")


def write_logits(name, tokens, logits):
    save_file({"tokens": tokens.to(torch.int32).contiguous(), "logits": logits.contiguous()},
              os.path.join(OUT, name + ".logits.safetensors"),
              metadata={"transformers": __import__("transformers").__version__, "torch": torch.__version__})


MOE = dict(num_hidden_layers=2, num_local_experts=4, num_experts_per_tok=2, router_aux_loss_coef=0.0,
           output_router_logits=False, initializer_range=0.1, attention_dropout=0.0)
GPT_OSS_ROPE = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                "original_max_position_embeddings": 256, "truncate": False}


def make(name, cls, cfg, seed, **kwargs):
    torch.manual_seed(seed)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    model = cls(cfg).float()
    randomise_norms(model)
    randomise_extras(model)
    tokens = torch.randint(0, cfg.vocab_size, (B, T))
    save(name, model, tokens, **kwargs)
    return model, tokens


def mxfp4_pair(shape_rows, gen, lo, hi):
    """Random MXFP4 blocks [*shape_rows, G, 16] and scales [*shape_rows, G] with exponents in [lo, hi]."""
    *rows, g = shape_rows
    blocks = torch.randint(0, 256, (*rows, g, 16), generator=gen, dtype=torch.int32).to(torch.uint8)
    scales = (127 + torch.randint(lo, hi + 1, (*rows, g), generator=gen, dtype=torch.int32)).to(torch.uint8)
    return blocks, scales


def make_mxfp4_dequant():
    gen = torch.Generator().manual_seed(7)
    blocks = torch.arange(3 * 5 * 2 * 16, dtype=torch.int32).remainder(256).reshape(3, 5, 2, 16)
    blocks = blocks[:, torch.randperm(5, generator=gen)].to(torch.uint8).contiguous()
    scales = (127 + torch.linspace(-20, 20, 3 * 5 * 2).round().to(torch.int32)).reshape(3, 5, 2).to(torch.uint8)
    f32 = convert_moe_packed_tensors(blocks.clone(), scales.clone(), dtype=torch.float32)
    bf16 = convert_moe_packed_tensors(blocks.clone(), scales.clone(), dtype=torch.bfloat16)
    save_file({"blocks": blocks, "scales": scales, "dequantized": f32.contiguous(),
               "dequantized_bf16": bf16.contiguous()}, os.path.join(OUT, "mxfp4_dequant.safetensors"),
              metadata={"transformers": __import__("transformers").__version__, "torch": torch.__version__})
    print(f"mxfp4_dequant: blocks {tuple(blocks.shape)} -> {tuple(f32.shape)}, bf16 equal: "
          f"{torch.equal(f32, bf16.float())}")


def make_gpt_oss_mxfp4(seed):
    """A GPT-OSS folder whose experts are MXFP4, as openai/gpt-oss-* ship them, and its logits."""
    torch.manual_seed(seed)
    cfg = GptOssConfig(vocab_size=67, hidden_size=32, intermediate_size=32, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=8, sliding_window=4, rms_norm_eps=1e-5,
                       layer_types=["sliding_attention", "full_attention"], max_position_embeddings=1024,
                       rope_parameters=dict(GPT_OSS_ROPE), tie_word_embeddings=False, **MOE)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    model = GptOssForCausalLM(cfg).float()
    randomise_norms(model)
    randomise_extras(model)
    gen = torch.Generator().manual_seed(seed)
    X, E, F2 = 4, 32, 64
    packed = {}
    with torch.no_grad():
        for l, layer in enumerate(model.model.layers):
            ex = layer.mlp.experts
            # gate_up_proj [X, E, 2F] is stored as blocks over E: [X, 2F, E/32, 16]; down_proj
            # [X, F, E] as blocks over F: [X, E, F/32, 16]. Exponents -6..-3: weights up to 0.75.
            for proj, rows in (("gate_up_proj", (X, F2, E // 32)), ("down_proj", (X, E, F2 // 2 // 32))):
                blocks, scales = mxfp4_pair(rows, gen, -6, -3)
                w = convert_moe_packed_tensors(blocks.clone(), scales.clone(), dtype=torch.float32)
                getattr(ex, proj).copy_(w)
                packed[f"model.layers.{l}.mlp.experts.{proj}_blocks"] = blocks
                packed[f"model.layers.{l}.mlp.experts.{proj}_scales"] = scales
    model.eval()
    tokens = torch.randint(0, cfg.vocab_size, (B, T))
    with torch.no_grad():
        logits = model(input_ids=tokens).logits.float()
    margin = min_router_margin(model, tokens)
    print(f"gpt_oss_mxfp4: smallest router margin {margin:.4f}")
    assert margin > 1e-3, "a routing near-tie: choose another seed"
    folder = os.path.join(OUT, "gpt_oss_mxfp4")
    shutil.rmtree(folder, ignore_errors=True)
    model.save_pretrained(folder)
    state = load_file(os.path.join(folder, "model.safetensors"))
    state = {k: v for k, v in state.items() if not k.endswith("experts.gate_up_proj") and
             not k.endswith("experts.down_proj")}
    state.update(packed)
    save_file(state, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    write_logits("gpt_oss_mxfp4", tokens, logits)
    print(f"gpt_oss_mxfp4: {sorted(os.listdir(folder))}, |logits| max {logits.abs().max():.3f}")


def main_gemma():
    gemma = dict(vocab_size=67, hidden_size=32, intermediate_size=40, num_attention_heads=4, head_dim=12,
                 rms_norm_eps=1e-6, attention_dropout=0.0, initializer_range=0.25, max_position_embeddings=256,
                 tie_word_embeddings=True)
    make("gemma", GemmaForCausalLM,
         GemmaConfig(num_hidden_layers=2, num_key_value_heads=1, hidden_act="gelu_pytorch_tanh",
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **gemma), 2107)
    make("gemma2", Gemma2ForCausalLM,
         Gemma2Config(num_hidden_layers=3, num_key_value_heads=2, hidden_activation="gelu_pytorch_tanh",
                      sliding_window=5, query_pre_attn_scalar=24, attn_logit_softcapping=5.0,
                      final_logit_softcapping=4.0, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                      **gemma), 2108, dtype=torch.bfloat16)
    make("gemma3", Gemma3ForCausalLM,
         Gemma3TextConfig(num_hidden_layers=7, num_key_value_heads=2, hidden_activation="gelu_pytorch_tanh",
                          sliding_window=4, query_pre_attn_scalar=20, attn_logit_softcapping=None,
                          final_logit_softcapping=None,
                          rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                                           "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
                          **gemma), 2109, max_shard_size="40KB")


def main_new_families():
    qwen = dict(num_hidden_layers=2, rms_norm_eps=1e-6, hidden_act="silu", attention_dropout=0.0,
                initializer_range=0.25, max_position_embeddings=256,
                rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    make("qwen2_tied", Qwen2ForCausalLM,
         Qwen2Config(vocab_size=57, hidden_size=40, intermediate_size=52, num_attention_heads=4,
                     num_key_value_heads=2, tie_word_embeddings=True, **qwen), 2101)
    make("qwen3_qknorm", Qwen3ForCausalLM,
         Qwen3Config(vocab_size=63, hidden_size=32, intermediate_size=44, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=10, tie_word_embeddings=False, **qwen), 2102,
         dtype=torch.bfloat16)
    make("gpt2", GPT2LMHeadModel,
         GPT2Config(vocab_size=71, n_positions=16, n_embd=40, n_layer=2, n_head=4, n_inner=None,
                    activation_function="gelu_new", layer_norm_epsilon=1e-5, initializer_range=0.25,
                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True), 2103)
    make("mixtral", MixtralForCausalLM,
         MixtralConfig(vocab_size=59, hidden_size=32, intermediate_size=24, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=8, sliding_window=5, rms_norm_eps=1e-5,
                       max_position_embeddings=256, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                       tie_word_embeddings=False, **MOE), 2104, dtype=torch.bfloat16, max_shard_size="20KB")
    make("gpt_oss", GptOssForCausalLM,
         GptOssConfig(vocab_size=61, hidden_size=40, intermediate_size=24, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=10, sliding_window=4, rms_norm_eps=1e-5,
                      layer_types=["sliding_attention", "full_attention"], max_position_embeddings=1024,
                      rope_parameters=dict(GPT_OSS_ROPE), tie_word_embeddings=False, **MOE), 2105)
    make_gpt_oss_mxfp4(2106)
    make_mxfp4_dequant()
    main_gemma()


def main():
    os.makedirs(OUT, exist_ok=True)
    if sys.argv[1:] == ["--gemma"]:
        return main_gemma()
    if sys.argv[1:] == ["--new"]:  # only the goldens added after the first three
        return main_new_families()
    torch.manual_seed(20240611)

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
    main_new_families()


if __name__ == "__main__":
    main()
