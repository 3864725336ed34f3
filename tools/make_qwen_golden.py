#!/usr/bin/env python3
"""Reference outputs of tiny Hugging Face Qwen2ForCausalLM and Qwen3ForCausalLM models, for
tests/models/qwen_golden_test.cc.

Each is random-initialised from a fixed seed (two layers, GQA 4/2, head_dim 10, hidden 40, MLP
70, vocabulary 101, rope_theta 1e6); Qwen 2.5 with its q/k/v biases, Qwen 3 with QK-norm, one
tied and one untied. Biases and norm weights are moved off their initial values so that a missing
one cannot hide. Writes to tests/models/golden/<name>_tiny.{json,safetensors}:

      param.<hf name>          initial weights (f32, HF layout: Linear weights are [out, in])
      inputs, targets          int32 [B, T]
      logits                   f32 [B, T, V]   forward in float32
      loss                     f32 [1]         mean token cross-entropy
      grad.<hf name>           f32             gradient of the loss
      bf16.logits, bf16.loss   the forward with the model cast to bfloat16

Run with a Python that has torch, transformers and safetensors (never needed by Tessera itself):
    python3 tools/make_qwen_golden.py
"""
import json
import os

import torch
from safetensors.torch import save_file
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "models", "golden")

B, T = 2, 13
COMMON = dict(vocab_size=101, hidden_size=40, intermediate_size=70, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=1e6,
              hidden_act="silu", bos_token_id=0, eos_token_id=0)


def make(name, config_cls, model_cls, seed, **kw):
    torch.manual_seed(seed)
    cfg = config_cls(**COMMON, **kw)
    cfg._attn_implementation = "eager"
    model = model_cls(cfg).float().eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif n.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    tokens = torch.randint(0, cfg.vocab_size, (B, T + 1))
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    out = {f"param.{n}": p.detach().clone() for n, p in model.named_parameters()}
    out["inputs"] = inputs.to(torch.int32)
    out["targets"] = targets.to(torch.int32)

    def loss_of(m):
        logits = m(input_ids=inputs).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, cfg.vocab_size), targets.reshape(-1))
        return logits, loss

    logits, loss = loss_of(model)
    loss.backward()
    out["logits"] = logits.detach().float()
    out["loss"] = loss.detach().reshape(1)
    for n, p in model.named_parameters():
        out[f"grad.{n}"] = p.grad.detach().clone()
    model_bf16 = model_cls(cfg)
    model_bf16.load_state_dict({n[len("param."):]: v for n, v in out.items() if n.startswith("param.")},
                               strict=False)
    model_bf16.tie_weights()
    model_bf16 = model_bf16.to(torch.bfloat16).eval()
    with torch.no_grad():
        lb, lossb = loss_of(model_bf16)
    out["bf16.logits"] = lb.float()
    out["bf16.loss"] = lossb.float().reshape(1)
    os.makedirs(OUT, exist_ok=True)
    save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(OUT, f"{name}_tiny.safetensors"))
    meta = cfg.to_dict()
    meta.update({"batch": B, "seq": T, "torch": torch.__version__})
    import transformers
    meta["transformers"] = transformers.__version__
    with open(os.path.join(OUT, f"{name}_tiny.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True, default=str)
    print(name, "loss", float(loss.detach()), "bf16 loss", float(lossb))


def main():
    make("qwen2", Qwen2Config, Qwen2ForCausalLM, 2025, tie_word_embeddings=True)
    make("qwen3", Qwen3Config, Qwen3ForCausalLM, 2026, tie_word_embeddings=False, head_dim=10,
         attention_bias=False)


if __name__ == "__main__":
    main()
