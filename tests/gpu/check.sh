#!/usr/bin/env bash
# The one device call (issue 36's "GPU time"): the GPU suite, the per-op micro-benchmarks, the
# step benchmark beside PyTorch (bench/gpu/run.sh), then the whole cluster on the GPU
# (tests/gpu/cluster.sh run cuda), each logged under $OUT (the device tool brings it back), and
# a summary last. Here: bash tests/gpu/run.sh bundle; carry .bundle.txz; there, from the
# repository root: bash tests/gpu/check.sh [--steps N] (N is passed to the benchmark).
# GANTRY_GPU_SKIP_SUITE=1 runs the benchmark alone (a rerun after a speed change), as does
# GANTRY_GPU_SKIP_CLUSTER=1 for the cluster job.
set -uo pipefail
cd "$(dirname "$0")/../.."
source tests/gpu/env.sh
OUT=${OUT:-/tmp/gantry-gpu-check}
mkdir -p "$OUT"
t0=$(date +%s)
suite=skipped
if [ "${GANTRY_GPU_SKIP_SUITE:-0}" != 1 ]; then
  GANTRY_GPU_TEST_TIMEOUT=${GANTRY_GPU_TEST_TIMEOUT:-200} bash tests/gpu/run.sh run >"$OUT/suite.log" 2>&1
  suite=$?
  grep -E "^== |FAILED|passed, .* failed|Failure|error" "$OUT/suite.log" | head -60
fi
# The per-op micro-benchmarks (bench/kernels/ops_bench.cc) at GPT-2's sizes.
gpu_bundle_unpack .bundle
(gpu_bundle_env "$PWD/.bundle/lib" && timeout 120 .bundle/bin/ops_bench) >"$OUT/ops.log" 2>&1
ops=$?
echo "== ops_bench ($ops)"
cat "$OUT/ops.log"
t1=$(date +%s)
bash bench/gpu/run.sh "$@" >"$OUT/bench.log" 2>&1
bench=$?
t2=$(date +%s)
# (each run's output is in bench.log: the device tool brings back 8 files at most)
echo "== benchmark (tail)"
tail -n 70 "$OUT/bench.log"
cluster=skipped
if [ "${GANTRY_GPU_SKIP_CLUSTER:-0}" != 1 ]; then
  GANTRY_GPU_CLUSTER_TIMEOUT=${GANTRY_GPU_CLUSTER_TIMEOUT:-150} bash tests/gpu/cluster.sh run cuda >"$OUT/cluster.log" 2>&1
  cluster=$?
  echo "== cluster job ($cluster)"
  grep -E "^(PASS|FAIL|---|[0-9]+ passed)|SUCCEEDED|FAILED|step +[0-9]+/" "$OUT/cluster.log" | head -30
fi
t3=$(date +%s)
echo "== summary: suite $suite, ops_bench $ops ($((t1 - t0)) s), benchmark $bench ($((t2 - t1)) s), cluster job $cluster ($((t3 - t2)) s)"
{ [ "$suite" = 0 ] || [ "$suite" = skipped ]; } && [ "$bench" = 0 ] && { [ "$cluster" = 0 ] || [ "$cluster" = skipped ]; }
