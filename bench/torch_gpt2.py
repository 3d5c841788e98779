#!/usr/bin/env python3
"""The PyTorch peer of gantry-train: the same GPT-2 (pre-LN, learned positions, tanh GELU,
tied embeddings, Conv1D-layout weights), the same AdamW grouping and clipping, on CPU.

  bench mode:  torch_gpt2.py bench --n-layer 6 --n-embd 384 --n-head 6 --seq-len 256 \
                   --vocab 256 --batch 8 --steps 10 --threads 2
  train mode:  torch_gpt2.py train --data data/fortunes/train.bin --val data/fortunes/val.bin ...
  gpu-bench:   torch_gpt2.py gpu-bench   (GPT-2 124M on one GPU, for bench/gpu/run.sh)

Eager mode with scaled_dot_product_attention: what a PyTorch user on CPU runs. On the GPU
(gpu-bench): bf16 autocast, torch.compile, fused AdamW, SDPA (flash) attention, what a
PyTorch user on a GPU runs.
"""
import argparse
import json
import math
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


def gpu_bench(a):
    """GPT-2 124M (vocab padded to 50304), T 1024: the largest micro-batch that fits, tokens/s,
    MFU ((6N + 6 L C T) x tokens/s / peak), peak memory."""
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    L, C, nh, T, V = 12, 768, 12, 1024, 50304
    dev = torch.device("cuda")
    batches = [a.batch] if a.batch_given else [64, 48, 32, 24, 16, 12, 8, 4, 2, 1]
    model = opt = step_fn = None
    for B in batches:
        model = opt = step_fn = None
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        try:
            torch.manual_seed(0)
            model = GPT(V, T, L, nh, C).to(dev)
            opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                                    fused=True)
            step_fn = torch.compile(model)
            x = torch.randint(0, 50257, (B, T), device=dev)
            y = torch.randint(0, 50257, (B, T), device=dev)

            def step():
                opt.zero_grad(set_to_none=True)
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = step_fn(x, y)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()

            for _ in range(a.warmup + 2):  # compilation happens here
                step()
            torch.cuda.synchronize()
        except torch.cuda.OutOfMemoryError:
            model = opt = step_fn = None
            print(f"B {B}: out of memory", file=sys.stderr)
            continue
        times = []
        for _ in range(a.steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        med = sorted(times)[len(times) // 2]
        n = sum(p.numel() for p in model.parameters())
        tok_s = B * T / med
        mfu = (6 * n + 6 * L * C * T) * tok_s / (a.peak_tflops * 1e12)
        print(json.dumps({"impl": "pytorch", "batch": B, "tokens_per_s": tok_s, "step_ms": med * 1e3, "mfu": mfu,
                          "memory_gb": torch.cuda.max_memory_allocated() / 1e9, "torch": torch.__version__,
                          "gpu": torch.cuda.get_device_name()}))
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
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    a.batch_given = "--batch" in sys.argv
    if a.mode == "gpu-bench":
        gpu_bench(a)
    else:
        bench(a) if a.mode == "bench" else train(a)
