#!/usr/bin/env python3
"""Independent check of tests/models/golden/{mixtral,gpt_oss}_tiny.*: re-implements both forwards in plain torch
ops from the stored param.* tensors and the json config (no transformers), and compares the logits, the router
logits, the cross-entropy, the MaxText load-balance loss and the gradients (autograd through this
re-implementation) with what tools/make_moe_golden.py stored from Hugging Face.

It also runs a few deliberately wrong variants (sliding window one wider or narrower, no sinks, YaRN truncated, gate/up
concatenated instead of interleaved, no clamp, ...) and prints how far each lands from the golden, to show that the
golden pins each of those details down. The formulas are summarised in tests/models/golden/MOE_NOTES.md.

    python3 tools/check_moe_golden.py          (needs torch and safetensors only)
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "..", "tests", "models", "golden")
TOL = 1e-5


def rmsnorm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate(x, cos, sin):
    """Half-split RoPE: x = [x1 | x2] (first and second half of the head), out = [x1 c - x2 s | x2 c + x1 s]."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def yarn_inv_freq(d, base, factor, beta_fast, beta_slow, l0, truncate):
    def corr(r):
        return d * math.log(l0 / (r * 2 * math.pi)) / (2 * math.log(base))
    low, high = corr(beta_fast), corr(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    pos = base ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    ramp = ((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    inv = (1.0 / (factor * pos)) * ramp + (1.0 / pos) * (1 - ramp)
    return inv, 0.1 * math.log(factor) + 1.0, (low, high)


def forward(kind, cfg, P, ids, v=()):
    """Returns logits [B, T, V] and the raw router logits of each layer [B*T, E]. v: names of wrong variants."""
    Bn, Tn = ids.shape
    H, nh, nkv, d = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    E, k, eps = cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg["rms_norm_eps"]
    rp = cfg["rope_parameters"]
    pos = torch.arange(Tn, dtype=torch.float32)
    if kind == "gpt_oss":
        inv, att, _ = yarn_inv_freq(d, rp["rope_theta"], rp["factor"], rp["beta_fast"], rp["beta_slow"],
                                    rp["original_max_position_embeddings"], rp["truncate"] or "truncate" in v)
        if "no_attention_scaling" in v:
            att = 1.0
    else:
        inv, att = 1.0 / (rp["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float32) / d)), 1.0
    ang = pos[:, None] * inv[None, :]  # [T, d/2]
    cos, sin = ang.cos() * att, ang.sin() * att
    i_q, j_k = torch.arange(Tn)[:, None], torch.arange(Tn)[None, :]
    x = P["model.embed_tokens.weight"][ids]
    router_logits = []
    for L in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{L}."
        p = lambda n: P[pre + n]  # noqa: E731
        h = rmsnorm(x, p("input_layernorm.weight"), eps)

        def lin(n, t):
            y = t @ p(f"self_attn.{n}.weight").T
            return y + p(f"self_attn.{n}.bias") if kind == "gpt_oss" else y
        q = lin("q_proj", h).view(Bn, Tn, nh, d).transpose(1, 2)
        kk = lin("k_proj", h).view(Bn, Tn, nkv, d).transpose(1, 2)
        vv = lin("v_proj", h).view(Bn, Tn, nkv, d).transpose(1, 2)
        q, kk = rotate(q, cos, sin), rotate(kk, cos, sin)
        kk, vv = kk.repeat_interleave(nh // nkv, dim=1), vv.repeat_interleave(nh // nkv, dim=1)
        s = (q @ kk.transpose(-1, -2)) * d ** -0.5  # [B, nh, T, T]
        allowed = j_k <= i_q
        if kind == "gpt_oss" and cfg["layer_types"][L] == "sliding_attention":
            W = cfg["sliding_window"] + (1 if "window_plus_one" in v else -1 if "window_minus_one" in v else 0)
            allowed = allowed & (j_k > i_q - W)
        s = s.masked_fill(~allowed, float("-inf"))
        if kind == "gpt_oss" and "no_sinks" not in v:
            sink = p("self_attn.sinks").view(1, nh, 1, 1).expand(Bn, nh, Tn, 1)
            a = torch.softmax(torch.cat([s, sink], dim=-1), dim=-1)[..., :-1]
        else:
            a = torch.softmax(s, dim=-1)
        o = (a @ vv).transpose(1, 2).reshape(Bn, Tn, nh * d)
        o = lin("o_proj", o)
        x = x + o
        h = rmsnorm(x, p("post_attention_layernorm.weight"), eps).reshape(Bn * Tn, H)
        if kind == "gpt_oss":
            lg = h @ p("mlp.router.weight").T + p("mlp.router.bias")
            top, idx = torch.topk(lg, k, dim=-1)
            wts = torch.softmax(top, dim=-1)
        else:
            lg = h @ p("mlp.gate.weight").T
            top, idx = torch.topk(torch.softmax(lg, dim=-1), k, dim=-1)
            wts = top / top.sum(-1, keepdim=True)
        router_logits.append(lg)
        y = torch.zeros_like(h)
        for t in range(Bn * Tn):
            for j in range(k):
                e = int(idx[t, j])
                if kind == "gpt_oss":
                    gu = h[t] @ p("mlp.experts.gate_up_proj")[e] + p("mlp.experts.gate_up_proj_bias")[e]
                    if "concatenated" in v:
                        g, u = gu.chunk(2)
                    else:
                        g, u = gu[0::2], gu[1::2]
                    lim, alpha = cfg["swiglu_limit"], cfg["swiglu_alpha"]
                    if "no_clamp" not in v:
                        g, u = g.clamp(max=lim), u.clamp(-lim, lim)
                    act = (u + (0 if "no_plus_one" in v else 1)) * (g * torch.sigmoid(alpha * g))
                    out = act @ p("mlp.experts.down_proj")[e] + p("mlp.experts.down_proj_bias")[e]
                else:
                    gu = p("mlp.experts.gate_up_proj")[e] @ h[t]  # [2I]
                    g, u = (gu[0::2], gu[1::2]) if "interleaved" in v else gu.chunk(2)
                    out = p("mlp.experts.down_proj")[e] @ (F.silu(g) * u)
                y = y.index_add(0, torch.tensor([t]), (wts[t, j] * out)[None])
        x = x + y.view(Bn, Tn, H)
    x = rmsnorm(x, P["model.norm.weight"], eps)
    return x @ P["lm_head.weight"].T, router_logits


def lb_loss(router_logits, Bn, Tn, E, k, W):
    per = []
    for lg in router_logits:
        pr = torch.softmax(lg.view(Bn, Tn, E), dim=-1)
        idx = torch.topk(pr, k, dim=-1).indices
        density = F.one_hot(idx, E).float().sum(2).mean(1)
        per.append((density * pr.mean(1)).mean() * E * E * W)
    return torch.stack(per).mean()


def check(name, variants):
    g = load_file(os.path.join(GOLDEN, f"{name}_tiny.safetensors"))
    cfg = json.load(open(os.path.join(GOLDEN, f"{name}_tiny.json")))
    P = {n[len("param."):]: t.clone().requires_grad_(True) for n, t in g.items() if n.startswith("param.")}
    ids, tg = g["inputs"].long(), g["targets"].long()
    Bn, Tn = ids.shape
    E, k, V = cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg["vocab_size"]
    ok = True

    def report(what, a, b, tol=TOL):
        nonlocal ok
        err = float((a - b).abs().max())
        scale = float(b.abs().max())
        good = err <= tol * max(1.0, scale)
        ok &= good
        print(f"  {what:42s} max|diff| {err:.3e}  (max|ref| {scale:.3e}) {'ok' if good else 'FAIL'}")

    if name == "gpt_oss":
        rp = cfg["rope_parameters"]
        inv, att, lh = yarn_inv_freq(cfg["head_dim"], rp["rope_theta"], rp["factor"], rp["beta_fast"],
                                     rp["beta_slow"], rp["original_max_position_embeddings"], rp["truncate"])
        print(f"  yarn low/high {lh[0]:.6f} {lh[1]:.6f}  inv_freq {inv.tolist()}  attention scaling {att:.9f}")
        report("rope.inv_freq", inv, g["rope.inv_freq"], 1e-7)
        report("rope_attention_scaling", torch.tensor(att), torch.tensor(cfg["rope_attention_scaling"]), 1e-12)
    logits, rl = forward(name, cfg, P, ids)
    ce = F.cross_entropy(logits.reshape(-1, V), tg.reshape(-1))
    lb = lb_loss(rl, Bn, Tn, E, k, cfg["lb_weight"])
    report("logits", logits.detach(), g["logits"])
    for i, lg in enumerate(rl):
        report(f"router_logits.{i}", lg.detach(), g[f"router_logits.{i}"])
    report("loss", ce.detach().reshape(1), g["loss"])
    report("lb_loss", lb.detach().reshape(1), g["lb_loss"])
    report("total_loss", (ce + lb).detach().reshape(1), g["total_loss"])
    for what, loss, prefix in [("total_loss", ce + lb, "grad."), ("CE only", ce, "grad_ce.")]:
        grads = torch.autograd.grad(loss, list(P.values()), retain_graph=True)
        got = torch.cat([gr.reshape(-1) for gr in grads])
        ref = torch.cat([g[prefix + n].reshape(-1) for n in P])
        report(f"{prefix}* ({what}), all tensors", got, ref)
    lbg = torch.cat([(g["grad." + n] - g["grad_ce." + n]).reshape(-1) for n in P]).abs().max()
    print(f"  max|grad - grad_ce| (the lb loss's share)   {float(lbg):.3e}")
    with torch.no_grad():
        seq = g["greedy.prompt"].long()[None]
        for _ in range(g["greedy.tokens"].numel()):
            seq = torch.cat([seq, forward(name, cfg, P, seq)[0][:, -1].argmax(-1, keepdim=True)], dim=1)
    got = seq[0, g["greedy.prompt"].numel():]
    same = torch.equal(got, g["greedy.tokens"].long())
    ok &= same
    print(f"  greedy tokens {got.tolist()} {'ok' if same else 'FAIL'}")
    print("  wrong variants (each should be far from the golden):")
    with torch.no_grad():
        for var in variants:
            lv, _ = forward(name, cfg, P, ids, (var,))
            err = float((lv - g["logits"]).abs().max())
            print(f"    {var:22s} max|logits diff| {err:.3e} {'(distinguishable)' if err > 1e-3 else 'NOT DISTINGUISHED'}")
    return ok


def main():
    torch.set_num_threads(1)
    ok = True
    for name, variants in [("mixtral", ["interleaved"]),
                           ("gpt_oss", ["window_plus_one", "window_minus_one", "no_sinks", "truncate", "no_attention_scaling",
                                        "concatenated", "no_clamp", "no_plus_one"])]:
        print(name)
        ok &= check(name, variants)
    print("all ok" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
