#!/usr/bin/env python3
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

amp.safetensors (--only amp): mixed precision under torch.autocast on the CPU. fp32 values
rounded to bf16 and fp16 (edges included); one addmm and one GELU under autocast; and
gpt2_tiny's model (its weights, read from gpt2_tiny.safetensors) trained 10 AdamW steps on 10
batches in fp32, in bf16 autocast, and in fp16 autocast with GradScaler (from 2^16, and from
2^24 with growth_interval 3, which overflows, skips and grows): the losses, the scales and
the skipped steps. The model is written as Hugging Face's GPT-2 runs it (Conv1D is addmm,
attention is scaled_dot_product_attention, the tied head F.linear), so autocast casts where it
casts for that model. These are fp32/bf16/fp16 computations, not float64: the point is
autocast's roundings.

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


def gpt2_forward(p, idx):
    """GPT-2 forward; p maps HF names to tensors. Returns logits (B,T,V)."""
    Bn, Tn = idx.shape
    x = p["wte.weight"][idx] + p["wpe.weight"][:Tn]
    hs = C // NH
    mask = torch.tril(torch.ones(Tn, Tn, dtype=torch.bool))
    for l in range(L):
        h = f"h.{l}."
        a = F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], eps=1e-5)
        qkv = a @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=2)
        q = q.view(Bn, Tn, NH, hs).transpose(1, 2)
        k = k.view(Bn, Tn, NH, hs).transpose(1, 2)
        v = v.view(Bn, Tn, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(Bn, Tn, C)
        x = x + y @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]
        m = F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], eps=1e-5)
        m = F.gelu(m @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"], approximate="tanh")
        x = x + m @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], eps=1e-5)
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


def adamw_steps(params, loss_fn, clip, out):
    """HP["steps"] AdamW steps of loss_fn() over params (name -> tensor), clipping the
    gradient norm to clip, decay on tensors of 2+ dims only (nanoGPT's grouping). Records
    each step's clipped gradients (step{k}.grad.NAME) and parameters (step{k}.NAME) in out;
    returns the losses."""
    decay = [v for v in params.values() if v.dim() >= 2]
    no_decay = [v for v in params.values() if v.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": HP["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=HP["lr"], betas=(HP["beta1"], HP["beta2"]), eps=HP["eps"])
    losses = []
    for step in range(1, HP["steps"] + 1):
        opt.zero_grad()
        l = loss_fn()
        l.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), clip)
        for k, v in params.items():  # the clipped gradient this step applies
            out[f"step{step}.grad.{k}"] = f32(v.grad)
        opt.step()
        losses.append(l.item())
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


def gpt2_forward_autocast(p, idx):
    """gpt2_forward as Hugging Face's GPT-2 computes it, for autocast: Conv1D's addmm, SDPA,
    the tied head through F.linear. In fp32 it equals gpt2_forward up to rounding."""
    Bn, Tn = idx.shape
    x = p["wte.weight"][idx] + p["wpe.weight"][:Tn]
    hs = C // NH
    lin = lambda a, name: torch.addmm(p[name + ".bias"], a.reshape(-1, a.shape[-1]), p[name + ".weight"])
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


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures"))
    ap.add_argument("--only", choices=["gpt2", "llama", "kernels", "amp", "llama_ops"],
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
    if args.only in (None, "llama_ops"):
        make_llama_ops(args.out)
