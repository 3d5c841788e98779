#!/usr/bin/env bash
# GPT-2 124M, and a Llama of its depth and width (12 x 768, 12 query heads over 4 KV heads,
# FFN 2048, vocab 32000), on one GPU: gantry's device model against PyTorch (torch.compile,
# bf16 autocast, SDPA, fused AdamW; transformers' LlamaForCausalLM for the Llama) in the same
# run, each at the largest micro-batch that fits, the ratios, and the time per op side by side.
#
# On the GPU host, from the repository root with .bundle/ or .bundle.txz carried (tests/gpu/run.sh
# bundle builds them here):
#   bash bench/gpu/run.sh [--only gpt2|llama] [--candidates] [ARGS...]
# ARGS go to every run (both sides take --steps N, --warmup N, --batch B). tests/gpu/check.sh
# runs it as its first two parts (--only gpt2, then --only llama, with --steps 8).
#
# In order, for GPT-2 and then the Llama: gantry (attention auto: cuDNN where it loads; cuBLASLt's
# bias epilogue), then PyTorch (--profile), then at once the pair's lines: tokens/s, the ratio,
# device memory on both sides, the per-op groups side by side.
#
# --candidates (or GANTRY_BENCH_CANDIDATES=1): after each pair, the same model once more with each
# candidate on (the pair's gantry run is the candidate off), and a line for each against the default
# and against PyTorch. The candidates, in CANDIDATES below: one_rounding (--bias-epilogue off),
# gelu_epilogue (--gelu-epilogue on), nondeterministic (--deterministic-attention off),
# gemm_autotune (--gemm-autotune on), classifier_rows (--classifier-rows 8192), fused_grad_casts
# (--fused-grad-casts on; fused_grad_casts_llama the Llama's), gqa_expand (the Llama,
# --grouped-attention off), and by name
# only, not in the default set, fused (--attention fused, about 2.8x the step) and fp32 (--precision
# fp32). GANTRY_BENCH_CANDIDATES="one_rounding fp32" runs those named. GANTRY_BENCH_FUSED=1,
# GANTRY_BENCH_FP32=1 and GANTRY_BENCH_GQA_EXPAND=1 add theirs, as before. A new candidate is a
# line in CANDIDATES: a gpt2_gpu_bench flag, off by default until the GPU has measured it.
#
# Limits: each gantry run GANTRY_BENCH_GANTRY_TIMEOUT seconds (20 by default), each PyTorch run
# GANTRY_BENCH_TORCH_TIMEOUT (85). A run over its limit is stopped (timeout's exit 124, 137 if it
# had to be killed), reported TIMED OUT, and the next run goes on; one that fails is reported FAILED.
# Either is left out of the lines that need it. Exit: 0 if every run passed, 1 if any failed,
# else 124 if any timed out.
#
# Expected time (estimates from docs/perf.md's GPU entries; tests/gpu/check.sh's header says how):
# a gantry run about 10 s: its start, cuDNN's plans, and warmup 3 + 8 + 1 profiled steps of 0.14 s
# at B 64 (the candidate fused 0.38 s a step on the H200; fp32 1.3 s on the H100 before cuDNN, so
# give it GANTRY_BENCH_GANTRY_TIMEOUT=40). A PyTorch run 40-60 s, nearly all of it torch.compile's
# compile, inside the first of its warmup + 2 untimed steps: --steps N sets only the timed steps
# (8 are about 1 s), so it hardly changes a run's time. --candidates adds a gantry run per
# candidate. Each run's seconds go into the summary.
#
# Where the results go: each run's stdout in $GANTRY_BENCH_DIR/NAME.txt (/tmp/gantry_bench; the
# JSON last line is what the lines read), everything on stdout, and, as each run and each pair
# ends, its status, seconds, JSON line and the pair's lines appended to $GANTRY_BENCH_SUMMARY
# (check.sh: $OUT/summary.txt; by default $OUT/bench_summary.txt where $OUT is set), so a call cut
# short keeps what it measured.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUNDLE=.bundle
source tests/gpu/env.sh

ONLY="gpt2 llama"
WANT_CANDIDATES=0
while [ $# -gt 0 ]; do
  case "$1" in
    --only)
      case "${2:-}" in gpt2|llama) ONLY=$2 ;; *) echo "bench/gpu/run.sh: --only gpt2|llama" >&2; exit 2 ;; esac
      shift 2 ;;
    --candidates) WANT_CANDIDATES=1; shift ;;
    *) break ;;  # the rest go to every run
  esac
done

