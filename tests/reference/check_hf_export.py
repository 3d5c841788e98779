#!/usr/bin/env python3
"""Loads model directories written by Gantry with Hugging Face transformers and checks
them against gantry-train on a fixed batch.

  python3 tests/reference/check_hf_export.py --gantry build/cli/gantry-train

Trains a tiny model for a few steps with a (sharded) checkpoint at the end and saves it.
Two directories are checked: `--save`, and the checkpoint assembled by `gantry-train
export`, which `gantry export` also runs. Each is loaded in GPT2LMHeadModel. The checks:
the mean loss gantry-train's `eval` prints against the one PyTorch computes (relative
<= 1e-5), and the first batch's logits against transformers' (max |difference| / max
|logit| <= 1e-4). Then a directory written by transformers' save_pretrained goes back into
gantry-train with the same loss. Needs torch, numpy, safetensors and transformers (not
needed by CI).
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
                    f"data: {{train: {d}/t.bin}}\ntrain: {{steps: 5, micro_batch: 4, lr: 1.0e-2}}\n"
                    f"checkpoint: {{every: 5, dir: {d}/ckpt}}\n")
        subprocess.run([a.gantry, os.path.join(d, "job.yaml"), "--save", os.path.join(d, "model"), "--no-progress"],
                       check=True, capture_output=True)
        subprocess.run([a.gantry, "export", "--checkpoint", os.path.join(d, "ckpt", "step_00000005"),
                        "--out", os.path.join(d, "export")], check=True, capture_output=True)
        B, T = 4, 24
        failed = 0
        for name in ("model", "export"):
            out = subprocess.run([a.gantry, "eval", "--from", os.path.join(d, name), "--data", os.path.join(d, "t.bin"),
                                  "--seq-len", "24", "--batch", "4", "--batches", "3",
                                  "--logits", os.path.join(d, name + ".logits")],
                                 check=True, capture_output=True, text=True).stdout
            gantry_loss = float(out.split()[-1])
            gantry_logits = np.fromfile(os.path.join(d, name + ".logits"), dtype=np.float32).reshape(B, T, 97)
            model = GPT2LMHeadModel.from_pretrained(os.path.join(d, name)).eval()
            losses = []
            with torch.no_grad():
                for w in range(3):
                    chunk = torch.from_numpy(toks[w * B * T: w * B * T + B * T + 1].astype(np.int64))
                    x, y = chunk[:-1].view(B, T), chunk[1:].view(B, T)
                    logits = model(x).logits
                    if w == 0:
                        hf_logits = logits.numpy()
                    losses.append(torch.nn.functional.cross_entropy(logits.view(-1, 97), y.view(-1)).item())
            hf_loss = sum(losses) / len(losses)
            rel = abs(gantry_loss - hf_loss) / hf_loss
            lrel = float(np.abs(gantry_logits - hf_logits).max() / np.abs(hf_logits).max())
            print(f"{name}: gantry-train eval loss {gantry_loss:.9g}, transformers {hf_loss:.9g}, relative {rel:.2e}; "
                  f"first batch's logits, max difference / max logit {lrel:.2e}")
            if rel > 1e-5 or lrel > 1e-4:
                print(f"FAIL: {name} does not reproduce gantry-train's loss and logits in transformers")
                failed += 1
        if failed:
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
        print("3 passed, 0 failed")
        return 0


if __name__ == "__main__":
    sys.exit(main())
