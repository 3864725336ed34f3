#!/usr/bin/env python3
"""Reference outputs of tiny Hugging Face MixtralForCausalLM and GptOssForCausalLM models, for the MoE
golden tests (see tests/models/golden/MOE_NOTES.md for the numerics they pin down).

Each is random-initialised from a fixed seed: two layers, GQA 4/2, head_dim 10, hidden 40, expert width
24, 4 experts with top-2 routing, vocabulary 101, untied embeddings, eager attention, float32. The init std
is 0.1 (not HF's 0.02) so that routing is decisive and greedy decoding does not repeat one token.
  mixtral_tiny   rope_theta 1e6, no biases, no sliding window.
  gpt_oss_tiny   layer 0 sliding (window 4, so T = 13 exercises it), layer 1 full; YaRN RoPE (theta 150000,
                 factor 4, beta_fast 32, beta_slow 1, original context 256, truncate false: the ramp then has a
                 fractional entry); attention, router and expert biases; attention sinks; clamped SwiGLU, with
                 gate_up_proj drawn at std 0.5 so that 2-3 % of the routed gate/up entries hit the +-7 clamp.
Norm weights are moved to 1 + 0.1 randn, every bias to 0.1 randn and the sinks to randn, so that a missing
one cannot hide. The loss is computed here from the logits, never by HF (router_aux_loss_coef is 0):

      total_loss = CE + lb,   lb = MaxText load-balance loss (RoutedMoE.load_balance_loss), per sequence:
        p = softmax(router_logits[b, s, :]);  idx = top_k(p)
        density[b, e] = mean_s sum_k one_hot(idx)[b, s, k, e];  prob[b, e] = mean_s p[b, s, e]
        lb_layer = mean_{b,e}(density * prob) * E^2 * W   (W = load_balance_loss_weight = 0.01)
        lb = mean over layers of lb_layer

Writes to tests/models/golden/<name>_tiny.{json,safetensors}:

      param.<hf name>          initial weights (f32, exactly as named_parameters(); the json field
                               "expert_layout" says how the fused expert tensors are laid out)
      inputs, targets          int32 [B, T]
      logits                   f32 [B, T, V]   forward in float32
      loss                     f32 [1]         mean token cross-entropy
      router_logits.<layer>    f32 [B*T, E]    raw router logits of each layer (GPT-OSS: bias included)
      lb_loss, total_loss      f32 [1]         the MaxText load-balance loss above, and loss + lb_loss
      grad.<hf name>           f32             gradient of total_loss
      grad_ce.<hf name>        f32             gradient of the cross-entropy alone
      bf16.logits, bf16.loss   the forward with the weights cast to bfloat16 (norm weights and the rotary
                               inv_freq kept float32, as HF's from_pretrained(dtype=bfloat16) leaves them)
      greedy.prompt            int32 [5]       inputs[0, :5]
      greedy.tokens            int32 [8]       generate(do_sample=False) new tokens of the float32 model
      rope.inv_freq            f32 [head_dim/2] (gpt_oss only) model.model.rotary_emb.inv_freq

Run with a Python that has torch, transformers (v5, with the fused expert tensors) and safetensors
(never needed by Tessera itself):
    python3 tools/make_moe_golden.py
tools/check_moe_golden.py then re-derives the stored logits from the stored parameters in plain torch.
"""
import json
import os

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import GptOssConfig, GptOssForCausalLM, MixtralConfig, MixtralForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "models", "golden")

B, T = 2, 13
LB_WEIGHT = 0.01
PROMPT_LEN, NEW_TOKENS = 5, 8
COMMON = dict(vocab_size=101, hidden_size=40, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=10, num_local_experts=4, num_experts_per_tok=2,
              tie_word_embeddings=False, router_aux_loss_coef=0.0, output_router_logits=False,
              bos_token_id=None, eos_token_id=None, pad_token_id=None, initializer_range=0.1)
GATE_UP_STD = 0.5  # gpt_oss only: wide enough that a few percent of gate/up entries reach the +-7 clamp

MIXTRAL = dict(max_position_embeddings=64, rms_norm_eps=1e-6, sliding_window=None, hidden_act="silu",
               rope_parameters={"rope_type": "default", "rope_theta": 1e6})
GPT_OSS = dict(max_position_embeddings=1024, rms_norm_eps=1e-6, sliding_window=4,
               layer_types=["sliding_attention", "full_attention"], attention_bias=True,
               rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0, "beta_fast": 32.0,
                                "beta_slow": 1.0, "original_max_position_embeddings": 256, "truncate": False})