# NAME|ARCH|FLAGS|WHAT: the gpt2_gpu_bench flags that turn a candidate on (the default is off).
CANDIDATES="one_rounding|gpt2|--bias-epilogue off|biased 16-bit outputs rounded once (no bias epilogue)
gelu_epilogue|gpt2|--gelu-epilogue on|cuBLASLt's GELU and bias-gradient epilogues
gqa_expand|llama|--grouped-attention off|key/value heads repeated around the attention (no grouped cuDNN)
nondeterministic|gpt2|--deterministic-attention off|cuDNN's non-deterministic attention backward (train.deterministic false)
gemm_autotune|gpt2|--gemm-autotune on|each GEMM shape's cuBLASLt algorithm timed among the heuristic's first four
classifier_rows|gpt2|--classifier-rows 8192|the classifier and its loss 8192 rows at a time (train.classifier_rows: no whole logits)
fused_grad_casts|gpt2|--fused-grad-casts on|the backward's 16-bit casts in the GEMMs and the norms' backward (no rounding or converting passes)
fused_grad_casts_llama|llama|--fused-grad-casts on|the same for the Llama (RMSNorm's backward)
fused|gpt2|--attention fused|gantry's fused attention kernels (fp32 FMAs)
fp32|gpt2|--precision fp32|fp32"
DEFAULT_CANDIDATES="one_rounding gelu_epilogue nondeterministic gemm_autotune classifier_rows fused_grad_casts gqa_expand fused_grad_casts_llama"
chosen=""
case "${GANTRY_BENCH_CANDIDATES:-}" in
  "" | 0) ;;
  1 | all | default) WANT_CANDIDATES=1 ;;
  *) chosen=${GANTRY_BENCH_CANDIDATES//,/ } ;;
esac
[ "$WANT_CANDIDATES" = 1 ] && [ -z "$chosen" ] && chosen=$DEFAULT_CANDIDATES
[ "${GANTRY_BENCH_FUSED:-0}" = 1 ] && chosen="$chosen fused"
[ "${GANTRY_BENCH_FP32:-0}" = 1 ] && chosen="$chosen fp32"
[ "${GANTRY_BENCH_GQA_EXPAND:-0}" = 1 ] && chosen="$chosen gqa_expand"
chosen=$(tr ' ' '\n' <<<"$chosen" | awk 'NF && !seen[$0]++' | tr '\n' ' ')  # each once, in order
for c in $chosen; do
  grep -q "^$c|" <<<"$CANDIDATES" || { echo "bench/gpu/run.sh: no candidate '$c' (known: $(cut -d'|' -f1 <<<"$CANDIDATES" | tr '\n' ' '))" >&2; exit 2; }
done

GANTRY_LIMIT=${GANTRY_BENCH_GANTRY_TIMEOUT:-20}
TORCH_LIMIT=${GANTRY_BENCH_TORCH_TIMEOUT:-85}
DIR=${GANTRY_BENCH_DIR:-/tmp/gantry_bench}
SUMMARY=${GANTRY_BENCH_SUMMARY:-${OUT:+$OUT/bench_summary.txt}}
mkdir -p "$DIR"
[ -z "$SUMMARY" ] || touch "$SUMMARY"
note() {  # a line on stdout and in the summary file
  echo "$*"
  [ -z "$SUMMARY" ] || echo "$*" >>"$SUMMARY"
}

gpu_bundle_unpack "$BUNDLE"
gpu_bundle_env "$PWD/$BUNDLE/lib"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
export PYTHONUNBUFFERED=1

# run NAME LIMIT TITLE COMMAND...: COMMAND within LIMIT seconds, its output on stdout and its
# stdout in $DIR/NAME.txt too (the JSON last line); a failure or a timeout is noted, and the run
# left out of the lines (its file renamed NAME.failed).
failed=""
timed_out=""
run() {
  local name=$1 limit=$2 title=$3 rc=0 t0 secs
  shift 3
  rm -f "$DIR/$name.txt" "$DIR/$name.failed"
  echo "== $title (limit $limit s)"
  t0=$(date +%s)
  timeout -k 5 "$limit" "$@" | tee "$DIR/$name.txt" || rc=$?
  secs=$(($(date +%s) - t0))
  if [ "$rc" -eq 0 ]; then
    note "run $name: ok, $secs s (limit $limit s)"
    note "  $(tail -n 1 "$DIR/$name.txt")"
  else
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      note "run $name: TIMED OUT (exit $rc) after $secs s (limit $limit s)"
      timed_out="$timed_out $name"
    else
      note "run $name: FAILED (exit $rc) after $secs s"
      failed="$failed $name"
    fi
    mv "$DIR/$name.txt" "$DIR/$name.failed"
  fi
}

# summarise pair LABEL GANTRY TORCH | summarise candidate LABEL CANDIDATE RUN DEFAULT TORCH FLAGS: the lines
# from the runs' JSON; the short ones go to the summary file too.
summarise() {
  python3 - "$DIR" "$SUMMARY" "$@" <<'PY' || echo "(the summary failed: the runs' output is above)"
import json, os, re, sys
out, summary, kind, label = sys.argv[1:5]


def note(line):
    print(line)
    if summary:
        with open(summary, "a") as f:
            f.write(line + "\n")


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


if kind == "pair":
    gname, tname = sys.argv[5:7]
    g, g_ops = load(gname)
    t, t_ops = load(tname)
    none = "no result (failed or timed out: above)"
    line = f"{label}: gantry " + (desc(g) if g else none) + " | pytorch " + (desc(t) if t else none)
    if g and t:
        line += f" | ratio {g['tokens_per_s'] / t['tokens_per_s']:.2f}x (target >= 1.0x, MFU >= 40%)"
    note(line)
    if g and t and t.get("device_used_gb"):
        note(f"{label} device memory in use (cudaMemGetInfo on both sides): gantry {g['memory_gb']:.1f} GB, "
             f"pytorch {t['device_used_gb']:.1f} GB (its allocator's peak {t['memory_gb']:.1f} GB allocated, "
             f"{t['memory_reserved_gb']:.1f} reserved): {g['memory_gb'] / t['device_used_gb']:.2f}x (target <= 1.0x)")
    side_by_side(label, g_ops, t_ops)
    print("memory: gantry's is the device's in use (cudaMemGetInfo, the context included); pytorch's in its "
          "line its allocator's peak allocated, and in use on the device beside gantry's\n")
else:  # candidate
    cname, name, dname, tname, flags = sys.argv[5:10]
    c, _ = load(name)
    d, _ = load(dname)
    t, _ = load(tname)
    if not c:
        note(f"{label} candidate {cname} ({flags}): no result (failed or timed out: above)")
    else:
        line = f"{label} candidate {cname} ({flags}): {desc(c)}"
        if d:
            line += (f", {c['tokens_per_s'] / d['tokens_per_s']:.2f}x the default's {d['tokens_per_s']:.0f} tok/s "
                     f"at B {d['batch']}")
        if t:
            line += f", {c['tokens_per_s'] / t['tokens_per_s']:.2f}x pytorch"
        if d and "first_loss" in c and "first_loss" in d:
            line += f"; first loss {c['first_loss']:.6f} against the default's {d['first_loss']:.6f}"
        note(line)
PY
}

label_of() { case "$1" in gpt2) echo GPT-2 ;; llama) echo Llama ;; esac; }
for arch in $ONLY; do
  label=$(label_of "$arch")
  arch_flags=()
  torch_flags=()
  if [ "$arch" = llama ]; then arch_flags=(--arch llama); torch_flags=(--arch llama); fi
  run "gantry_$arch" "$GANTRY_LIMIT" "gantry $label, bf16, attention auto (cuDNN)" \
    "$BUNDLE/bin/gpt2_gpu_bench" "${arch_flags[@]}" "$@"
  run "torch_$arch" "$TORCH_LIMIT" "pytorch $label (torch.compile)" \
    python3 bench/torch_gpt2.py gpu-bench "${torch_flags[@]}" --profile "$@"
  echo "== $label: gantry against pytorch"
  summarise pair "$label" "gantry_$arch" "torch_$arch"
  for c in $chosen; do
    IFS='|' read -r cname carch cflags cwhat < <(grep "^$c|" <<<"$CANDIDATES")
    [ "$carch" = "$arch" ] || continue
    read -r -a cargs <<<"$cflags"
    run "gantry_${arch}_$cname" "$GANTRY_LIMIT" "gantry $label, candidate $cname: $cwhat ($cflags)" \
      "$BUNDLE/bin/gpt2_gpu_bench" "${arch_flags[@]}" "${cargs[@]}" "$@"
    summarise candidate "$label" "$cname" "gantry_${arch}_$cname" "gantry_$arch" "torch_$arch" "$cflags"
  done
done
if [ -n "$failed$timed_out" ]; then
  note "bench: failed:${failed:- none}; timed out:${timed_out:- none}"
  [ -z "$failed" ] || exit 1
  exit 124
fi
