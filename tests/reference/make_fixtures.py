#!/usr/bin/env python3
# Over 700 lines: one script writes every fixture (the GPT-2, Llama and MoE models, the
# kernels, mixed precision), so that one command regenerates them all from one PyTorch.
"""Writes the PyTorch reference fixtures that Gantry's CPU code is checked against.

  python3 tests/reference/make_fixtures.py [--out tests/reference/fixtures]

gpt2_tiny.safetensors: a small random GPT-2 of odd sizes (vocab 97, n_positions 29, T 23,
3 layers, 4 heads, C 48, batch 4): its weights, a batch, the logits and loss, every
parameter's gradient, and the losses, clipped gradients and parameters over 5 AdamW steps
with gradient clipping (torch.optim.AdamW, torch.nn.utils.clip_grad_norm_).

llama_tiny.safetensors (--only llama): the same for a small random Llama, run by transformers'
LlamaForCausalLM (eager attention) converted to float64: vocab 89, max_position_embeddings 31,
T 23, 3 layers, 6 query heads over 2 key/value heads (head_dim 6), hidden 36, intermediate 50,
rope_theta 500, RMSNorm eps 1e-6, untied lm_head, batch 3. Tensors use HF's state_dict names
and nn.Linear (out, in) layouts. Two of HF's fp32 upcasts, which in float64 are downcasts
(LlamaRMSNorm's hidden_states.to(float32), eager attention's softmax(dtype=float32)), are
patched to keep float64; RoPE's cos/sin stay as HF computes them, in fp32 from fp32 inv_freq
(the fixture checks both).

kernels.safetensors: each op alone on random inputs: outputs and gradients.

llama_ops.safetensors (--only llama_ops): the ops of Llama-family blocks as transformers'
LlamaForCausalLM runs them: RMSNorm, rotary embeddings on packed qkv rows with grouped KV
heads (rotate_half; the fp32 cos/sin caches of t * inv_freq), the SwiGLU gate, and causal
grouped-query attention (repeat_kv).

moe_tiny.safetensors (--only moe): GPT-2 with mixture-of-experts MLPs (issue 22), top-1 with
capacity drops and top-2 dropless, under the key prefixes "top1." and "top2.": weights, batch,
logits, the losses (cross entropy, load-balancing, router z), gradients, routing counts, and 10
AdamW steps with clipping (losses, drop counts, final parameters). make_moe's docstring defines
the model; the script checks it against a second implementation and an fp32 run of itself.

amp.safetensors (--only amp): mixed precision under torch.autocast on the CPU. fp32 values
rounded to bf16 and fp16 (edges included); one addmm and one GELU under autocast; and
gpt2_tiny's model (its weights, read from gpt2_tiny.safetensors) trained 10 AdamW steps on 10
batches in fp32, in bf16 autocast, and in fp16 autocast with GradScaler (from 2^16, and from
2^24 with growth_interval 3, which overflows, skips and grows): the losses, the scales and
the skipped steps. The model is written as Hugging Face's GPT-2 runs it (Conv1D is addmm,
attention is scaled_dot_product_attention, the tied head F.linear), so autocast casts where it
casts for that model. These are fp32/bf16/fp16 computations, not float64: the point is
autocast's roundings.

amp_two_rounding.safetensors (--only amp_two): the first bf16 loss of amp's model when its
c_attn and c_fc round twice (the product, then with the bias: cuBLASLt's bias epilogue), for
four summation orders, and rounding once for the same orders (make_amp_two's docstring).

Everything is computed in float64 from float32 inputs and stored as float32, so the
reference carries no fp32 rounding of its own (Llama's RoPE cos/sin tables aside: fp32 values
by HF's definition). GPT-2's tensors use Hugging Face GPT-2 names and layouts (Conv1D weights
are (in, out)). Needs torch, numpy and safetensors, and transformers for Llama; CI does not.
"""
import argparse
import contextlib
import json
import math
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

V, NPOS, T, L, NH, C, B = 97, 29, 23, 3, 4, 48, 4
HP = dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, steps=5)


def f32(x):
    return x.detach().to(torch.float32).contiguous()


def param_shapes():
    shapes = {"wte.weight": (V, C), "wpe.weight": (NPOS, C)}
    for l in range(L):
        h = f"h.{l}."
        shapes.update({
            h + "ln_1.weight": (C,), h + "ln_1.bias": (C,),
            h + "attn.c_attn.weight": (C, 3 * C), h + "attn.c_attn.bias": (3 * C,),
            h + "attn.c_proj.weight": (C, C), h + "attn.c_proj.bias": (C,),
            h + "ln_2.weight": (C,), h + "ln_2.bias": (C,),
            h + "mlp.c_fc.weight": (C, 4 * C), h + "mlp.c_fc.bias": (4 * C,),
            h + "mlp.c_proj.weight": (4 * C, C), h + "mlp.c_proj.bias": (C,),
        })
    shapes.update({"ln_f.weight": (C,), "ln_f.bias": (C,)})
    return shapes


def random_params(gen):
    """Non-trivial values everywhere (LayerNorm weights near 1, biases non-zero), so every
    gradient path is exercised."""
    p = {}
    for name, shape in param_shapes().items():
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        elif len(shape) == 1:
            t = 0.02 * torch.randn(shape, generator=gen)
        else:
            t = 0.02 * torch.randn(shape, generator=gen)
        p[name] = t.to(torch.float32)
    return p


def gpt2_forward(p, idx, n_layer=L, n_embd=C, n_head=NH, mlp=None):
    """GPT-2 forward; p maps HF names to tensors. Returns logits (B,T,V). mlp(l, h, m), given,
    replaces layer l's MLP where it returns its output (B,T,C) for ln_2's output m (make_moe's
    layers), and leaves the dense MLP where it returns None."""
    Bn, Tn = idx.shape
    x = p["wte.weight"][idx] + p["wpe.weight"][:Tn]
    hs = n_embd // n_head
    mask = torch.tril(torch.ones(Tn, Tn, dtype=torch.bool))
    for l in range(n_layer):
        h = f"h.{l}."
        a = F.layer_norm(x, (n_embd,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], eps=1e-5)
        qkv = a @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]
        q, k, v = qkv.split(n_embd, dim=2)
        q = q.view(Bn, Tn, n_head, hs).transpose(1, 2)
        k = k.view(Bn, Tn, n_head, hs).transpose(1, 2)
        v = v.view(Bn, Tn, n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(Bn, Tn, n_embd)
        x = x + y @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]
        m = F.layer_norm(x, (n_embd,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], eps=1e-5)
        y = mlp(l, h, m) if mlp is not None else None
        if y is None:
            m = F.gelu(m @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"], approximate="tanh")
            x = x + m @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"]
        else:
            x = x + y
    x = F.layer_norm(x, (n_embd,), p["ln_f.weight"], p["ln_f.bias"], eps=1e-5)
    return x @ p["wte.weight"].T


def reference_record(init, params, logits, loss, inputs, targets):
    """The fixture's first part: the fp32 start (param.NAME), the float64 gradients of loss
    (grad.NAME, after loss.backward()), the logits, the loss and the batch. Returns it and the
    gradient norm."""
    out = {f"param.{k}": f32(v) for k, v in init.items()}
    out.update({f"grad.{k}": f32(v.grad) for k, v in params.items()})
    out["logits"] = f32(logits)
    out["loss"] = f32(loss.reshape(1))
    out["inputs"] = inputs.to(torch.int32)
    out["targets"] = targets.to(torch.int32)
    return out, torch.sqrt(sum((g.grad ** 2).sum() for g in params.values())).item()


def adamw_steps(params, loss_fn, clip, out, steps=None, every_step=True):
    """steps (default HP["steps"]) AdamW steps of loss_fn() over params (name -> tensor),
    clipping the gradient norm to clip, decay on tensors of 2+ dims only (nanoGPT's grouping).
    Records each step's clipped gradients (step{k}.grad.NAME) and parameters (step{k}.NAME)
    in out, or with every_step False the last step's parameters alone; returns the losses."""
    steps = HP["steps"] if steps is None else steps
    decay = [v for v in params.values() if v.dim() >= 2]
    no_decay = [v for v in params.values() if v.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": HP["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=HP["lr"], betas=(HP["beta1"], HP["beta2"]), eps=HP["eps"])
    losses = []
    for step in range(1, steps + 1):
        opt.zero_grad()
        l = loss_fn()
        l.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), clip)
        if every_step:
            for k, v in params.items():  # the clipped gradient this step applies
                out[f"step{step}.grad.{k}"] = f32(v.grad)
        opt.step()
        losses.append(l.item())
        if every_step or step == steps:
            for k, v in params.items():
                out[f"step{step}.{k}"] = f32(v)
    return losses