MIXTRAL_LAYOUT = {
    "router": "model.layers.{i}.mlp.gate.weight [E, H] (out, in); logits = x W^T, no bias",
    "gate_up_proj": "model.layers.{i}.mlp.experts.gate_up_proj [E, 2I, H] (out, in); CONCATENATED: rows 0..I-1 "
                    "are the gate (hub w1), rows I..2I-1 the up projection (hub w3); h = silu(x G^T) * (x U^T)",
    "down_proj": "model.layers.{i}.mlp.experts.down_proj [E, H, I] (out, in) (hub w2); y = h D^T",
    "biases": "none",
    "hub_names": "block_sparse_moe.gate.weight, block_sparse_moe.experts.{j}.w1/w3.weight [I, H], w2.weight [H, I]",
}
GPT_OSS_LAYOUT = {
    "router": "model.layers.{i}.mlp.router.weight [E, H] (out, in) and .bias [E]; logits = x W^T + b",
    "gate_up_proj": "model.layers.{i}.mlp.experts.gate_up_proj [E, H, 2I] (in, out), TRANSPOSED relative to "
                    "nn.Linear; INTERLEAVED on the 2I axis: gate = columns 0::2, up = columns 1::2; "
                    "gu = x @ W[e] + gate_up_proj_bias[e]",
    "gate_up_proj_bias": "model.layers.{i}.mlp.experts.gate_up_proj_bias [E, 2I], interleaved the same way",
    "down_proj": "model.layers.{i}.mlp.experts.down_proj [E, I, H] (in, out); y = h @ W[e] + down_proj_bias[e]",
    "down_proj_bias": "model.layers.{i}.mlp.experts.down_proj_bias [E, H]; added before the routing weight",
    "sinks": "model.layers.{i}.self_attn.sinks [n_heads]",
}


def lb_loss_maxtext(router_logits, k, E, W):
    """MaxText RoutedMoE.load_balance_loss per layer, averaged over layers (train.py)."""
    per_layer = []
    for lg in router_logits:
        p = torch.softmax(lg.float().reshape(B, T, E), dim=-1)
        idx = torch.topk(p, k, dim=-1).indices
        density = F.one_hot(idx, E).float().sum(dim=2).mean(dim=1)  # [B, E]
        prob = p.mean(dim=1)  # [B, E]
        per_layer.append((density * prob).mean() * E * E * W)
    return torch.stack(per_layer).mean(), per_layer


def greedy_no_cache(model, prompt, n):
    seq = prompt.clone()
    with torch.no_grad():
        for _ in range(n):
            nxt = model(input_ids=seq, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], dim=1)
    return seq[:, prompt.shape[1]:]


