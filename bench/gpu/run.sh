#!/usr/bin/env bash
# GPT-2 124M on one GPU: gantry's device model against PyTorch (torch.compile, bf16 autocast,
# SDPA, fused AdamW) in the same run, each at the largest micro-batch that fits, and the ratio.
# On the GPU host, from the repository root with .bundle/ carried (tests/gpu/run.sh bundle
# builds it here, and .bundle.tgz, the same packed): bash bench/gpu/run.sh [--steps N]
# gantry runs in bf16 (its --precision; the working copy and 16-bit activations, as autocast
# keeps them), then in fp32, then in bf16 with the cuBLAS attention path.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUNDLE=.bundle
[ -d "$BUNDLE" ] || tar -xzf "$BUNDLE.tgz"
export LD_LIBRARY_PATH="$PWD/$BUNDLE/lib:${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
echo "== gantry"
"$BUNDLE/bin/gpt2_gpu_bench" "$@" | tee /tmp/gantry_gpt2.txt
echo "== gantry, fp32"
"$BUNDLE/bin/gpt2_gpu_bench" --precision fp32 "$@" | tee /tmp/gantry_gpt2_fp32.txt
echo "== gantry, attention by cuBLAS over stored probabilities (the fused kernel's baseline)"
"$BUNDLE/bin/gpt2_gpu_bench" --attention reference "$@" | tee /tmp/gantry_gpt2_reference.txt
echo "== pytorch"
python3 bench/torch_gpt2.py gpu-bench "$@" | tee /tmp/torch_gpt2.txt
python3 - <<'PY'
import json
g = json.loads(open("/tmp/gantry_gpt2.txt").read().strip().splitlines()[-1])
t = json.loads(open("/tmp/torch_gpt2.txt").read().strip().splitlines()[-1])
print(f"gantry {g['tokens_per_s']:.0f} tok/s (B {g['batch']}, MFU {100 * g['mfu']:.1f}%, {g['memory_gb']:.1f} GB) | "
      f"pytorch {t['tokens_per_s']:.0f} tok/s (B {t['batch']}, MFU {100 * t['mfu']:.1f}%, {t['memory_gb']:.1f} GB) | "
      f"ratio {g['tokens_per_s'] / t['tokens_per_s']:.2f}x (target >= 1.0x, MFU >= 45%)")
r = json.loads(open("/tmp/gantry_gpt2_reference.txt").read().strip().splitlines()[-1])
f = json.loads(open("/tmp/gantry_gpt2_fp32.txt").read().strip().splitlines()[-1])
print(f"bf16 {g['tokens_per_s']:.0f} tok/s at B {g['batch']} against fp32's {f['tokens_per_s']:.0f} tok/s at B {f['batch']}: "
      f"{g['tokens_per_s'] / f['tokens_per_s']:.2f}x")
print(f"fused attention {g['tokens_per_s']:.0f} tok/s at B {g['batch']} against the cuBLAS path's "
      f"{r['tokens_per_s']:.0f} tok/s at B {r['batch']}: {g['tokens_per_s'] / r['tokens_per_s']:.2f}x")
PY