def make_gpt2(out_dir):
    gen = torch.Generator().manual_seed(20240520)
    init = random_params(gen)
    inputs = torch.randint(0, V, (B, T), generator=gen)
    targets = torch.randint(0, V, (B, T), generator=gen)

    params = {k: v.to(torch.float64).clone().requires_grad_(True) for k, v in init.items()}
    logits = gpt2_forward(params, inputs)
    loss = F.cross_entropy(logits.view(-1, V), targets.view(-1))
    loss.backward()
    out, grad_norm0 = reference_record(init, params, logits, loss, inputs, targets)

    # 5 AdamW steps on the same batch, clipping to half the first step's norm so the clip
    # is active; decay on tensors of 2+ dims only (nanoGPT's grouping).
    clip = 0.5 * grad_norm0
    params = {k: v.to(torch.float64).clone().requires_grad_(True) for k, v in init.items()}
    losses = adamw_steps(params, lambda: F.cross_entropy(gpt2_forward(params, inputs).view(-1, V), targets.view(-1)),
                         clip, out)
    out["train_losses"] = torch.tensor(losses, dtype=torch.float32)
    meta = {"config": json.dumps(dict(vocab_size=V, n_positions=NPOS, T=T, n_layer=L, n_head=NH,
                                      n_embd=C, batch=B)),
            "hparams": json.dumps(dict(HP, grad_clip=clip)),
            "generator": "tests/reference/make_fixtures.py", "torch": torch.__version__}
    save_file(out, os.path.join(out_dir, "gpt2_tiny.safetensors"), metadata=meta)
    print(f"gpt2_tiny: loss {loss.item():.6f}, grad norm {grad_norm0:.4f}, losses {losses}")


# Llama: vocab, max_position_embeddings, T, layers, query heads, key/value heads, hidden,
# intermediate, batch; RoPE's base and RMSNorm's epsilon.
LV, LNPOS, LT, LL, LNH, LNKV, LC, LF, LB = 89, 31, 23, 3, 6, 2, 36, 50, 3
LTHETA, LEPS = 500.0, 1e-6


def llama_config():
    from transformers import LlamaConfig
    # transformers 5 takes RoPE's base in rope_parameters (rope_theta is no longer a field).
    return LlamaConfig(vocab_size=LV, hidden_size=LC, intermediate_size=LF, num_hidden_layers=LL,
                       num_attention_heads=LNH, num_key_value_heads=LNKV, max_position_embeddings=LNPOS,
                       rope_parameters={"rope_type": "default", "rope_theta": LTHETA}, rms_norm_eps=LEPS,
                       tie_word_embeddings=False, hidden_act="silu", attention_bias=False, mlp_bias=False)


@contextlib.contextmanager
def llama_float64():
    """HF's Llama upcasts to fp32 in two places: LlamaRMSNorm (hidden_states.to(float32)) and
    eager attention (softmax(..., dtype=float32)). In a float64 model those are downcasts that
    round the reference to fp32, forward and backward. Within this context both keep their
    input's dtype and are otherwise HF's code, so an fp32 model runs the same ops as without
    it (make_llama checks that bit for bit)."""
    from transformers.models.llama import modeling_llama as ml

    def rms_norm(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))

    def eager_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        key_states = ml.repeat_kv(key, module.num_key_value_groups)
        value_states = ml.repeat_kv(value, module.num_key_value_groups)
        attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = torch.nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = torch.nn.functional.dropout(attn_weights, p=dropout, training=module.training)
        attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous()
        return attn_output, attn_weights

    # LlamaAttention looks eager_attention_forward up in its module at each call.
    saved = ml.LlamaRMSNorm.forward, ml.eager_attention_forward
    ml.LlamaRMSNorm.forward, ml.eager_attention_forward = rms_norm, eager_attention
    try:
        yield
    finally:
        ml.LlamaRMSNorm.forward, ml.eager_attention_forward = saved


def llama_model(init, dtype):
    """LlamaForCausalLM with eager attention in `dtype`, holding the parameters `init` (fp32;
    None: HF's own initialization)."""
    from transformers import LlamaForCausalLM
    model = LlamaForCausalLM._from_config(llama_config(), attn_implementation="eager").to(dtype)
    if init is not None:
        model.load_state_dict(init, strict=True)
    return model.eval()  # no dropout (attention_dropout is 0 besides)


def llama_loss(model, inputs, targets):
    """Logits (B, T, V) and their mean cross entropy against targets (not HF's shifted labels)."""
    logits = model(input_ids=inputs).logits
    return logits, F.cross_entropy(logits.reshape(-1, LV), targets.reshape(-1))


def make_llama(out_dir):
    gen = torch.Generator().manual_seed(20250611)
    # Matrices N(0, 0.02), RMSNorm weights 1 + 0.1 N(0, 1), in the model's state_dict order.
    init = {}
    for name, t in llama_model(None, torch.float32).state_dict().items():
        shape = tuple(t.shape)
        if len(shape) == 1:
            init[name] = (1.0 + 0.1 * torch.randn(shape, generator=gen)).to(torch.float32)
        else:
            init[name] = (0.02 * torch.randn(shape, generator=gen)).to(torch.float32)
    inputs = torch.randint(0, LV, (LB, LT), generator=gen)
    targets = torch.randint(0, LV, (LB, LT), generator=gen)

    # The patches change nothing in fp32: logits and gradients bit for bit.
    runs = []
    for patched in (False, True):
        with llama_float64() if patched else contextlib.nullcontext():
            m = llama_model(init, torch.float32)
            logits, loss = llama_loss(m, inputs, targets)
            loss.backward()
            runs.append([logits.detach()] + [p.grad for p in m.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*runs)), "llama_float64 changes the fp32 model"

    with llama_float64():
        model = llama_model(init, torch.float64)
        # RoPE's tables: fp32 values (HF casts inv_freq and positions to float before cos/sin).
        cos, sin = model.model.rotary_emb(torch.zeros(1, dtype=torch.float64), torch.arange(LT)[None])
        assert cos.dtype == torch.float64 and torch.equal(cos, cos.float().double()), "cos is not fp32"
        assert torch.equal(sin, sin.float().double()), "sin is not fp32"
        params = dict(model.named_parameters())
        assert list(params) == list(init), "parameters are not the state_dict's"
        logits, loss = llama_loss(model, inputs, targets)
        loss.backward()
        out, grad_norm0 = reference_record(init, params, logits, loss, inputs, targets)

        # 5 AdamW steps as make_gpt2's: the clip at half the first norm, decay on 2+ dims only.
        clip = 0.5 * grad_norm0
        model = llama_model(init, torch.float64)
        params = dict(model.named_parameters())
        losses = adamw_steps(params, lambda: llama_loss(model, inputs, targets)[1], clip, out)
    out["train_losses"] = torch.tensor(losses, dtype=torch.float32)
    meta = {"config": json.dumps(dict(arch="llama", vocab_size=LV, n_positions=LNPOS, T=LT, n_layer=LL, n_head=LNH,
                                      n_kv_head=LNKV, n_embd=LC, ffn_hidden=LF, rope_theta=LTHETA, norm_eps=LEPS,
                                      batch=LB)),
            "hf_config": model.config.to_json_string(),
            "hparams": json.dumps(dict(HP, grad_clip=clip)),
            "generator": "tests/reference/make_fixtures.py --only llama", "torch": torch.__version__}
    path = os.path.join(out_dir, "llama_tiny.safetensors")
    save_file(out, path, metadata=meta)
    print(f"llama_tiny: loss {loss.item():.6f}, grad norm {grad_norm0:.4f}, losses {losses}, "
          f"{os.path.getsize(path)} bytes")