def make(name, config_cls, model_cls, seed, extra, layout):
    torch.manual_seed(seed)
    cfg = config_cls(**COMMON, **extra)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    model = model_cls(cfg).float().eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif n.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif n.endswith("sinks"):
                p.copy_(torch.randn_like(p))
            elif name == "gpt_oss" and n.endswith("gate_up_proj"):
                p.copy_(GATE_UP_STD * torch.randn_like(p))
    E, k, V = cfg.num_local_experts, cfg.num_experts_per_tok, cfg.vocab_size
    tokens = torch.randint(0, V, (B, T + 1))
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    out = {f"param.{n}": p.detach().clone() for n, p in model.named_parameters()}
    out["inputs"] = inputs.to(torch.int32)
    out["targets"] = targets.to(torch.int32)

    def forward(m):
        o = m(input_ids=inputs, output_router_logits=True, use_cache=False)
        ce = F.cross_entropy(o.logits.float().reshape(-1, V), targets.reshape(-1))
        return o, ce

    # Router logits by hook as well, to confirm output_router_logits gives the raw router output.
    hooked = []
    router_mod = "mlp.gate" if name == "mixtral" else "mlp.router"
    handles = [model.get_submodule(f"model.layers.{i}.{router_mod}").register_forward_hook(
        lambda mod, args, res: hooked.append((args[0], res[0]))) for i in range(cfg.num_hidden_layers)]
    clamped = []  # gpt_oss: fraction of routed (token, expert) gate / up entries beyond the swiglu limit
    if name == "gpt_oss":
        def count_clamps(mod, args):
            x, idx = args[0], args[1]
            gu = torch.einsum("th,tkhn->tkn", x, mod.gate_up_proj[idx]) + mod.gate_up_proj_bias[idx]
            clamped.append([float((gu[..., 0::2] > mod.limit).float().mean()),
                            float((gu[..., 1::2].abs() > mod.limit).float().mean())])
        handles += [model.model.layers[i].mlp.experts.register_forward_pre_hook(count_clamps)
                    for i in range(cfg.num_hidden_layers)]
    o, ce = forward(model)
    for h in handles:
        h.remove()
    assert len(o.router_logits) == cfg.num_hidden_layers
    min_gap = float("inf")  # top-k margin: the golden must not hinge on a near-tie
    for i, (x_in, lg) in enumerate(hooked):
        assert torch.equal(lg, o.router_logits[i])
        srt = lg.detach().sort(dim=-1, descending=True).values
        min_gap = min(min_gap, float((srt[:, k - 1] - srt[:, k]).min()))
    assert min_gap > 1e-3, min_gap
    bias_included = None
    if name == "gpt_oss":
        x_in = hooked[0][0].reshape(-1, cfg.hidden_size)
        r = model.model.layers[0].mlp.router
        no_bias = x_in @ r.weight.T
        bias_included = bool(torch.allclose(o.router_logits[0], no_bias + r.bias, atol=1e-6) and
                             not torch.allclose(o.router_logits[0], no_bias, atol=1e-3))
    lb, lb_layers = lb_loss_maxtext(o.router_logits, k, E, LB_WEIGHT)
    total = ce + lb
    total.backward()
    out["logits"] = o.logits.detach().float()
    out["loss"] = ce.detach().reshape(1)
    for i, lg in enumerate(o.router_logits):
        out[f"router_logits.{i}"] = lg.detach().float().contiguous()
    out["lb_loss"] = lb.detach().reshape(1)
    out["total_loss"] = total.detach().reshape(1)
    for n, p in model.named_parameters():
        out[f"grad.{n}"] = p.grad.detach().clone()
    model.zero_grad(set_to_none=True)
    _, ce2 = forward(model)
    ce2.backward()
    assert torch.allclose(ce2, ce)
    for n, p in model.named_parameters():
        out[f"grad_ce.{n}"] = p.grad.detach().clone()
    model.zero_grad(set_to_none=True)

    # Greedy decoding with the float32 model (KV cache), checked against an argmax loop without a cache.
    prompt = inputs[:1, :PROMPT_LEN]
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    with torch.no_grad():
        gen = model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0)
    new = gen[:, PROMPT_LEN:]
    ref = greedy_no_cache(model, prompt, NEW_TOKENS)
    assert new.shape[1] == NEW_TOKENS and torch.equal(new, ref), (new, ref)
    out["greedy.prompt"] = prompt[0].to(torch.int32)
    out["greedy.tokens"] = new[0].to(torch.int32)

    meta = cfg.to_dict()
    if name == "gpt_oss":
        out["rope.inv_freq"] = model.model.rotary_emb.inv_freq.detach().float().clone()
        meta["rope_attention_scaling"] = float(model.model.rotary_emb.attention_scaling)
        meta["router_logits_include_bias"] = bias_included
        meta["swiglu_clamped_fraction_per_layer_gate_up"] = clamped
    meta["router_topk_min_logit_gap"] = min_gap

    # bf16: same weights; norms and inv_freq float32 (HF's _keep_in_fp32_modules / buffers built in float32).
    model_bf16 = model_cls(cfg)
    model_bf16.load_state_dict({n[len("param."):]: v for n, v in out.items() if n.startswith("param.")})
    inv_freq = model_bf16.model.rotary_emb.inv_freq.clone()
    model_bf16 = model_bf16.to(torch.bfloat16).eval()
    for mname in getattr(model_bf16, "_keep_in_fp32_modules", None) or []:
        for n, mod in model_bf16.named_modules():
            if n.split(".")[-1] == mname:
                mod.float()
    model_bf16.model.rotary_emb.inv_freq = inv_freq
    model_bf16.model.rotary_emb.original_inv_freq = inv_freq.clone()
    with torch.no_grad():
        ob, ceb = forward(model_bf16)
    out["bf16.logits"] = ob.logits.float()
    out["bf16.loss"] = ceb.float().reshape(1)

    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, f"{name}_tiny.safetensors")
    save_file({kk: v.contiguous() for kk, v in out.items()}, path)
    import transformers
    meta.update({"batch": B, "seq": T, "torch": torch.__version__, "transformers": transformers.__version__,
                 "lb_weight": LB_WEIGHT, "lb_loss_per_layer": [float(x) for x in lb_layers],
                 "expert_layout": layout, "loss_definition": "total_loss = mean CE + MaxText lb (see tools/make_moe_golden.py)",
                 "bf16_note": "weights bf16; RMSNorm weights (gpt_oss _keep_in_fp32_modules) and rotary inv_freq float32",
                 "greedy": {"prompt": "inputs[0, :5]", "new_tokens": NEW_TOKENS, "do_sample": False, "eos": None}})
    if name == "mixtral":
        meta["bf16_note"] = "weights bf16 (Mixtral has no _keep_in_fp32_modules); rotary inv_freq float32"
    with open(os.path.join(OUT, f"{name}_tiny.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True, default=str)

    back = load_file(path)
    print(f"{name}: loss {back['loss'].item():.7f} lb_loss {back['lb_loss'].item():.7f} "
          f"total_loss {back['total_loss'].item():.7f} bf16.loss {back['bf16.loss'].item():.7f} "
          f"greedy {back['greedy.tokens'].tolist()} file {os.path.getsize(path)} bytes")
    for kk in sorted(back):
        if not kk.startswith(("grad.", "grad_ce.")):
            print(f"   {kk:60s} {str(back[kk].dtype):14s} {list(back[kk].shape)}")


def main():
    torch.set_num_threads(1)
    make("mixtral", MixtralConfig, MixtralForCausalLM, 2031, MIXTRAL, MIXTRAL_LAYOUT)
    make("gpt_oss", GptOssConfig, GptOssForCausalLM, 2032, GPT_OSS, GPT_OSS_LAYOUT)


if __name__ == "__main__":
    main()
