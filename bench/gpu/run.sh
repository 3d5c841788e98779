#!/usr/bin/env bash
# GPT-2 124M, and a Llama of its depth and width (12 x 768, 12 query heads over 4 KV heads,
# FFN 2048, vocab 32000), on one GPU: gantry's device model against PyTorch (torch.compile,
# bf16 autocast, SDPA, fused AdamW; transformers' LlamaForCausalLM for the Llama) in the same
# run, each at the largest micro-batch that fits, the ratios, and the time per op side by side.
# On the GPU host, from the repository root with .bundle/ carried (tests/gpu/run.sh bundle
# builds it here, and .bundle.txz, the same packed): bash bench/gpu/run.sh [--steps N]
# (the arguments go to every run). In order: gantry GPT-2 bf16 (attention auto: cuDNN where it
# loads; cuBLASLt's bias epilogue), the same rounding its biased outputs once, the same with the
# GELU epilogues, PyTorch GPT-2 (--profile), gantry Llama bf16, PyTorch Llama (--profile);
# GANTRY_BENCH_FP32=1 adds gantry GPT-2 in fp32, GANTRY_BENCH_FUSED=1 with gantry's fused
# attention kernels, GANTRY_BENCH_GQA_EXPAND=1 the Llama with its key/value heads repeated around
# the attention (GqaExpand, GqaReduce) rather than read grouped by cuDNN.
# About 4 minutes on an H100. A run that fails is reported and left out of the summary.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUNDLE=.bundle
source tests/gpu/env.sh
gpu_bundle_unpack "$BUNDLE"
gpu_bundle_env "$PWD/$BUNDLE/lib"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
OUT=/tmp/gantry_bench
rm -rf "$OUT" && mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# run NAME TITLE COMMAND...: its output on the terminal, its stdout in $OUT/NAME.txt too (the
# JSON last line); a failure is noted, and the run left out of the summary.
failed=0
run() {
  local name=$1 title=$2 rc=0
  shift 2
  echo "== $title"
  "$@" | tee "$OUT/$name.txt" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "== $title: FAILED (exit $rc)"
    failed=$((failed + 1))
    mv "$OUT/$name.txt" "$OUT/$name.failed"
  fi
}
run gantry_gpt2 "gantry GPT-2, bf16, attention auto (cuDNN)" "$BUNDLE/bin/gpt2_gpu_bench" "$@"
if [ "${GANTRY_BENCH_FUSED:-0}" = 1 ]; then  # (about 3x the default's step: 2.80x on an H200)
  run gantry_gpt2_fused "gantry GPT-2, bf16, gantry's fused attention kernel" "$BUNDLE/bin/gpt2_gpu_bench" --attention fused "$@"
fi
run gantry_gpt2_one_rounding "gantry GPT-2, bf16, biased 16-bit outputs rounded once (no bias epilogue)" "$BUNDLE/bin/gpt2_gpu_bench" --bias-epilogue off "$@"
run gantry_gpt2_gelu_epilogue "gantry GPT-2, bf16, cuBLASLt's GELU and bias-gradient epilogues" "$BUNDLE/bin/gpt2_gpu_bench" --gelu-epilogue on "$@"
if [ "${GANTRY_BENCH_FP32:-0}" = 1 ]; then
  run gantry_gpt2_fp32 "gantry GPT-2, fp32" "$BUNDLE/bin/gpt2_gpu_bench" --precision fp32 "$@"
fi
run torch_gpt2 "pytorch GPT-2" python3 bench/torch_gpt2.py gpu-bench --profile "$@"
run gantry_llama "gantry Llama, bf16, attention auto (cuDNN)" "$BUNDLE/bin/gpt2_gpu_bench" --arch llama "$@"
if [ "${GANTRY_BENCH_GQA_EXPAND:-0}" = 1 ]; then  # the key/value heads repeated around the attention, as before
  run gantry_llama_expand "gantry Llama, bf16, key/value heads repeated (no grouped cuDNN)" "$BUNDLE/bin/gpt2_gpu_bench" --arch llama --grouped-attention off "$@"
fi
run torch_llama "pytorch Llama (transformers)" python3 bench/torch_gpt2.py gpu-bench --arch llama --profile "$@"
echo "== summary"
python3 - "$OUT" <<'PY'
import json, os, re, sys
out = sys.argv[1]


def load(name):
    """(the JSON last line, the op table [(op, ms)]) of a run, or (None, []) where it failed."""
    try:
        lines = open(os.path.join(out, name + ".txt")).read().strip().splitlines()
        j = json.loads(lines[-1])
    except (OSError, IndexError, ValueError):
        return None, []
    ops, inside = [], False
    for line in lines[:-1]:  # between the 'op (profiled step)' header and the JSON line
        if line.startswith("op (profiled step)"):
            inside, ops = True, []
            continue
        m = re.match(r"^(.*\S)\s+(-?[\d.]+)\s+(-?[\d.]+)%$", line) if inside else None
        if m:
            ops.append((m.group(1), float(m.group(2))))
    return j, ops


def desc(r):
    return (f"{r['tokens_per_s']:.0f} tok/s (B {r['batch']}, MFU {100 * r['mfu']:.1f}%, "
            f"{r['memory_gb']:.1f} GB)")


