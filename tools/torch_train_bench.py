#!/usr/bin/env python3
"""PyTorch reference for bench/train_bench: trains the same model as one of Tessera's presets with
Hugging Face transformers and torch.optim.AdamW on random tokens, and prints one JSON line per
precision: model TFLOP/s (MaxText's count, the same formula Tessera uses), tokens/s and MFU against
the peak given on the command line (Tessera's calibrated peak, so both divide by the same number).

  --model llama-125m   LlamaForCausalLM: emb 768, 12 layers, 12 heads, SwiGLU 2048, vocab 32000, untied
  --model gpt2-124m    GPT2LMHeadModel: emb 768, 12 layers, 12 heads, GELU (tanh) 3072, vocab 50257,
                       learned positions, biases, tied embeddings, no dropout

    python3 tools/torch_train_bench.py --model gpt2-124m --steps 10 --threads 2 \
        --peak-f32 <GFLOP/s> --peak-bf16 <GFLOP/s>
"""
import argparse
import json
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM


def model_flops(B, S, E, H, K, D, M, V, L, gated):
    ffn = 2 * B * S * M * E * (3 if gated else 2)
    qkv = 2 * B * S * E * (H + 2 * K) * D
    proj = 2 * B * S * E * H * D
    attn = 2 * B * S * S * H * D
    return 3 * (L * (ffn + qkv + proj + attn) + 2 * B * S * E * V)


def run_precisions(make_model, V, flops, a, label):
    """Trains a fresh make_model() in each of a.precisions (bf16: CPU autocast) on random tokens of a
    V-word vocabulary, a.batch x a.seq per step, AdamW and clip 1.0, and prints one JSON line per
    precision: the median of a.steps steps after a.warmup, with model TFLOP/s, tokens/s and MFU
    from `flops` per step and the peaks a.peak_f32 / a.peak_bf16 (GFLOP/s). `label` joins the line.
    tools/torch_moe_bench.py measures with it too."""
    for prec in a.precisions.split(","):
        torch.manual_seed(0)
        model = make_model().float()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
        x = torch.randint(0, V, (a.batch, a.seq + 1))
        inputs, targets = x[:, :-1], x[:, 1:]
        times = []
        for step in range(a.warmup + a.steps):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=(prec == "bfloat16")):
                logits = model(input_ids=inputs).logits
                loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, V), targets.reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if step >= a.warmup:
                times.append(time.perf_counter() - t0)
        times.sort()
        t = times[len(times) // 2]
        peak = (a.peak_bf16 if prec == "bfloat16" else a.peak_f32) * 1e9
        print(json.dumps({"impl": "pytorch " + torch.__version__, **label, "dtype": prec, "step_seconds": t,
                          "tflops_per_device": flops / t / 1e12, "tokens_per_second": a.batch * a.seq / t,
                          "mfu": flops / t / peak, "loss": float(loss.detach())}), flush=True)
        del model, opt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["llama-125m", "gpt2-124m"], default="llama-125m")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--peak-f32", type=float, required=True, help="GFLOP/s")
    ap.add_argument("--peak-bf16", type=float, required=True, help="GFLOP/s")
    ap.add_argument("--precisions", default="float32,bfloat16")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.model == "gpt2-124m":
        E, H, K, D, M, V, L = 768, 12, 12, 64, 3072, 50257, a.layers
        cfg = GPT2Config(vocab_size=V, n_positions=a.seq, n_embd=E, n_layer=L, n_head=H, n_inner=M,
                         activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                         layer_norm_epsilon=1e-5, tie_word_embeddings=True)
        make = GPT2LMHeadModel
    else:
        E, H, K, D, M, V, L = 768, 12, 12, 64, 2048, 32000, a.layers
        cfg = LlamaConfig(vocab_size=V, hidden_size=E, intermediate_size=M, num_hidden_layers=L,
                          num_attention_heads=H, num_key_value_heads=K, head_dim=D,
                          max_position_embeddings=a.seq, tie_word_embeddings=False)
        make = LlamaForCausalLM
    cfg._attn_implementation = "sdpa"
    flops = model_flops(a.batch, a.seq, E, H, K, D, M, V, L, gated=(a.model != "gpt2-124m"))
    run_precisions(lambda: make(cfg), V, flops, a, {"model": a.model})


if __name__ == "__main__":
    main()
