#!/usr/bin/env python3
"""Plots bench/scaling's CSV: predicted tokens/s per GPU and MFU against GPU count, strong and
weak scaling, one line per model.
  build/bench/scaling --csv /tmp/scaling.csv && python3 bench/scaling_plot.py /tmp/scaling.csv docs/scaling.png
(needs matplotlib)."""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = list(csv.DictReader(open(sys.argv[1])))
fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharex=True)
for col, mode in enumerate(["strong", "weak"]):
    for model in sorted({r["model"] for r in rows}):
        pts = [r for r in rows if r["model"] == model and r["mode"] == mode]
        g = [int(r["gpus"]) for r in pts]
        axes[0][col].plot(g, [float(r["tokens_per_s"]) for r in pts], marker="o", label=model)
        axes[1][col].plot(g, [100 * float(r["mfu"]) for r in pts], marker="o", label=model)
    axes[0][col].set_title(f"{mode} scaling (predicted, DGX H100)")
    axes[0][col].set_ylabel("tokens/s")
    axes[0][col].set_yscale("log")
    axes[1][col].set_ylabel("MFU %")
    axes[1][col].set_xlabel("GPUs")
    for ax in (axes[0][col], axes[1][col]):
        ax.set_xscale("log", base=2)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=100)
