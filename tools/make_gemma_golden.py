#!/usr/bin/env python3
"""Reference outputs of tiny Hugging Face Gemma, Gemma 2 and Gemma 3 (text) models, for
tests/models/gemma_golden_test.cc.

Each is random-initialised from a fixed seed (hidden 48, head_dim 16, MLP 96, vocabulary 101, tied
embeddings as every Gemma checkpoint):
  gemma   2 layers, MQA 4/1.
  gemma2  3 layers (sliding, full, sliding; window 5), GQA 4/2, scores scaled by 24^-1/2, soft caps
          small enough to bite on these logits (attention 1.5, final 3.0).
  gemma3  6 layers (five sliding of window 4, one full), GQA 4/2, QK-norm, RoPE theta 1e4 on the
          sliding layers and 1e6 with linear scaling x8 on the full one, scores scaled by 20^-1/2.
Norm weights (Gemma stores w and scales by 1 + w) are moved off their initial zeros so that a
missing one cannot hide; the embedding is drawn at std 0.1 and the projections at 0.15 (gemma: 0.3)
so that greedy decoding does not repeat one token. Writes to tests/models/golden/<name>_tiny.{json,safetensors}:

      param.<hf name>          initial weights (f32, HF layout: Linear weights are [out, in])
      inputs, targets          int32 [B, T]
      logits                   f32 [B, T, V]   forward in float32
      loss                     f32 [1]         mean token cross-entropy
      grad.<hf name>           f32             gradient of the loss
      bf16.logits, bf16.loss   the forward with the model cast to bfloat16
      greedy.prompt            int32 [5]       inputs[0, :5]
      greedy.tokens            int32 [8]       generate(do_sample=False) new tokens of the float32 model
                                               (checked against a loop of full forwards without a cache)

Run with a Python that has torch, transformers and safetensors (never needed by Tessera itself):
    python3 tools/make_gemma_golden.py
"""
import json
import os

import torch
import transformers
from safetensors.torch import save_file
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, GemmaConfig,
                          GemmaForCausalLM)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "models", "golden")

B, T = 2, 13
PROMPT_LEN, NEW_TOKENS = 5, 8
COMMON = dict(vocab_size=101, hidden_size=48, intermediate_size=96, num_attention_heads=4, head_dim=16,
              max_position_embeddings=64, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh",
              bos_token_id=0, eos_token_id=0, pad_token_id=0, tie_word_embeddings=True)


def make(name, config_cls, model_cls, seed, proj_std=0.15, **kw):
    torch.manual_seed(seed)
    cfg = config_cls(**COMMON, **kw)
    cfg._attn_implementation = "eager"
    model = model_cls(cfg).float().eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight") or n.endswith("layernorm.weight"):
                p.copy_(0.1 * torch.randn_like(p))
            elif n.endswith("embed_tokens.weight"):
                p.copy_(0.1 * torch.randn_like(p))
            else:  # projections at std 0.15-0.3 (not HF's 0.02): the blocks, not the token's own
                p.copy_(proj_std * torch.randn_like(p))  # embedding, decide the next token
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
    model.zero_grad()
    prompt = inputs[:1, :PROMPT_LEN]
    with torch.no_grad():
        gen = model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0)
        seq = prompt.clone()
        for _ in range(NEW_TOKENS):
            nxt = model(input_ids=seq, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], dim=1)
    new = gen[:, PROMPT_LEN:]
    assert new.shape[1] == NEW_TOKENS and torch.equal(new, seq[:, PROMPT_LEN:]), (new, seq)
    out["greedy.prompt"] = prompt[0].to(torch.int32).contiguous()
    out["greedy.tokens"] = new[0].to(torch.int32).contiguous()
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
    meta.update({"batch": B, "seq": T, "torch": torch.__version__, "transformers": transformers.__version__})
    with open(os.path.join(OUT, f"{name}_tiny.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True, default=str)
    print(name, "loss", float(loss.detach()), "bf16 loss", float(lossb), "max |logit|",
          float(logits.detach().abs().max()), "greedy", out["greedy.tokens"].tolist())


def main():
    make("gemma", GemmaConfig, GemmaForCausalLM, 2031, proj_std=0.3, num_hidden_layers=2, num_key_value_heads=1,
         rope_theta=10000.0)
    make("gemma2", Gemma2Config, Gemma2ForCausalLM, 2032, num_hidden_layers=3, num_key_value_heads=2,
         rope_theta=10000.0, sliding_window=5, query_pre_attn_scalar=24, attn_logit_softcapping=1.5,
         final_logit_softcapping=3.0)
    make("gemma3", Gemma3TextConfig, Gemma3ForCausalLM, 2033, num_hidden_layers=6, num_key_value_heads=2,
         sliding_window=4, query_pre_attn_scalar=20,
         rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                          "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})


if __name__ == "__main__":
    main()
