#!/usr/bin/env python3
"""Reference outputs of a tiny Hugging Face GPT2LMHeadModel, for tests/models/gpt2_golden_test.cc.

Builds a random-initialised GPT-2 from a fixed seed (two layers, odd-sized dimensions, tied
embeddings, learned positions, LayerNorm with biases, tanh GELU, biases on every projection) and
writes to tests/models/golden/:

  gpt2_tiny.json              the HF config plus the batch geometry
  gpt2_tiny.safetensors       with tensors named
      param.<hf name>         initial weights (f32, HF layout: GPT-2's Conv1D weights are [in, out],
                              c_attn holds q, k, v side by side)
      inputs, targets         int32 [B, T]
      logits                  f32 [B, T, V]   forward in float32
      loss                    f32 [1]         mean token cross-entropy
      grad.<hf name>          f32             gradient of the loss
      bf16.logits, bf16.loss  the forward with the model cast to bfloat16

Run with a Python that has torch, transformers and safetensors (never needed by Tessera itself):
    python3 tools/make_gpt2_golden.py
"""
import json
import os

import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "models", "golden")

B, T = 2, 13


def main():
    torch.manual_seed(4321)
    cfg = GPT2Config(
        vocab_size=97,
        n_positions=32,
        n_embd=40,
        n_layer=2,
        n_head=4,
        n_inner=88,
        activation_function="gelu_new",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        tie_word_embeddings=True,
        bos_token_id=0,
        eos_token_id=0,
    )
    cfg._attn_implementation = "eager"
    model = GPT2LMHeadModel(cfg).float().eval()
    # HF's init: biases 0, LayerNorm 1/0. Move them off those values so a missing bias cannot hide.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif ".ln_" in name or name.startswith("transformer.ln_f"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    tokens = torch.randint(0, cfg.vocab_size, (B, T + 1))
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    # Tied: lm_head.weight is transformer.wte.weight; named_parameters lists it once.
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

    model_bf16 = GPT2LMHeadModel(cfg)
    model_bf16.load_state_dict({n[len("param."):]: v for n, v in out.items() if n.startswith("param.")},
                               strict=False)
    model_bf16.tie_weights()
    model_bf16 = model_bf16.to(torch.bfloat16).eval()
    with torch.no_grad():
        lb, lossb = loss_of(model_bf16)
    out["bf16.logits"] = lb.float()
    out["bf16.loss"] = lossb.float().reshape(1)

    os.makedirs(OUT, exist_ok=True)
    save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(OUT, "gpt2_tiny.safetensors"))
    meta = cfg.to_dict()
    meta.update({"batch": B, "seq": T, "torch": torch.__version__})
    import transformers
    meta["transformers"] = transformers.__version__
    with open(os.path.join(OUT, "gpt2_tiny.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True, default=str)
    print("loss", float(loss.detach()), "bf16 loss", float(lossb))


if __name__ == "__main__":
    main()
