#!/usr/bin/env python3
"""PyTorch reference for Tessera's MoE training benchmark (bench/RESULTS.md, "Mixture of experts"):
trains Hugging Face's MixtralForCausalLM (--family mixtral: emb 1024, 8 heads of 128, 2 layers, 16
SwiGLU experts of 1024, top-2, vocab 8192) or GptOssForCausalLM (--family gpt_oss: Tessera's
gpt-oss-tiny preset: emb 256, 4/2 heads of 64, 4 layers alternating a 128 window, 16 experts of
256, top-2, vocab 8192) on the same shapes as Tessera's run, batch 4 x 1024 tokens, with
torch.optim.AdamW on random tokens, and prints one JSON line per precision: model TFLOP/s
(MaxText's MoE count, active parameters only: the same formula Tessera uses), tokens/s and MFU
against the peak given on the command line (Tessera's calibrated peak of the same run).

    python3 tools/torch_moe_bench.py --family mixtral --steps 4 --threads 2 --peak-f32 <GFLOP/s> --peak-bf16 <GFLOP/s>
"""
import argparse

import torch
from transformers import GptOssConfig, GptOssForCausalLM, MixtralConfig, MixtralForCausalLM

from torch_train_bench import run_precisions  # tools/, beside this file


def model_flops(B, S, E, H, K, D, F, X, k, V, L, window=0):
    router = 2 * B * S * E * X
    experts = k * (2 * B * S * F * E * 2 + 2 * B * S * F * E)
    qkv = 2 * B * S * E * (H + 2 * K) * D
    proj = 2 * B * S * E * H * D
    full = 2 * B * S * S * H * D
    local = 4 * B * (S * window - window * window / 2) * H * D if 0 < window < S else full
    attn = [local if window and l % 2 == 0 else full for l in range(L)]  # gpt_oss: even layers slide
    return 3 * (L * (router + experts + qkv + proj) + sum(attn) + 2 * B * S * E * V)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--peak-f32", type=float, required=True, help="GFLOP/s")
    ap.add_argument("--peak-bf16", type=float, required=True, help="GFLOP/s")
    ap.add_argument("--precisions", default="float32")
    ap.add_argument("--family", default="mixtral", choices=["mixtral", "gpt_oss"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.family == "mixtral":
        E, H, K, D, F, X, k, V, L, W = 1024, 8, 8, 128, 1024, 16, 2, 8192, 2, 0
        cfg = MixtralConfig(vocab_size=V, hidden_size=E, intermediate_size=F, num_hidden_layers=L,
                            num_attention_heads=H, num_key_value_heads=K, head_dim=D, num_local_experts=X,
                            num_experts_per_tok=k, max_position_embeddings=a.seq, tie_word_embeddings=False,
                            sliding_window=None, router_aux_loss_coef=0.0)
        cfg._attn_implementation = "sdpa"
    else:
        E, H, K, D, F, X, k, V, L, W = 256, 4, 2, 64, 256, 16, 2, 8192, 4, 128
        cfg = GptOssConfig(vocab_size=V, hidden_size=E, intermediate_size=F, num_hidden_layers=L,
                           num_attention_heads=H, num_key_value_heads=K, head_dim=D, num_local_experts=X,
                           num_experts_per_tok=k, sliding_window=W, tie_word_embeddings=False,
                           router_aux_loss_coef=0.0,
                           rope_parameters={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                            "original_max_position_embeddings": 4096, "truncate": False,
                                            "rope_theta": 150000.0})
        cfg._attn_implementation = "eager"  # transformers' GPT-OSS sinks need the eager path
    flops = model_flops(a.batch, a.seq, E, H, K, D, F, X, k, V, L, W)
    family = MixtralForCausalLM if a.family == "mixtral" else GptOssForCausalLM
    run_precisions(lambda: family(cfg), V, flops, a, {"family": a.family})


if __name__ == "__main__":
    main()
