#!/usr/bin/env python3
"""Reference outputs of a tiny Hugging Face LlamaForCausalLM, for tests/models/llama_golden_test.cc.

Builds a random-initialised Llama from a fixed seed (GQA, untied embeddings, a non-default
rope_theta, two layers, odd-sized dimensions), then writes to tests/models/golden/:

  llama_tiny.json              the HF config plus the batch geometry and optimizer settings
  llama_tiny.safetensors       with tensors named
      param.<hf name>          initial weights (f32, HF layout: Linear weights are [out, in])
      inputs, targets          int32 [B, T]
      logits                   f32 [B, T, V]   forward in float32
      loss                     f32 [1]         mean token cross-entropy
      grad.<hf name>           f32             gradient of the loss
      step<k>.loss             f32 [1]         loss before AdamW step k (k = 1, 2, 3)
      step3.<hf name>          f32             parameters after 3 torch.optim.AdamW steps
      bf16.logits, bf16.loss   the forward with the model cast to bfloat16

Run with a Python that has torch, transformers and safetensors (never needed by Tessera itself):
    python3 tools/make_llama_golden.py
"""
import json
import os

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "models", "golden")

B, T = 2, 13
LR, B1, B2, EPS, WD = 1e-2, 0.9, 0.95, 1e-8, 0.1


def main():
    torch.manual_seed(1234)
    cfg = LlamaConfig(
        vocab_size=101,
        hidden_size=36,
        intermediate_size=70,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=10,
        max_position_embeddings=64,
        rms_norm_eps=1e-5,
        rope_theta=500.0,
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
        hidden_act="silu",
    )
    cfg._attn_implementation = "eager"
    model = LlamaForCausalLM(cfg).float()
    # HF's init draws N(0, 0.02); scale norms away from 1 so a wrong norm weight cannot hide.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
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

    # Three AdamW steps on the same batch; no weight decay on norm scales (as Tessera and MaxText).
    decay = [p for n, p in model.named_parameters() if not n.endswith("norm.weight")]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("norm.weight")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(B1, B2), eps=EPS)
    model.zero_grad()
    for k in range(1, 4):
        opt.zero_grad()
        _, loss_k = loss_of(model)
        loss_k.backward()
        out[f"step{k}.loss"] = loss_k.detach().reshape(1)
        opt.step()
    for n, p in model.named_parameters():
        out[f"step3.{n}"] = p.detach().clone()

    # bfloat16 forward from the initial weights.
    model_bf16 = LlamaForCausalLM(cfg)
    model_bf16.load_state_dict({n[len("param."):]: v for n, v in out.items() if n.startswith("param.")})
    model_bf16 = model_bf16.to(torch.bfloat16)
    with torch.no_grad():
        lb, lossb = loss_of(model_bf16)
    out["bf16.logits"] = lb.float()
    out["bf16.loss"] = lossb.float().reshape(1)

    os.makedirs(OUT, exist_ok=True)
    save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(OUT, "llama_tiny.safetensors"))
    meta = cfg.to_dict()
    meta.update({"batch": B, "seq": T, "lr": LR, "adam_b1": B1, "adam_b2": B2, "adam_eps": EPS,
                 "adam_weight_decay": WD, "torch": torch.__version__})
    import transformers
    meta["transformers"] = transformers.__version__
    with open(os.path.join(OUT, "llama_tiny.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True, default=str)
    print("loss", float(loss.detach()), "bf16 loss", float(lossb), "step3 loss", float(out["step3.loss"]))


if __name__ == "__main__":
    main()
