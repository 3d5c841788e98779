#!/usr/bin/env python3
"""The PyTorch peer of gantry-train: the same GPT-2 (pre-LN, learned positions, tanh GELU,
tied embeddings, Conv1D-layout weights), the same AdamW grouping and clipping, on CPU.

  bench mode:  torch_gpt2.py bench --n-layer 6 --n-embd 384 --n-head 6 --seq-len 256 \
                   --vocab 256 --batch 8 --steps 10 --threads 2
  train mode:  torch_gpt2.py train --data datasets/fortunes/train.bin --val datasets/fortunes/val.bin ...
  gpu-bench:   torch_gpt2.py gpu-bench [--arch gpt2|llama] [--profile]   (GPT-2 124M, or a Llama of
               its size through transformers' LlamaForCausalLM, on one GPU, for bench/gpu/run.sh)

Eager mode with scaled_dot_product_attention: what a PyTorch user on CPU runs. On the GPU
(gpu-bench): bf16 autocast, torch.compile, fused AdamW, SDPA (flash) attention, what a
PyTorch user on a GPU runs.
"""
import argparse
import gc
import json
import math
import re
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, nh):
        super().__init__()
        self.nh = nh
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        hs = C // self.nh
        q, k, v = (t.view(B, T, self.nh, hs).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, npos, L, nh, C):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(npos, C)
        self.h = nn.ModuleList([Block(C, nh) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        for n, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith("c_proj.weight") or n.endswith("mlp_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:T]
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.T
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def make_optimizer(model, lr, betas, eps, wd):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": other, "weight_decay": 0.0}],
                             lr=lr, betas=betas, eps=eps)


def train_step(model, opt, x, y, clip, dtype=None):
    """One step; dtype torch.bfloat16: the forward under CPU autocast (fp32 master weights)."""
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
        loss = model(x, y)
    loss.backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    return loss.item()


def bench(a):
    torch.manual_seed(0)
    model = GPT(a.vocab, a.seq_len, a.n_layer, a.n_head, a.n_embd)
    opt = make_optimizer(model, 1e-4, (0.9, 0.95), 1e-8, 0.1)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, a.vocab, (a.batch, a.seq_len), generator=g)
    y = torch.randint(0, a.vocab, (a.batch, a.seq_len), generator=g)
    dtype = torch.bfloat16 if a.precision == "bf16" else None
    for _ in range(a.warmup):
        train_step(model, opt, x, y, 1.0, dtype)
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        train_step(model, opt, x, y, 1.0, dtype)
        times.append(time.perf_counter() - t0)
    med = sorted(times)[len(times) // 2]
    print(json.dumps({"impl": "pytorch", "tokens_per_s": a.batch * a.seq_len / med, "step_ms": med * 1e3,
                      "threads": torch.get_num_threads(), "torch": torch.__version__}))


# gpu-bench --arch llama: a Llama of GPT-2 124M's depth and width (12 layers, 768 wide, 12
# query heads over 4 key/value heads, SwiGLU FFN 2048, vocab 32000, untied embeddings, RMSNorm
# eps 1e-5, RoPE theta 10000), the shape bench/gpu/gpt2_bench.cc --arch llama builds in gantry.
LLAMA = dict(L=12, C=768, nh=12, nkv=4, ffn=2048, V=32000)


class LlamaLM(nn.Module):
    """transformers' LlamaForCausalLM (random init, SDPA attention), its loss computed as the
    GPT-2 path computes it: the logits of every position against the given targets (no labels=,
    which would shift them inside transformers)."""

    def __init__(self, L, C, nh, nkv, ffn, V, T):
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(vocab_size=V, hidden_size=C, intermediate_size=ffn, num_hidden_layers=L,
                          num_attention_heads=nh, num_key_value_heads=nkv, max_position_embeddings=T,
                          rms_norm_eps=1e-5, tie_word_embeddings=False, use_cache=False,
                          attn_implementation="sdpa")
        self.m = LlamaForCausalLM(cfg)
        assert self.m.config._attn_implementation == "sdpa", self.m.config._attn_implementation

    def forward(self, idx, targets):
        logits = self.m(input_ids=idx, use_cache=False).logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def op_category(name):
    """The gantry op (bench/gpu/gpt2_bench.cc's profile table, without fwd/bwd) that a CUDA kernel's
    name (cuBLAS, flash/cuDNN attention, inductor's triton_{poi,per,red}_fused_<aten ops>_N) or,
    on CPU, an aten op's name falls under; the first match wins."""
    n = name.lower()
    words = set(re.split(r"[^a-z0-9]+", n))
    if re.search(r"flash|fmha|sdpa|attention|attn", n):
        return "attention"
    if re.search(r"gemm|gemv|cutlass|xmma|nvjet|cublas|splitk|triton_tem", n) or \
            words & {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear"}:
        return "matmul"
    if re.search(r"softmax|nll_loss|cross_entropy", n):
        return "classifier softmax+xent"  # gantry fuses the classifier's forward and backward
    if "embedding" in n:
        return "encoder"
    if "layer_norm" in n:
        return "layernorm"
    if "rms_norm" in n or "rsqrt" in words or ("pow" in words and words & {"mean", "sum"} and not words & {"tanh"}):
        return "rmsnorm"  # transformers' LlamaRMSNorm: pow, mean, rsqrt (backward: pow, sum)
    if words & {"gelu", "tanh"}:
        return "gelu"
    if words & {"silu", "sigmoid"}:
        return "swiglu"
    if words & {"cos", "sin", "neg"}:  # transformers' apply_rotary_pos_emb (rotate_half: neg, cat)
        return "rope"
    if n.startswith("triton"):
        ops = words - {"triton", "poi", "per", "red", "fused", ""} - {w for w in words if w.isdigit()}
        if ops <= {"to", "copy", "clone", "view", "t", "permute", "transpose"}:
            return "cast"  # autocast's bf16 copies of the fp32 weights, layout copies
        return "residual" if ops <= {"add"} else "fused (triton)"
    if words & {"add", "add_"}:
        return "residual"
    return "other"


def profile_step(dev, phases):
    """One more step under torch.profiler, one profiler session per phase (forward, backward,
    optimizer: synchronised at its end, so each kernel lands in its phase's session): kernel time
    per category (CPU: self time per aten op). Returns [(category, ms)], largest first."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    cuda = dev.type == "cuda"
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
    ms = {}
    carry = None
    for phase, fn in phases:
        with profile(activities=acts) as p:
            carry = fn(carry)
            if cuda:
                torch.cuda.synchronize()
        for e in p.events():
            if cuda:
                if e.device_type != DeviceType.CUDA or getattr(e, "is_user_annotation", False) or \
                        getattr(e, "activity_type", "") == "gpu_user_annotation" or e.name.startswith("##"):
                    continue  # CPU ops; ranges over kernels (record_function), not kernels
                us = e.time_range.elapsed_us()
            else:
                if e.device_type != DeviceType.CPU or e.name.startswith("##"):
                    continue
                us = e.self_cpu_time_total
            if phase == "optimizer":
                cat = "optimizer (norm, clip, adamw)"
            else:
                cat = op_category(e.name)
                if cat != "classifier softmax+xent":
                    cat += " " + phase
            ms[cat] = ms.get(cat, 0.0) + us / 1e3
    return sorted(ms.items(), key=lambda kv: -kv[1])


def gpu_bench(a):
    """GPT-2 124M (vocab padded to 50304) or --arch llama (LLAMA above), T 1024: the largest
    micro-batch that fits, tokens/s, MFU ((6N + 6 L C T) x tokens/s / peak), peak memory;
    --profile: kernel time per op category over one more step. --smoke: a tiny model on CPU,
    eager, to run the code paths anywhere in seconds."""
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    llama = a.arch == "llama"
    if llama:
        L, C, nh, nkv, ffn, V = (LLAMA[k] for k in ("L", "C", "nh", "nkv", "ffn", "V"))
        T, sample_v = 1024, V
    else:
        L, C, nh, T, V, sample_v = 12, 768, 12, 1024, 50304, 50257
    dev = torch.device("cuda")
    batches = [a.batch] if a.batch_given else [64, 48, 32, 24, 16, 12, 8, 4, 2, 1]
    if a.smoke:
        L, C, nh, T = 2, 64, 4, 32
        nkv, ffn, V = 2, 128, 256
        sample_v = V
        dev = torch.device("cpu")
        batches = [a.batch if a.batch_given else 2]
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model = opt = step_fn = None
    for B in batches:
        model = opt = step_fn = None
        if cuda:
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        try:
            torch.manual_seed(0)
            model = (LlamaLM(L, C, nh, nkv, ffn, V, T) if llama else GPT(V, T, L, nh, C)).to(dev, torch.float32)
            opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                                    fused=True)
            step_fn = model if a.smoke else torch.compile(model)
            x = torch.randint(0, sample_v, (B, T), device=dev)
            y = torch.randint(0, sample_v, (B, T), device=dev)

            def forward(_=None):
                opt.zero_grad(set_to_none=True)
                with torch.autocast(dev.type, dtype=torch.bfloat16):
                    return step_fn(x, y)

            def backward(loss):
                loss.backward()

            def update(_=None):
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()

            def step():
                loss = forward()
                backward(loss)
                update()

            for _ in range(a.warmup + 2):  # compilation happens here
                step()
            sync()
        except torch.cuda.OutOfMemoryError:
            model = opt = step_fn = None
            torch._dynamo.reset()  # drops the compiled graphs (and what they hold) of this try
            print(f"B {B}: out of memory", file=sys.stderr)
            continue
        times = []
        for _ in range(a.steps):
            sync()
            t0 = time.perf_counter()
            step()
            sync()
            times.append(time.perf_counter() - t0)
        med = sorted(times)[len(times) // 2]
        # The device's memory in use now, as gantry measures its own (cudaMemGetInfo: the
        # context, the allocator's reserved segments, the libraries' workspaces), beside the
        # allocator's peak.
        device_used = (lambda f, t: (t - f) / 1e9)(*torch.cuda.mem_get_info()) if cuda else 0.0
        # N counts every parameter, as llm.c does and as gantry's num_params() does: GPT-2's wte
        # once (tied: it is the classifier too) and wpe (a lookup); Llama's embed_tokens (a
        # lookup, about a fifth of N here) and lm_head both. The same N on both sides.
        n = sum(p.numel() for p in model.parameters())
        tok_s = B * T / med
        mfu = (6 * n + 6 * L * C * T) * tok_s / (a.peak_tflops * 1e12)
        ops = []
        if a.profile:
            try:
                ops = profile_step(dev, [("fwd", forward), ("bwd", backward), ("optimizer", update)])
            except Exception as e:  # the measurement above stands without the table
                print(f"profile failed: {type(e).__name__}: {e}", file=sys.stderr)
            total = sum(v for _, v in ops) or 1.0
            print(f"pytorch {a.arch} on {torch.cuda.get_device_name() if cuda else 'cpu'}: kernel time per op "
                  f"category over one step (fwd/bwd/optimizer profiled apart)")
            print(f"{'op (profiled step)':<30} {'ms':>10} {'share':>7}")
            for k, v in ops:
                print(f"{k:<30} {v:10.2f} {100 * v / total:6.1f}%")
        print(json.dumps({"impl": "pytorch", "arch": a.arch, "batch": B, "tokens_per_s": tok_s, "step_ms": med * 1e3,
                          "mfu": mfu, "params": n,
                          "memory_gb": torch.cuda.max_memory_allocated() / 1e9 if cuda else 0.0,
                          "memory_reserved_gb": torch.cuda.max_memory_reserved() / 1e9 if cuda else 0.0,
                          "device_used_gb": device_used,
                          "torch": torch.__version__, "gpu": torch.cuda.get_device_name() if cuda else "cpu",
                          "ops": {k: round(v, 3) for k, v in ops}}))
        return
    sys.exit("no micro-batch fits")


def load_bin(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype=np.int32)
        assert header[0] == 20240520 and header[1] == 1
        return np.frombuffer(f.read(), dtype=np.uint16).astype(np.int64)


def train(a):
    torch.manual_seed(a.seed)
    data, val = load_bin(a.data), load_bin(a.val)
    model = GPT(a.vocab, a.seq_len, a.n_layer, a.n_head, a.n_embd)
    opt = make_optimizer(model, a.lr, (0.9, 0.95), 1e-8, 0.1)
    BT = a.batch * a.seq_len
    nwin = (len(data) - 1) // BT
    rng = np.random.default_rng(a.seed)
    perm = rng.permutation(nwin)

    def window(tok, w):
        chunk = torch.from_numpy(tok[w * BT: w * BT + BT + 1])
        return chunk[:-1].view(a.batch, a.seq_len), chunk[1:].view(a.batch, a.seq_len)

    for step in range(a.steps):
        lr = a.lr * (step + 1) / a.warmup if step < a.warmup else \
            a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - a.warmup) / max(1, a.steps - a.warmup - 1))))
        for gr in opt.param_groups:
            gr["lr"] = lr
        x, y = window(data, perm[step % nwin])
        loss = train_step(model, opt, x, y, 1.0)
        if (step + 1) % 100 == 0 or step == 0:
            with torch.no_grad():
                vl = sum(model(*window(val, i)).item() for i in range(20)) / 20
            print(f"step {step + 1} loss {loss:.4f} val {vl:.4f}", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["bench", "train", "gpu-bench"])
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--n-embd", type=int, default=384)
    ap.add_argument("--n-head", type=int, default=6)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="bench: bf16 = CPU autocast")
    ap.add_argument("--data")
    ap.add_argument("--val")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2", help="gpu-bench: the model")
    ap.add_argument("--profile", action="store_true", help="gpu-bench: kernel time per op over one more step")
    ap.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)  # gpu-bench: tiny, on CPU, eager
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    a.batch_given = "--batch" in sys.argv
    if a.mode == "gpu-bench":
        gpu_bench(a)
    else:
        bench(a) if a.mode == "bench" else train(a)