def make_kernels(out_dir):
    g = torch.Generator().manual_seed(7)
    r = lambda *s: torch.randn(*s, generator=g).to(torch.float32)
    d = lambda t: t.to(torch.float64).clone().requires_grad_(True)
    out = {}
    # encoder
    Bn, Tn, Vn, Cn, NP = 3, 7, 17, 12, 10
    idx = torch.randint(0, Vn, (Bn, Tn), generator=g)
    wte, wpe, dout = r(Vn, Cn), r(NP, Cn), r(Bn, Tn, Cn)
    wte64, wpe64 = d(wte), d(wpe)
    y = wte64[idx] + wpe64[:Tn]
    y.backward(dout.to(torch.float64))
    out.update({"encoder.inp": idx.to(torch.int32), "encoder.wte": wte, "encoder.wpe": wpe,
                "encoder.dout": dout, "encoder.out": f32(y), "encoder.dwte": f32(wte64.grad),
                "encoder.dwpe": f32(wpe64.grad)})
    # layernorm
    N, Cn = 7, 37
    x, w, b, dout = r(N, Cn) * 2 + 0.5, 1 + 0.1 * r(Cn), 0.1 * r(Cn), r(N, Cn)
    x64, w64, b64 = d(x), d(w), d(b)
    y = F.layer_norm(x64, (Cn,), w64, b64, eps=1e-5)
    y.backward(dout.to(torch.float64))
    xd = x.to(torch.float64)
    out.update({"layernorm.inp": x, "layernorm.weight": w, "layernorm.bias": b, "layernorm.dout": dout,
                "layernorm.out": f32(y), "layernorm.mean": f32(xd.mean(-1)),
                "layernorm.rstd": f32(1 / torch.sqrt(xd.var(-1, unbiased=False) + 1e-5)),
                "layernorm.dinp": f32(x64.grad), "layernorm.dweight": f32(w64.grad),
                "layernorm.dbias": f32(b64.grad)})
    # matmul, Conv1D layout (C, OC) and Linear layout (OC, C)
    N, Cn, OC = 13, 29, 31
    x, w, b, dout = r(N, Cn), r(Cn, OC), r(OC), r(N, OC)
    x64, w64, b64 = d(x), d(w), d(b)
    y = x64 @ w64 + b64
    y.backward(dout.to(torch.float64))
    out.update({"matmul.inp": x, "matmul.weight": w, "matmul.bias": b, "matmul.dout": dout,
                "matmul.out": f32(y), "matmul.dinp": f32(x64.grad), "matmul.dweight": f32(w64.grad),
                "matmul.dbias": f32(b64.grad)})
    wt = r(OC, Cn)
    x64, wt64 = d(x), d(wt)
    y = x64 @ wt64.T
    y.backward(dout.to(torch.float64))
    out.update({"matmul_t.weight": wt, "matmul_t.out": f32(y), "matmul_t.dinp": f32(x64.grad),
                "matmul_t.dweight": f32(wt64.grad)})
    # attention: a short case and one longer than the 64-row block
    for tag, (Bn, Tn, Cn, NHn) in {"attention": (2, 19, 24, 3), "attention_long": (1, 150, 16, 2)}.items():
        qkv, dout = r(Bn, Tn, 3 * Cn), r(Bn, Tn, Cn)
        qkv64 = d(qkv)
        hs = Cn // NHn
        q, k, v = qkv64.split(Cn, dim=2)
        q, k, v = (t.view(Bn, Tn, NHn, hs).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(Bn, Tn, Cn)
        y.backward(dout.to(torch.float64))
        # each query row's log-sum-exp of its scaled causal scores (the fused GPU kernel's lse)
        scores = (q @ k.transpose(-2, -1)) / hs ** 0.5
        causal = torch.ones(Tn, Tn, dtype=torch.bool).tril()
        lse = torch.logsumexp(scores.masked_fill(~causal, float("-inf")), dim=-1)
        out.update({f"{tag}.qkv": qkv, f"{tag}.dout": dout, f"{tag}.out": f32(y),
                    f"{tag}.dqkv": f32(qkv64.grad), f"{tag}.lse": f32(lse.detach()),
                    f"{tag}.shape": torch.tensor([Bn, Tn, Cn, NHn], dtype=torch.int32)})
    # gelu (tanh)
    x, dout = 3 * r(1000), r(1000)
    x64 = d(x)
    y = F.gelu(x64, approximate="tanh")
    y.backward(dout.to(torch.float64))
    out.update({"gelu.inp": x, "gelu.dout": dout, "gelu.out": f32(y), "gelu.dinp": f32(x64.grad)})
    # softmax + cross-entropy, mean over N
    N, Vn = 11, 53
    logits, tg = 3 * r(N, Vn), torch.randint(0, Vn, (N,), generator=g)
    l64 = d(logits)
    losses = F.cross_entropy(l64, tg, reduction="none")
    losses.mean().backward()
    out.update({"crossentropy.logits": logits, "crossentropy.targets": tg.to(torch.int32),
                "crossentropy.losses": f32(losses), "crossentropy.dlogits": f32(l64.grad)})
    # AdamW: 3 steps with decay, then the state
    n = 1000
    p0 = r(n)
    p64 = d(p0)
    opt = torch.optim.AdamW([p64], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    grads = [r(n) for _ in range(3)]
    for gi in grads:
        p64.grad = gi.to(torch.float64)
        opt.step()
    st = opt.state[p64]
    out.update({"adamw.p0": p0, "adamw.g1": grads[0], "adamw.g2": grads[1], "adamw.g3": grads[2],
                "adamw.p3": f32(p64), "adamw.m3": f32(st["exp_avg"]), "adamw.v3": f32(st["exp_avg_sq"])})
    # global norm + clip
    a, c2 = r(10000), r(333)
    a64, c64 = d(a), d(c2)
    a64.grad, c64.grad = a.to(torch.float64).clone(), c2.to(torch.float64).clone()
    norm = torch.nn.utils.clip_grad_norm_([a64, c64], 10.0)
    out.update({"gradnorm.a": a, "gradnorm.b": c2, "gradnorm.norm": f32(norm.reshape(1)),
                "gradnorm.a_clipped": f32(a64.grad), "gradnorm.b_clipped": f32(c64.grad)})
    # AdamW where eps matters: gradients of eps's size (exact fp32 inputs, so no rounding
    # noise decides the update; the model-level test cannot check eps on such elements)
    p0 = r(n)
    p64 = d(p0)
    opt = torch.optim.AdamW([p64], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    grads = [1e-8 * r(n) for _ in range(3)]
    for gi in grads:
        p64.grad = gi.to(torch.float64)
        opt.step()
    out.update({"adamw_eps.p0": p0, "adamw_eps.g1": grads[0], "adamw_eps.g2": grads[1],
                "adamw_eps.g3": grads[2], "adamw_eps.p3": f32(p64)})
    # fp32 -> bf16 -> fp32 (round to nearest, ties to even): random values over many
    # magnitudes, then the edges: ties both ways, the largest finite, overflow to inf,
    # infinities, signed zeros, subnormals and NaN.
    x = r(4000) * torch.exp2(torch.randint(-40, 40, (4000,), generator=g).to(torch.float32))
    one = 1.0
    edges = torch.tensor([one + 2**-8, one + 3 * 2**-8, -(one + 2**-8), one + 2**-8 + 2**-20, 3.3895314e38,
                          3.4028235e38, float("inf"), float("-inf"), 0.0, -0.0, 1e-40, -3e-39, 1.17549435e-38,
                          float("nan")], dtype=torch.float32)
    x = torch.cat([x, edges])
    out.update({"cast.x": x, "cast.bf16": x.to(torch.bfloat16).to(torch.float32)})
    save_file(out, os.path.join(out_dir, "kernels.safetensors"),
              metadata={"generator": "tests/reference/make_fixtures.py", "torch": torch.__version__})
    print(f"kernels: {len(out)} tensors")


def gpt2_forward_autocast(p, idx, lin=None):
    """gpt2_forward as Hugging Face's GPT-2 computes it, for autocast: Conv1D's addmm, SDPA,
    the tied head through F.linear. In fp32 it equals gpt2_forward up to rounding. lin(a, name),
    given, computes the linear layer `name` of input a (B, T, in) as rows (B*T, out)."""
    Bn, Tn = idx.shape
    x = p["wte.weight"][idx] + p["wpe.weight"][:Tn]
    hs = C // NH
    lin = lin or (lambda a, name: torch.addmm(p[name + ".bias"], a.reshape(-1, a.shape[-1]), p[name + ".weight"]))
    for l in range(L):
        h = f"h.{l}."
        a = F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], eps=1e-5)
        q, k, v = lin(a, h + "attn.c_attn").view(Bn, Tn, 3 * C).split(C, dim=2)
        q, k, v = (t.reshape(Bn, Tn, NH, hs).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(Bn, Tn, C)
        x = x + lin(y, h + "attn.c_proj").view(Bn, Tn, C)
        m = F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], eps=1e-5)
        m = F.gelu(lin(m, h + "mlp.c_fc"), approximate="tanh")
        x = x + lin(m, h + "mlp.c_proj").view(Bn, Tn, C)
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], eps=1e-5)
    return F.linear(x, p["wte.weight"])