def group(op):
    """A row of either table as a coarse group both share: gantry's 'matmul+gelu fwd' (GELU in the
    GEMM's epilogue) and 'classifier matmul' are matmuls, PyTorch's triton fusions elementwise."""
    n = op.lower()
    d = " fwd" if "fwd" in n else " bwd" if ("bwd" in n or "recompute" in n) else ""
    if n.startswith("optimizer"):
        return "optimizer"
    if "softmax" in n or "xent" in n:
        return "classifier softmax+xent"
    for g, keys in (("attention", ("attention",)), ("matmul", ("matmul",)), ("norm", ("norm",)),
                    ("encoder", ("encoder",)),
                    ("elementwise", ("gelu", "swiglu", "rope", "residual", "gqa", "triton", "cast"))):
        if any(k in n for k in keys):
            return g + d
    return "other" + d


def side_by_side(title, g_ops, t_ops):
    if not g_ops and not t_ops:
        return
    print(f"\n{title}: ms per step by op group (gantry: each op synchronised, so its sum exceeds the "
          f"step; pytorch: kernel time)")
    gs, ts = {}, {}
    for ops, acc in ((g_ops, gs), (t_ops, ts)):
        for op, ms in ops:
            acc[group(op)] = acc.get(group(op), 0.0) + ms
    print(f"{'group':<26} {'gantry ms':>10} {'pytorch ms':>11} {'gantry/pytorch':>15}")
    for k in sorted(set(gs) | set(ts), key=lambda k: -max(gs.get(k, 0), ts.get(k, 0))):
        g, t = gs.get(k), ts.get(k)
        ratio = f"{g / t:.2f}x" if g and t else "-"
        print(f"{k:<26} {'-' if g is None else f'{g:.2f}':>10} {'-' if t is None else f'{t:.2f}':>11} {ratio:>15}")
    g, t = sum(gs.values()), sum(ts.values())
    print(f"{'total':<26} {g:10.2f} {t:11.2f} {(f'{g / t:.2f}x' if t else '-'):>15}")
    print(f"  gantry's rows: " + ", ".join(f"{op} {ms:.2f}" for op, ms in g_ops))
    print(f"  pytorch's rows: " + ", ".join(f"{op} {ms:.2f}" for op, ms in t_ops))


for label, gname, tname in (("GPT-2", "gantry_gpt2", "torch_gpt2"), ("Llama", "gantry_llama", "torch_llama")):
    g, g_ops = load(gname)
    t, t_ops = load(tname)
    line = f"{label}: gantry " + (desc(g) if g else "FAILED") + " | pytorch " + (desc(t) if t else "FAILED")
    if g and t:
        line += f" | ratio {g['tokens_per_s'] / t['tokens_per_s']:.2f}x (target >= 1.0x, MFU >= 45%)"
    print(line)
    if g and t and t.get("device_used_gb"):
        print(f"{label} device memory in use (cudaMemGetInfo on both sides): gantry {g['memory_gb']:.1f} GB, "
              f"pytorch {t['device_used_gb']:.1f} GB (its allocator's peak {t['memory_gb']:.1f} GB allocated, "
              f"{t['memory_reserved_gb']:.1f} reserved): {g['memory_gb'] / t['device_used_gb']:.2f}x (target <= 1.0x)")
    side_by_side(label, g_ops, t_ops)
    print()
c, _ = load("gantry_gpt2")
f, _ = load("gantry_gpt2_fused")
if c and f:
    print(f"GPT-2 attention: auto (cuDNN) {c['tokens_per_s']:.0f} tok/s at B {c['batch']} against gantry's fused "
          f"kernel's {f['tokens_per_s']:.0f} tok/s at B {f['batch']}: {c['tokens_per_s'] / f['tokens_per_s']:.2f}x")
e, _ = load("gantry_gpt2_one_rounding")
t, _ = load("torch_gpt2")
if c and e:
    print(f"GPT-2 rounding once (--bias-epilogue off: an fp32 scratch, no bias epilogue): {e['tokens_per_s']:.0f} "
          f"tok/s, {e['tokens_per_s'] / c['tokens_per_s']:.2f}x the default"
          + (f", {e['tokens_per_s'] / t['tokens_per_s']:.2f}x pytorch" if t else "")
          + f"; first loss {e.get('first_loss', float('nan')):.6f} against the default's "
          f"{c.get('first_loss', float('nan')):.6f}")
ge, _ = load("gantry_gpt2_gelu_epilogue")
if c and ge:
    print(f"GPT-2 with cuBLASLt's GELU and bias-gradient epilogues (--gelu-epilogue on): {ge['tokens_per_s']:.0f} tok/s, "
          f"{ge['tokens_per_s'] / c['tokens_per_s']:.2f}x the default; first loss {ge.get('first_loss', float('nan')):.6f} "
          f"against the default's {c.get('first_loss', float('nan')):.6f}"
          + (f", {ge['tokens_per_s'] / t['tokens_per_s']:.2f}x pytorch" if t else ""))
f32, _ = load("gantry_gpt2_fp32")
if c and f32:
    print(f"GPT-2 bf16 {c['tokens_per_s']:.0f} tok/s at B {c['batch']} against fp32's {f32['tokens_per_s']:.0f} tok/s "
          f"at B {f32['batch']}: {c['tokens_per_s'] / f32['tokens_per_s']:.2f}x")
print("memory: gantry's is the device's in use (cudaMemGetInfo, the context included); pytorch's in its "
      "line its allocator's peak allocated, and in use on the device beside gantry's")
PY
[ "$failed" -eq 0 ] || { echo "$failed run(s) failed"; exit 1; }
