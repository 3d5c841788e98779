#!/usr/bin/env bash
# The planner's GPU figures (issue 48, item 5): this GPU's GEMM rate per shape, measured through
# Gantry's own cuda backend GEMMs (gantry-train calibrate --gemm-sweep: bf16 m, n, k each over
# 768..16384, fp32 over 768..6144; the rest of the profile from the built-in profile the GPU's name
# names), then the single-GPU GPT-2 124M step gantry plan predicts with it (T 1024, B 64, bf16,
# bench/gpu/run.sh's run) beside the built-in profile's prediction and, where bench/gpu/run.sh has
# run in this call, the measured step.
# On the GPU host, from the repository root with .bundle/ (or .bundle.txz) carried (tests/gpu/run.sh
# bundle makes it here): bash bench/gpu/gemm_sweep.sh. Writes $OUT/gemm_profile.yaml (after each
# precision's grid, so a sweep cut short keeps the bf16 table) and $OUT/gemm_sweep.log (every
# shape's rates, the predictions). The sweep is given GANTRY_GEMM_SWEEP_TIMEOUT seconds (50); the
# whole script about a minute. GANTRY_GEMM_SWEEP_ARGS: more calibrate flags (--sizes,
# --fp32-sizes, --repeats, --base); GANTRY_GEMM_SWEEP_DEVICE (cuda): cuda-emulated runs the script
# here with a bundle of this build's binaries (the times then mean nothing).
set -uo pipefail
cd "$(dirname "$0")/../.."
source tests/gpu/env.sh
OUT=${OUT:-/tmp/gantry-gemm-sweep}
mkdir -p "$OUT"
gpu_bundle_unpack .bundle
gpu_bundle_env "$PWD/.bundle/lib"
TRAIN=.bundle/build/cli/gantry-train GANTRY=.bundle/build/cli/gantry
PROFILE="$OUT/gemm_profile.yaml" LOG="$OUT/gemm_sweep.log"
rm -f "$PROFILE"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader 2>&1 | tee "$LOG" || true
t0=$(date +%s)
# shellcheck disable=SC2086
timeout "${GANTRY_GEMM_SWEEP_TIMEOUT:-50}" "$TRAIN" calibrate --gemm-sweep --device "${GANTRY_GEMM_SWEEP_DEVICE:-cuda}" ${GANTRY_GEMM_SWEEP_ARGS:-} \
  --out "$PROFILE" >>"$LOG" 2>&1
sweep=$?
echo "== gemm sweep: exit $sweep in $(($(date +%s) - t0)) s (each shape in $LOG)"
grep -m1 '^gemm sweep on ' "$LOG"
grep -E '^gemm sweep \[' "$LOG" | awk 'NR % 24 == 1' | head -12   # a sample of the shapes
grep -E '^wrote |gantry-train:' "$LOG"
if [ ! -s "$PROFILE" ]; then
  echo "== no profile written"
  exit 1
fi
# The prediction: one GPU, GPT-2 124M, T 1024, B 64, bf16 (docs/perf.md's cost model section).
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
cat >"$TMP/cluster.yaml" <<YAML
name: one-gpu-swept
gpus_per_node: 1
profile: $(cd "$(dirname "$PROFILE")" && pwd)/$(basename "$PROFILE")
intra_node: {bandwidth_gbs: 360, latency_us: 3}
inter_node: {bandwidth_gbs: 40, latency_us: 6}
YAML
base=$(sed -n 's/^name: *\(.*\)-sweep$/\1/p' "$PROFILE")
PLAN="plan --preset gpt2 --precision bf16 --gpus 1 --global-batch 64 --layout tp=1,mb=64"
step_ms() { "$GANTRY" -o json $PLAN --cluster "$1" | python3 -c 'import json, sys; print("%.1f" % (1e3 * json.load(sys.stdin)["layouts"][0]["step_s"]))'; }
swept=$(step_ms "$TMP/cluster.yaml") || swept=failed
builtin=failed
[ -n "$base" ] && builtin=$(step_ms "dgx-$base") || true
# bench/gpu/run.sh's gantry GPT-2 run on this machine (it clears /tmp/gantry_bench as it starts).
BENCH=/tmp/gantry_bench/gantry_gpt2.txt
measured=$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["step_ms"])' \
  "$BENCH" 2>/dev/null) && measured="$measured ms ($BENCH, $(date -r "$BENCH" -u +%H:%M:%SZ))" ||
  measured="not measured on this machine (bench/gpu/run.sh writes $BENCH)"
measured_ms=${measured%% ms*}
{
  echo "== GPT-2 124M, one GPU, T 1024, B 64, bf16 (gantry $PLAN)"
  echo "predicted with the swept profile ($PROFILE): $swept ms"
  echo "predicted with the built-in ${base:-?} profile: $builtin ms"
  echo "measured (gpt2_gpu_bench): $measured"
  python3 - "$swept" "$measured_ms" <<'PY'
import sys
try:
    p, m = float(sys.argv[1]), float(sys.argv[2])
    print("swept prediction / measured: %.3f (%+.1f%%; issue 48 asks within 10%%)" % (p / m, 100 * (p / m - 1)))
except ValueError:
    pass
PY
} | tee -a "$LOG"
[ "$sweep" -eq 0 ] && [ "$swept" != failed ]