AMP_HP = dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0, steps=10)


def train_amp(init, batches, dtype, init_scale=None, growth_interval=2000):
    """AMP_HP["steps"] AdamW steps, one batch each, fp32 master weights; dtype None: fp32.
    Returns the losses, and with a GradScaler the scale each step used and whether it skipped."""
    params = {k: v.clone().requires_grad_(True) for k, v in init.items()}
    decay = [v for v in params.values() if v.dim() >= 2]
    no_decay = [v for v in params.values() if v.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": AMP_HP["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=AMP_HP["lr"], betas=(AMP_HP["beta1"], AMP_HP["beta2"]), eps=AMP_HP["eps"])
    scaler = None
    if init_scale is not None:
        scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    losses, scales, skipped, first_logits = [], [], [], None
    for inputs, targets in batches:
        opt.zero_grad()
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            logits = gpt2_forward_autocast(params, inputs)
            loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
        if first_logits is None:
            first_logits = logits.detach().float()
        if scaler is None:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(params.values()), AMP_HP["grad_clip"])
            opt.step()
        else:
            scales.append(scaler.get_scale())
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(list(params.values()), AMP_HP["grad_clip"])
            before = opt.state_dict()["state"].get(0, {}).get("step", torch.tensor(0.0)).item()
            scaler.step(opt)
            scaler.update()
            after = opt.state_dict()["state"].get(0, {}).get("step", torch.tensor(0.0)).item()
            skipped.append(int(after == before))
        losses.append(loss.item())
    return losses, scales, skipped, first_logits


def make_amp(out_dir):
    from safetensors.torch import load_file
    g = torch.Generator().manual_seed(16)
    out = {}
    # Rounding: random values over many magnitudes, then the edges of both types.
    x = torch.randn(4000, generator=g) * torch.exp2(torch.randint(-30, 20, (4000,), generator=g).float())
    edges = [65504.0, 65519.99, 65520.0, 65536.0, -65520.0, 1e6, 2.0**-14, 2.0**-14 * (1 - 2.0**-12), 2.0**-24,
             2.0**-25, 2.0**-25 * 1.0001, 3 * 2.0**-25, 5 * 2.0**-25, 1e-10, 1 + 2.0**-11, 1 + 3 * 2.0**-11,
             1 + 2.0**-8, 1 + 3 * 2.0**-8, 3.3895314e38, 3.4028235e38, float("inf"), float("-inf"), 0.0, -0.0,
             1e-40, -3e-39, float("nan")]
    x = torch.cat([x, torch.tensor(edges, dtype=torch.float32)])
    out.update({"round.x": x, "round.bf16": x.to(torch.bfloat16).float(), "round.fp16": x.to(torch.float16).float()})
    # One addmm and one GELU under autocast, each type.
    N, Cn, OC = 37, 29, 41
    inp, w, b = torch.randn(N, Cn, generator=g), 0.3 * torch.randn(Cn, OC, generator=g), torch.randn(OC, generator=g)
    gin = 3 * torch.randn(1000, generator=g)
    out.update({"matmul.inp": inp, "matmul.weight": w, "matmul.bias": b, "gelu.inp": gin})
    for name, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        with torch.autocast("cpu", dtype=dt):
            out[f"matmul.out_{name}"] = torch.addmm(b, inp, w).float()
        out[f"gelu.out_{name}"] = F.gelu(gin.to(dt), approximate="tanh").float()
    # The model, trained.
    tiny = load_file(os.path.join(out_dir, "gpt2_tiny.safetensors"))
    init = {k[len("param."):]: v for k, v in tiny.items() if k.startswith("param.")}
    batches = [(torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g))
               for _ in range(AMP_HP["steps"])]
    out["inputs"] = torch.stack([b[0] for b in batches]).to(torch.int32)
    out["targets"] = torch.stack([b[1] for b in batches]).to(torch.int32)
    runs = {"fp32": (None, None, 2000), "bf16": (torch.bfloat16, None, 2000),
            "fp16": (torch.float16, 2.0**16, 2000), "fp16_overflow": (torch.float16, 2.0**24, 3)}
    summary = {}
    for name, (dt, scale, interval) in runs.items():
        losses, scales, skipped, logits = train_amp(init, batches, dt, scale, interval)
        out[f"{name}.losses"] = torch.tensor(losses, dtype=torch.float32)
        out[f"{name}.logits"] = logits
        if scale is not None:
            out[f"{name}.scales"] = torch.tensor(scales, dtype=torch.float32)
            out[f"{name}.skipped"] = torch.tensor(skipped, dtype=torch.int32)
        summary[name] = dict(losses=[round(l, 6) for l in losses], scales=scales, skipped=skipped)
    meta = {"hparams": json.dumps(dict(AMP_HP, growth_interval={"fp16": 2000, "fp16_overflow": 3},
                                       init_scale={"fp16": 2.0**16, "fp16_overflow": 2.0**24})),
            "generator": "tests/reference/make_fixtures.py --only amp", "torch": torch.__version__}
    save_file(out, os.path.join(out_dir, "amp.safetensors"), metadata=meta)
    for name, s in summary.items():
        print(f"amp {name}: {s}")


def make_amp_two(out_dir):
    """amp_two_rounding.safetensors: gpt2_tiny's first bf16 loss (amp.safetensors' first batch)
    when its two linears with a 16-bit output, c_attn and c_fc, round twice: the product to
    bf16, then the bf16 bias added and rounded again. That is cuBLASLt's bias epilogue as an
    H200 computes it (docs/perf/gpu.md), which PyTorch's own CUDA addmm and Gantry's cuda backend
    with BackendOptions::bias_epilogue both call; autocast on the CPU rounds once. The loss
    for four summation orders of the products (an fp32 mm, an exact sum, the reduction
    reversed, two halves; all in fp32 from the bf16-rounded inputs, as autocast's mm sums) gives
    the spread that summation order alone makes, beside the same spread when rounding once."""
    from safetensors.torch import load_file
    tiny = load_file(os.path.join(out_dir, "gpt2_tiny.safetensors"))
    amp = load_file(os.path.join(out_dir, "amp.safetensors"))
    p = {k[len("param."):]: v for k, v in tiny.items() if k.startswith("param.")}
    idx, tgt = amp["inputs"][0].long(), amp["targets"][0].long()
    bf = lambda t: t.to(torch.bfloat16).float()

    def product(a, w, order):  # fp32 sums of the bf16-rounded inputs, autocast off
        a, w = bf(a.float()), bf(w)
        with torch.autocast("cpu", enabled=False):
            if order == 0:
                return a @ w
            if order == 1:
                return (a.double() @ w.double()).float()
            if order == 2:
                return a.flip(-1) @ w.flip(0)
            h = a.shape[-1] // 2
            return a[:, :h] @ w[:h] + a[:, h:] @ w[h:]

    def loss(two, order):
        def lin(a, name):
            a2, w, b = a.reshape(-1, a.shape[-1]), p[name + ".weight"], p[name + ".bias"]
            if two and name.endswith(("c_attn", "c_fc")):
                return (bf(product(a2, w, order)) + bf(b)).to(torch.bfloat16)
            return (product(a2, w, order) + bf(b)).to(torch.bfloat16)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = gpt2_forward_autocast(p, idx, lin)
            return F.cross_entropy(logits.reshape(-1, V).float(), tgt.reshape(-1)).item()

    two = [loss(True, o) for o in range(4)]
    one = [loss(False, o) for o in range(4)]
    out = {"bf16_two.losses": torch.tensor(two, dtype=torch.float32),
           "bf16_one.losses": torch.tensor(one, dtype=torch.float32)}
    save_file(out, os.path.join(out_dir, "amp_two_rounding.safetensors"),
              metadata={"generator": "tests/reference/make_fixtures.py --only amp_two", "torch": torch.__version__})
    print(f"amp_two_rounding: first loss rounding twice {[round(x, 7) for x in two]} (spread "
          f"{max(two) - min(two):.3g}), once {[round(x, 7) for x in one]} (spread {max(one) - min(one):.3g}); "
          f"autocast's {amp['bf16.losses'][0].item():.7f}")


def make_llama_ops(out_dir):
    """The ops of Llama-family blocks, as transformers' LlamaForCausalLM runs them: RMSNorm
    (LlamaRMSNorm), rotary embeddings (rotate_half, the fp32 cos/sin of t * inv_freq) and the
    SwiGLU gate (silu(g) * u), on fp32 inputs; outputs and gradients in float64 (autograd)."""
    g = torch.Generator().manual_seed(11)
    r = lambda *s: torch.randn(*s, generator=g).to(torch.float32)
    d = lambda t: t.to(torch.float64).clone().requires_grad_(True)
    out = {}
    # RMSNorm, eps 1e-5
    N, Cn, eps = 7, 37, 1e-5
    x, w, dout = r(N, Cn) * 2 + 0.5, 1 + 0.1 * r(Cn), r(N, Cn)
    x64, w64 = d(x), d(w)
    rstd = torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
    y = w64 * (x64 * rstd)
    y.backward(dout.to(torch.float64))
    out.update({"rmsnorm.inp": x, "rmsnorm.weight": w, "rmsnorm.dout": dout, "rmsnorm.out": f32(y),
                "rmsnorm.rstd": f32(rstd[:, 0]), "rmsnorm.dinp": f32(x64.grad), "rmsnorm.dweight": f32(w64.grad)})
    # RoPE on packed qkv rows: B 2, T 5, 6 query heads, 2 key/value heads, head_dim 8, theta 500000
    Bn, Tn, nh, nkv, hd, theta = 2, 5, 6, 2, 8, 500000.0
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    pos = torch.arange(Tn, dtype=torch.float32)
    freqs = pos[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(torch.float64), emb.sin().to(torch.float64)  # HF's fp32 caches

    def rotate_half(t):
        return torch.cat((-t[..., hd // 2:], t[..., :hd // 2]), dim=-1)

    qkv = r(Bn, Tn, (nh + 2 * nkv) * hd)
    dqkv = r(Bn, Tn, (nh + 2 * nkv) * hd)
    q64 = d(qkv)
    q = q64[..., : nh * hd].reshape(Bn, Tn, nh, hd)
    k = q64[..., nh * hd: (nh + nkv) * hd].reshape(Bn, Tn, nkv, hd)
    v = q64[..., (nh + nkv) * hd:]
    c4, s4 = cos[None, :, None, :], sin[None, :, None, :]
    qr, kr = q * c4 + rotate_half(q) * s4, k * c4 + rotate_half(k) * s4
    y = torch.cat((qr.reshape(Bn, Tn, -1), kr.reshape(Bn, Tn, -1), v), dim=-1)
    y.backward(dqkv.to(torch.float64))
    out.update({"rope.qkv": qkv, "rope.inv_freq": inv_freq, "rope.out": f32(y), "rope.dout": dqkv,
                "rope.dqkv": f32(q64.grad)})
    # SwiGLU gate: gu rows [g | u], h = silu(g) * u
    N, Fn = 9, 13
    gu, dh = r(N, 2 * Fn) * 2, r(N, Fn)
    gu64 = d(gu)
    h = F.silu(gu64[:, :Fn]) * gu64[:, Fn:]
    h.backward(dh.to(torch.float64))
    out.update({"swiglu.gu": gu, "swiglu.dh": dh, "swiglu.h": f32(h), "swiglu.dgu": f32(gu64.grad)})
    # Grouped-query attention: 6 query heads over 2 key/value heads, head_dim 4, causal, as
    # transformers' eager attention (repeat_kv, softmax of q k^T / sqrt(hd)).
    Bn, Tn, nh, nkv, hd = 2, 5, 6, 2, 4
    qkv = r(Bn, Tn, (nh + 2 * nkv) * hd)
    dout = r(Bn, Tn, nh * hd)
    q64 = d(qkv)
    q = q64[..., : nh * hd].reshape(Bn, Tn, nh, hd).transpose(1, 2)
    k = q64[..., nh * hd: (nh + nkv) * hd].reshape(Bn, Tn, nkv, hd).transpose(1, 2)
    v = q64[..., (nh + nkv) * hd:].reshape(Bn, Tn, nkv, hd).transpose(1, 2)
    k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
    att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    att = att.masked_fill(torch.triu(torch.ones(Tn, Tn, dtype=torch.bool), 1), float("-inf")).softmax(-1)
    y = (att @ v).transpose(1, 2).reshape(Bn, Tn, nh * hd)
    y.backward(dout.to(torch.float64))
    out.update({"gqa.qkv": qkv, "gqa.dout": dout, "gqa.out": f32(y), "gqa.dqkv": f32(q64.grad)})
    save_file(out, os.path.join(out_dir, "llama_ops.safetensors"),
              metadata={"generator": "tests/reference/make_fixtures.py --only llama_ops", "torch": torch.__version__})
    print(f"llama_ops: {len(out)} tensors")


# ---------------------------------------------------------------------------------------------
# Mixture of experts (issue 22)

MOE_MODEL = dict(vocab_size=97, n_positions=29, T=23, n_layer=4, n_head=4, n_embd=32, batch=4)
MOE_VARIANTS = {
    "top1": dict(num_experts=4, top_k=1, capacity_factor=1.25, aux_loss_coeff=0.01, z_loss_coeff=0.001,
                 every_n_layers=2),
    "top2": dict(num_experts=4, top_k=2, capacity_factor=0.0, aux_loss_coeff=0.01, z_loss_coeff=0.001,
                 every_n_layers=2),
}
MOE_SEEDS = {"top1": 2201000, "top2": 2202000}  # the first seed each variant tries
MOE_HP = dict(HP, steps=10)
# Initialization: router weights N(0, 0.3^2), for decisive routing; wte and wpe N(0, 0.1^2), so
# tokens differ enough that they do not all pick one expert; other matrices N(0, 0.02^2).
MOE_GATE_STD, MOE_EMB_STD = 0.3, 0.1
MOE_MARGIN = 1e-4  # the least relative gap between ranked router probabilities (see moe_mlp)


def moe_layers(cfg):
    """The MoE layers: l with (l + 1) % every_n_layers == 0."""
    n = cfg["moe"]["every_n_layers"]
    return [l for l in range(cfg["n_layer"]) if (l + 1) % n == 0]


def moe_capacity(cfg, tokens):
    """Slots per expert for `tokens` routed tokens: ceil(c * tokens * k / E) (in double, in
    that order), or 0 for dropless (c = 0)."""
    m = cfg["moe"]
    c = m["capacity_factor"]
    return 0 if c == 0 else math.ceil(c * tokens * m["top_k"] / m["num_experts"])


def moe_param_shapes(cfg):
    """The MoE GPT's tensors, in order: GPT-2's, with a MoE layer's mlp.c_fc / mlp.c_proj
    replaced by mlp.gate.weight (E, C) and each expert's c_fc / c_proj (Conv1D layouts)."""
    Vn, NP, Cn, E = cfg["vocab_size"], cfg["n_positions"], cfg["n_embd"], cfg["moe"]["num_experts"]
    moe = moe_layers(cfg)
    shapes = {"wte.weight": (Vn, Cn), "wpe.weight": (NP, Cn)}
    for l in range(cfg["n_layer"]):
        h = f"h.{l}."
        shapes.update({
            h + "ln_1.weight": (Cn,), h + "ln_1.bias": (Cn,),
            h + "attn.c_attn.weight": (Cn, 3 * Cn), h + "attn.c_attn.bias": (3 * Cn,),
            h + "attn.c_proj.weight": (Cn, Cn), h + "attn.c_proj.bias": (Cn,),
            h + "ln_2.weight": (Cn,), h + "ln_2.bias": (Cn,),
        })
        mlps = [h + "mlp."]
        if l in moe:
            shapes[h + "mlp.gate.weight"] = (E, Cn)
            mlps = [f"{h}mlp.experts.{e}." for e in range(E)]
        for m in mlps:
            shapes.update({m + "c_fc.weight": (Cn, 4 * Cn), m + "c_fc.bias": (4 * Cn,),
                           m + "c_proj.weight": (4 * Cn, Cn), m + "c_proj.bias": (Cn,)})
    shapes.update({"ln_f.weight": (Cn,), "ln_f.bias": (Cn,)})
    return shapes


def moe_route(probs, k, capacity, impl):
    """Routing of one MoE layer's N tokens (probs (N, E), no gradient). Returns the chosen
    experts idx (N, k) by rank (highest probability first, ties to the lower index), which
    of those assignments are kept (N, k, bool), and each expert's routed count (E,), before
    drops). Assignments claim slots in priority order: every token's first choice in token
    order, then every token's second choice, and so on; one finding its expert's capacity
    slots taken is dropped. impl "loop" does that literally, in Python; "vector" sorts with
    torch and counts slots with a cumulative sum over the one-hot assignments (GShard's way)."""
    N, E = probs.shape
    if impl == "loop":
        idx = torch.tensor([sorted(range(E), key=lambda e: (-probs[t, e].item(), e))[:k] for t in range(N)],
                           dtype=torch.long).view(N, k)
        keep = torch.zeros(N, k, dtype=torch.bool)
        filled = [0] * E
        for r in range(k):
            for t in range(N):
                e = idx[t, r].item()
                if capacity == 0 or filled[e] < capacity:
                    keep[t, r] = True
                    filled[e] += 1
        routed = torch.bincount(idx.reshape(-1), minlength=E)
        return idx, keep, routed
    _, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    idx = order[:, :k]
    prio = idx.T.reshape(-1)  # rank-major, token-minor: the priority order
    onehot = F.one_hot(prio, E)
    slot = (onehot.cumsum(0) - 1).gather(1, prio[:, None])[:, 0]
    keep = slot < capacity if capacity > 0 else torch.ones_like(prio, dtype=torch.bool)
    return idx, keep.view(k, N).T.contiguous(), onehot.sum(0)


def moe_expert(p, prefix, x):
    m = F.gelu(x @ p[prefix + "c_fc.weight"] + p[prefix + "c_fc.bias"], approximate="tanh")
    return m @ p[prefix + "c_proj.weight"] + p[prefix + "c_proj.bias"]


def moe_mlp(p, h, x, cfg, impl):
    """One MoE layer's MLP on x (N, C), the ln_2 output of the N = B*T tokens in (b, t)
    row-major order. Returns y (N, C), aux, z and the layer's routing record. impl "dense":
    loop routing, every expert run on every token and weighted by an (N, E) combine matrix
    (zero where unrouted or dropped); "dispatch": vector routing, each expert run on the
    tokens it keeps (gathered), its weighted output scattered back with index_add."""
    m = cfg["moe"]
    E, k = m["num_experts"], m["top_k"]
    N = x.shape[0]
    capacity = moe_capacity(cfg, N)
    logits = x @ p[h + "mlp.gate.weight"].T
    probs = logits.softmax(dim=-1)
    idx, keep, routed = moe_route(probs.detach(), k, capacity, "loop" if impl == "dense" else "vector")
    chosen = probs.gather(1, idx)
    w = chosen / chosen.sum(dim=-1, keepdim=True)  # renormalised over the k chosen; 1 for k = 1
    experts = [f"{h}mlp.experts.{e}." for e in range(E)]
    if impl == "dense":
        combine = torch.zeros(N, E, dtype=x.dtype).scatter(1, idx, w * keep)
        y = sum(combine[:, e:e + 1] * moe_expert(p, experts[e], x) for e in range(E))
    else:
        y = torch.zeros_like(x)
        for e in range(E):
            t, r = ((idx == e) & keep).nonzero(as_tuple=True)  # may be empty: zero gradients
            y = y.index_add(0, t, moe_expert(p, experts[e], x[t]) * w[t, r][:, None])
    f = routed.to(x.dtype) / (k * N)  # fraction of the k*N assignments per expert, before drops
    aux = E * (f * probs.mean(dim=0)).sum()
    z = (torch.logsumexp(logits, dim=-1) ** 2).mean()
    # The routing's margin: the least relative gap between consecutive ranked probabilities
    # among the first k + 1 (rank 1..k order decides priority, rank k / k + 1 the choice).
    ranked = probs.detach().sort(dim=-1, descending=True).values
    gaps = [(ranked[:, j] - ranked[:, j + 1]) / ranked[:, j] for j in range(min(k, E - 1))]
    margin = torch.stack(gaps).min().item() if gaps else math.inf
    rec = dict(probs=probs.detach(), idx=idx, keep=keep, routed=routed, dropped=int((~keep).sum()),
               margin=margin, capacity=capacity)
    return y, aux, z, rec


def moe_forward(p, idx, cfg, impl="dispatch"):
    """The MoE GPT (see make_moe): gpt2_forward with moe_mlp in the MoE layers. Returns logits
    (B, T, V), the per-MoE-layer aux and z losses (lists) and the per-MoE-layer routing records."""
    Bn, Tn = idx.shape
    Cn = cfg["n_embd"]
    moe = moe_layers(cfg)
    auxes, zs, recs = [], [], []

    def mlp(l, h, m):
        if l not in moe:
            return None
        y, aux, z, rec = moe_mlp(p, h, m.reshape(Bn * Tn, Cn), cfg, impl)
        auxes.append(aux)
        zs.append(z)
        recs.append(rec)
        return y.view(Bn, Tn, Cn)

    logits = gpt2_forward(p, idx, cfg["n_layer"], Cn, cfg["n_head"], mlp)
    return logits, auxes, zs, recs


def moe_loss(p, inputs, targets, cfg, impl="dispatch", coeffs=None):
    """Total loss = CE + aux_loss_coeff * sum(aux) + z_loss_coeff * sum(z), and its parts."""
    m = cfg["moe"]
    ca, cz = coeffs if coeffs is not None else (m["aux_loss_coeff"], m["z_loss_coeff"])
    logits, auxes, zs, recs = moe_forward(p, inputs, cfg, impl)
    ce = F.cross_entropy(logits.reshape(-1, cfg["vocab_size"]), targets.reshape(-1))
    aux, z = sum(auxes), sum(zs)
    return ce + ca * aux + cz * z, dict(logits=logits, ce=ce, aux=aux, z=z, auxes=auxes, zs=zs, recs=recs)


def moe_train(init, inputs, targets, cfg, clip, dtype, impl="dispatch", out=None):
    """MOE_HP["steps"] AdamW steps (adamw_steps: clipping, nanoGPT's decay grouping) in dtype
    from the fp32 start. Returns the losses, the routing records of each step's forward (at
    the parameters before that step's update), and the parameters after the last step."""
    params = {k: v.to(dtype).clone().requires_grad_(True) for k, v in init.items()}
    steps = []

    def loss_fn():
        loss, parts = moe_loss(params, inputs, targets, cfg, impl)
        steps.append(parts["recs"])
        return loss

    losses = adamw_steps(params, loss_fn, clip, {} if out is None else out, steps=MOE_HP["steps"],
                         every_step=False)
    return losses, steps, params


def check_moe_route_rules():
    """Both routings on a hand-made case: ties rank the lower index first, and with capacity
    1 the rank-1 choices (in token order) claim the slots before any rank-2 choice."""
    probs = torch.tensor([[0.25, 0.25, 0.25, 0.25], [0.1, 0.4, 0.4, 0.1], [0.5, 0.2, 0.2, 0.1]],
                         dtype=torch.float64)
    for impl in ("loop", "vector"):
        idx, keep, routed = moe_route(probs, 2, 1, impl)
        assert idx.tolist() == [[0, 1], [1, 2], [0, 1]], (impl, idx)
        assert keep.tolist() == [[True, False], [True, True], [False, False]], (impl, keep)
        assert routed.tolist() == [2, 3, 1, 0], (impl, routed)
        idx, keep, _ = moe_route(probs, 2, 0, impl)
        assert keep.all()


def check_moe_matches_gpt2():
    """With one expert (k 1, dropless) a MoE layer is GPT-2's MLP (the weight is p / p = 1):
    moe_forward equals gpt2_forward on gpt2_tiny's sizes, so the rest of the model is GPT-2's."""
    gen = torch.Generator().manual_seed(5)
    gp = random_params(gen)
    cfg = dict(vocab_size=V, n_positions=NPOS, T=T, n_layer=L, n_head=NH, n_embd=C, batch=B,
               moe=dict(num_experts=1, top_k=1, capacity_factor=0.0, aux_loss_coeff=0.01, z_loss_coeff=0.001,
                        every_n_layers=2))
    mp = {}
    for name, t in gp.items():
        for l in moe_layers(cfg):
            name = name.replace(f"h.{l}.mlp.", f"h.{l}.mlp.experts.0.")
        mp[name] = t
    for l in moe_layers(cfg):
        mp[f"h.{l}.mlp.gate.weight"] = torch.randn(1, C, generator=gen)
    shapes = moe_param_shapes(cfg)
    assert sorted(mp) == sorted(shapes) and all(tuple(mp[k].shape) == shapes[k] for k in shapes)
    idx = torch.randint(0, V, (B, T), generator=gen)
    want = gpt2_forward({k: v.double() for k, v in gp.items()}, idx)
    for impl in ("dense", "dispatch"):
        got = moe_forward({k: v.double() for k, v in mp.items()}, idx, cfg, impl)[0]
        assert torch.allclose(got, want, rtol=0, atol=1e-13), f"one-expert MoE ({impl}) is not GPT-2"


def moe_try_seed(name, seed):
    """Builds the variant from seed and runs it in float64, both implementations. Returns
    None (with the reason printed) when the routing is not robust to rounding or (top-1)
    drops nothing at step 0; else everything make_moe writes."""
    cfg = dict(MOE_MODEL, moe=dict(MOE_VARIANTS[name]))
    cfg["moe"]["moe_layers"] = moe_layers(cfg)
    tokens = cfg["batch"] * cfg["T"]
    cfg["moe"]["tokens"] = tokens
    cfg["moe"]["capacity"] = moe_capacity(cfg, tokens)
    gen = torch.Generator().manual_seed(seed)
    init = {}
    for pname, shape in moe_param_shapes(cfg).items():
        if pname.endswith(("ln_1.weight", "ln_2.weight")) or pname == "ln_f.weight":
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        elif pname.endswith("gate.weight"):
            t = MOE_GATE_STD * torch.randn(shape, generator=gen)
        elif pname in ("wte.weight", "wpe.weight"):
            t = MOE_EMB_STD * torch.randn(shape, generator=gen)
        else:
            t = 0.02 * torch.randn(shape, generator=gen)
        init[pname] = t.to(torch.float32)
    inputs = torch.randint(0, cfg["vocab_size"], (cfg["batch"], cfg["T"]), generator=gen)
    targets = torch.randint(0, cfg["vocab_size"], (cfg["batch"], cfg["T"]), generator=gen)

    # Step 0, both implementations: the same routing, logits, losses and gradients.
    runs = {}
    for impl in ("dense", "dispatch"):
        params = {k: v.to(torch.float64).clone().requires_grad_(True) for k, v in init.items()}
        loss, parts = moe_loss(params, inputs, targets, cfg, impl)
        loss.backward()
        runs[impl] = (params, loss, parts)
    (pa, la, qa), (pb, lb, qb) = runs["dense"], runs["dispatch"]
    for ra, rb in zip(qa["recs"], qb["recs"]):
        assert torch.equal(ra["idx"], rb["idx"]) and torch.equal(ra["keep"], rb["keep"]), "routings differ"
        assert torch.equal(ra["routed"], rb["routed"])
    assert torch.allclose(qa["logits"], qb["logits"], rtol=0, atol=1e-13), "logits differ"
    for key in ("ce", "aux", "z"):
        assert abs(qa[key].item() - qb[key].item()) < 1e-13, key
    for k in pa:
        ga, gb = pa[k].grad, pb[k].grad
        assert (ga - gb).abs().max().item() <= 1e-12 * max(ga.abs().max().item(), 1e-30), f"grad {k} differs"
    params, loss, parts = pb, lb, qb

    recs0 = parts["recs"]
    dropped0 = [r["dropped"] for r in recs0]
    if cfg["moe"]["capacity"] > 0 and sum(dropped0) == 0:
        print(f"moe {name}: seed {seed} drops nothing at step 0; next seed")
        return None
    if cfg["moe"]["capacity"] == 0:
        assert sum(dropped0) == 0
    if any(min(torch.bincount(r["idx"][r["keep"]], minlength=len(r["routed"])).tolist()) == 0 for r in recs0):
        print(f"moe {name}: seed {seed} leaves an expert without tokens at step 0; next seed")
        return None

    # The router learns: its gradient through the CE alone (zero for top-1, whose weight is
    # 1 whatever the probabilities), and through the aux and z losses.
    gates = [f"h.{l}.mlp.gate.weight" for l in cfg["moe"]["moe_layers"]]
    router = {}
    for tag, coeffs in (("ce", (0.0, 0.0)), ("aux", (1.0, 0.0)), ("z", (0.0, 1.0))):
        pp = {k: v.to(torch.float64).clone().requires_grad_(True) for k, v in init.items()}
        l_, parts_ = moe_loss(pp, inputs, targets, cfg, coeffs=coeffs)
        if tag != "ce":
            l_ = l_ - parts_["ce"]
        l_.backward()
        router[tag] = max(pp[g].grad.abs().max().item() for g in gates)
    if cfg["moe"]["top_k"] == 1:
        assert router["ce"] < 1e-15, router
    else:
        assert router["ce"] > 1e-6, router
    assert router["aux"] > 1e-6 and router["z"] > 1e-6, router

    out, grad_norm0 = reference_record(init, params, parts["logits"], loss, inputs, targets)
    clip = 0.5 * grad_norm0

    # 10 steps, both implementations, float64; then fp32 (dispatch), whose routing must be
    # the float64 run's at every step.
    train = {}
    for impl in ("dense", "dispatch"):
        train[impl] = moe_train(init, inputs, targets, cfg, clip, torch.float64, impl,
                                out=out if impl == "dispatch" else None)
    losses, steps, final = train["dispatch"]
    assert max(abs(a - b) for a, b in zip(train["dense"][0], losses)) < 1e-12, "train losses differ"
    for k in final:
        assert torch.allclose(train["dense"][2][k], final[k], rtol=0, atol=1e-12), f"step10 {k} differs"
    margin = min(r["margin"] for recs in [recs0] + steps for r in recs)
    if margin < MOE_MARGIN:
        print(f"moe {name}: seed {seed} has a routing margin of {margin:.3g} < {MOE_MARGIN}; next seed")
        return None
    losses32, steps32, final32 = moe_train(init, inputs, targets, cfg, clip, torch.float32)
    for s, (r64, r32) in enumerate(zip(steps, steps32)):
        for ra, rb in zip(r64, r32):
            assert torch.equal(ra["idx"], rb["idx"]), f"fp32 picks other experts at step {s + 1}"
            assert torch.equal(ra["keep"], rb["keep"]), f"fp32 drops otherwise at step {s + 1}"
    fp32 = dict(loss_rel=max(abs(a - b) / b for a, b in zip(losses32, losses)),
                param_rel=max(((final32[k].double() - final[k]).norm() / final[k].norm()).item() for k in final))

    n_moe = len(recs0)
    E = cfg["moe"]["num_experts"]
    out.update({
        "ce_loss": f32(parts["ce"].reshape(1)), "aux_loss": f32(parts["aux"].reshape(1)),
        "z_loss": f32(parts["z"].reshape(1)),
        "aux_loss_layers": f32(torch.stack(parts["auxes"])), "z_loss_layers": f32(torch.stack(parts["zs"])),
        "dropped": torch.tensor(dropped0, dtype=torch.int32),
        "tokens_per_expert": torch.stack([r["routed"] for r in recs0]).to(torch.int32),
        "router_probs": f32(torch.stack([r["probs"] for r in recs0])),
        "expert_index": torch.stack([r["idx"] for r in recs0]).to(torch.int32),
        "expert_kept": torch.stack([r["keep"] for r in recs0]).to(torch.int32),
        "train_losses": torch.tensor(losses, dtype=torch.float32),
        "train_dropped": torch.tensor([[r["dropped"] for r in recs] for recs in steps], dtype=torch.int32),
        "train_tokens_per_expert": torch.stack([torch.stack([r["routed"] for r in recs]) for recs in steps])
                                        .to(torch.int32).view(len(steps), n_moe, E),
    })
    assert torch.equal(out["train_dropped"][0], out["dropped"])
    hp = dict(MOE_HP, grad_clip=clip, seed=seed)
    summary = dict(seed=seed, loss=loss.item(), ce=parts["ce"].item(), aux=parts["aux"].item(), z=parts["z"].item(),
                   dropped=dropped0, tokens_per_expert=out["tokens_per_expert"].tolist(), margin=margin,
                   train_dropped=out["train_dropped"].tolist(), losses=losses, router_grad=router, fp32=fp32,
                   grad_norm=grad_norm0)
    return cfg, hp, out, summary


def make_moe(out_dir):
    """moe_tiny.safetensors: a GPT-2 whose layers l with (l + 1) % every_n_layers == 0 have a
    mixture-of-experts MLP. This docstring is the model's definition.

    Sizes: vocab 97, n_positions 29, T 23, 4 layers, 4 heads, C 32, batch 4 (N = B*T = 92
    tokens), E = 4 experts, every_n_layers 2, so layers 1 and 3 are MoE (0 and 2 dense).
    Two variants, in one file under the key prefixes "top1." and "top2.":
      top1: top_k 1, capacity_factor 1.25 (capacity 29 slots per expert; some assignments are
            dropped at step 0);
      top2: top_k 2, capacity_factor 0 (dropless).
    Both: aux_loss_coeff 0.01, z_loss_coeff 0.001.

    The model is gpt2_forward except for the MLP of a MoE layer. There x (N, C) is ln_2's
    output for the N = B*T tokens of the batch, in (b, t) row-major order (token n = b*T + t):
      - router: logits = x @ W_gate^T, W_gate (E, C) named h.{l}.mlp.gate.weight (nn.Linear
        layout, no bias); probs = softmax(logits) over the E experts, in the compute dtype.
      - choice: each token's k experts of highest probability, ranked by probability (rank 1
        the highest); equal probabilities rank the lower expert index first.
      - weights: w_j = p_j / (sum of the k chosen p), differentiated through (Mixtral's
        renormalisation). For k = 1 this is exactly 1, and its derivative 0: a top-1 router
        gets no gradient from the cross entropy, only from the aux and z losses (checked).
      - capacity: with capacity_factor c > 0 each expert has ceil(c * N * k / E) slots,
        computed in double in that order (the config records it as moe.capacity); c = 0 is
        dropless. Assignments claim slots in priority order: all tokens' rank-1 choices in
        token order, then all rank-2 choices in token order, and so on. An assignment whose
        expert has no free slot is dropped: that expert's term is left out of the token's
        output, and the other weights are not renormalised (a token with all its assignments
        dropped gets y = 0; the residual carries it). So expert e keeps its first
        min(routed_e, capacity) assignments in priority order.
      - experts: expert e is GPT-2's MLP with its own tensors h.{l}.mlp.experts.{e}.c_fc.weight
        (C, 4C), .c_fc.bias (4C), .c_proj.weight (4C, C), .c_proj.bias (C) (Conv1D layouts):
        E_e(x) = gelu_tanh(x @ c_fc.weight + c_fc.bias) @ c_proj.weight + c_proj.bias.
      - output: y_n = sum over token n's kept assignments (e, w) of w * E_e(x_n) (the bias
        included in the weighted term); the block adds y to the residual as the dense MLP's
        output.
      - load balancing (Switch Transformer): aux = E * sum_e f_e * P_e, where f_e = routed_e /
        (k * N) is the fraction of the k*N assignments that chose e, counted before capacity
        drops and not differentiated, and P_e = the mean over the N tokens of probs[:, e]
        (differentiated). Uniform routing gives 1. (HF Mixtral's load_balancing_loss_func
        divides by N, not k*N: k times this.)
      - router z-loss (ST-MoE): z = the mean over the N tokens of logsumexp(logits)^2.
    Total loss = cross_entropy + aux_loss_coeff * sum of aux over the MoE layers +
    z_loss_coeff * sum of z over the MoE layers.

    Training: 10 AdamW steps on the one batch as adamw_steps (torch.optim.AdamW, lr 1e-3,
    betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on tensors of 2+ dims (the gate and the
    expert weights included), 0 on the rest; clip_grad_norm_ over all tensors to half the
    step-0 gradient norm). Each step routes afresh from its current parameters.

    Per variant PREFIX ("top1." / "top2."): PREFIX param.NAME (the fp32 start), grad.NAME (of
    the total loss), logits (B, T, V), loss (total), ce_loss, aux_loss and z_loss (summed over
    the MoE layers, unscaled), aux_loss_layers and z_loss_layers (per MoE layer), dropped
    (per MoE layer: dropped assignments at step 0, int32), tokens_per_expert (n_moe, E:
    assignments routed before drops, step 0), router_probs (n_moe, N, E), expert_index and
    expert_kept (n_moe, N, k, int32: the chosen experts by rank and whether each was kept),
    inputs, targets, train_losses (10: the total loss of each step's forward, before its
    update), train_dropped (10, n_moe) and train_tokens_per_expert (10, n_moe, E) of those
    forwards (train_dropped[0] = dropped), and step10.NAME (the parameters after 10 steps).
    Metadata PREFIX config (json: the model's sizes and moe {num_experts, top_k,
    capacity_factor, aux_loss_coeff, z_loss_coeff, every_n_layers, moe_layers, tokens,
    capacity}) and PREFIX hparams (lr, beta1, beta2, eps, weight_decay, steps, grad_clip,
    seed).

    Checks, each an assertion: two implementations (routing by a literal loop with an (N, E)
    combine matrix over every expert on every token; torch.sort routing, cumsum slots and
    gather / index_add dispatch) give the same routing, logits, losses and gradients (1e-12)
    and the same 10 steps; with one expert the model is gpt2_forward; rounding cannot change
    the routing: at every step and MoE layer, each token's first k + 1 ranked probabilities
    are apart by at least 1e-4 relative ((p_j - p_j+1) / p_j for j = 1..k; rank k against
    k + 1 decides the choice, ranks 1..k the priority order, and priority is otherwise by
    token index, so no capacity boundary can move), else the next seed is tried; and the
    same model run in fp32 by torch chooses and drops the same assignments at every step."""
    out, meta, summary = {}, {"variants": json.dumps(list(MOE_VARIANTS)),
                              "generator": "tests/reference/make_fixtures.py --only moe",
                              "torch": torch.__version__}, {}
    check_moe_route_rules()
    check_moe_matches_gpt2()
    for name in MOE_VARIANTS:
        for seed in range(MOE_SEEDS[name], MOE_SEEDS[name] + 50):
            got = moe_try_seed(name, seed)
            if got is not None:
                break
        else:
            raise RuntimeError(f"moe {name}: no seed of 50 routes robustly")
        cfg, hp, tensors, s = got
        out.update({f"{name}.{k}": v for k, v in tensors.items()})
        meta[f"{name}.config"] = json.dumps(cfg)
        meta[f"{name}.hparams"] = json.dumps(hp)
        summary[name] = s
    path = os.path.join(out_dir, "moe_tiny.safetensors")
    save_file(out, path, metadata=meta)
    for name, s in summary.items():
        print(f"moe_tiny {name}: seed {s['seed']}, loss {s['loss']:.6f} (ce {s['ce']:.6f}, aux {s['aux']:.6f}, "
              f"z {s['z']:.6f}), grad norm {s['grad_norm']:.4f}, dropped {s['dropped']}, tokens per expert "
              f"{s['tokens_per_expert']}, least routing margin {s['margin']:.3g}, router grad max {s['router_grad']}")
        print(f"  train losses {s['losses']}")
        print(f"  train dropped {s['train_dropped']}")
        print(f"  fp32 torch run: losses within {s['fp32']['loss_rel']:.3g} relative, step10 tensors within "
              f"{s['fp32']['param_rel']:.3g} norm-wise")
    print(f"moe_tiny: {len(out)} tensors, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures"))
    ap.add_argument("--only", choices=["gpt2", "llama", "kernels", "amp", "amp_two", "llama_ops", "moe"],
                    help="write this fixture file alone")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    if args.only in (None, "gpt2"):
        make_gpt2(args.out)
    if args.only in (None, "llama"):
        make_llama(args.out)
    if args.only in (None, "kernels"):
        make_kernels(args.out)
    if args.only in (None, "amp"):
        make_amp(args.out)
    if args.only in (None, "amp_two"):
        make_amp_two(args.out)
    if args.only in (None, "llama_ops"):
        make_llama_ops(args.out)
    if args.only in (None, "moe"):
        make_moe(args.out)
