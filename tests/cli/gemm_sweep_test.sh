#!/usr/bin/env bash
# gantry-train calibrate --gemm-sweep (issue 48, item 5) on cuda-emulated: the sweep's whole path
# (backend, timing, progress, the profile written) runs through the emulated cuBLAS stand-in.
# The emulated times mean nothing (a CPU GEMM behind the emulator): what is checked is that the
# path runs, that every shape of the grid is measured and reported, and that the profile it writes
# parses where gantry plan reads profiles and changes the plan's step. Tiny shapes: about a second.
set -uo pipefail
TRAIN="$1"; GANTRY="$2"
fail=0
check() { local n="$1"; shift; if "$@"; then echo "ok   $n"; else echo "FAIL $n"; fail=1; fi; }
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
"$TRAIN" calibrate --gemm-sweep --device cuda-emulated --base h100 --sizes 16,32 --fp32-sizes 16 --repeats 1 \
  --out "$TMP/gemm_profile.yaml" >"$TMP/out" 2>"$TMP/err"; rc=$?
cat "$TMP/out" "$TMP/err"
check "the sweep exits 0 and says what it wrote" bash -c "[ $rc -eq 0 ] && grep -q '^wrote .*gemm_profile.yaml: profile h100-sweep, 9 GEMM shapes' '$TMP/out'"
check "progress: a line for each of the 8 bf16 and 1 fp32 shapes, numbered to 9" \
  bash -c "[ \$(grep -c '^gemm sweep \[[0-9]/9\] \(bf16\|fp32\) m [0-9]* n [0-9]* k [0-9]*: forward .* TFLOP/s' '$TMP/err') -eq 9 ] && grep -q '^gemm sweep \[9/9\] fp32 m 16 n 16 k 16' '$TMP/err'"
check "the profile holds 8 bf16 and 1 fp32 entries" \
  bash -c "[ \$(grep -c '{precision: bf16, m: ' '$TMP/gemm_profile.yaml') -eq 8 ] && [ \$(grep -c '{precision: fp32, m: 16, n: 16, k: 16' '$TMP/gemm_profile.yaml') -eq 1 ]"
# gantry plan reads it (jobspec ParseProfile through a cluster file's profile:), and its step is
# the swept profile's (the emulator's GEMMs are some 1e5 times slower than the h100 base's).
cat >"$TMP/cluster.yaml" <<YAML
name: one-swept
gpus_per_node: 1
profile: gemm_profile.yaml
intra_node: {bandwidth_gbs: 100, latency_us: 3}
inter_node: {bandwidth_gbs: 10, latency_us: 6}
YAML
PLAN="plan --n-layer 2 --d-model 64 --heads 2 --vocab 128 --seq-len 32 --precision bf16 --gpus 1 --global-batch 8 --layout tp=1,mb=8"
step() { "$GANTRY" -o json $PLAN --cluster "$1" | python3 -c 'import json, sys; print(json.load(sys.stdin)["layouts"][0]["step_s"])'; }
swept="$(step "$TMP/cluster.yaml")"; rc=$?
echo "step: swept profile $swept s, dgx-h100 $(step dgx-h100) s"
check "gantry plan reads the swept profile" bash -c "[ $rc -eq 0 ] && [ -n '$swept' ]"
check "and its step is the swept GEMMs' (longer than on the h100 base)" \
  python3 -c "import sys; sys.exit(not float('$swept') > 10 * float('$(step dgx-h100)'))"
# Refusals, each naming what is wrong.
out="$("$TRAIN" calibrate --gemm-sweep --device cuda-emulated --sizes 16 --fp32-sizes none --repeats 1 2>&1)"; rc=$?
check "no --base and a device no built-in profile names: refused, naming --base" \
  bash -c "[ $rc -eq 2 ] && grep -q -- '--base' <<<'$out' && grep -q 'cuda-emulated' <<<'$out'"
out="$("$TRAIN" calibrate --gemm-sweep --device cuda-emulated --base h100 --sizes 16,x 2>&1)"; rc=$?
check "a size that is not a number: refused, naming --sizes" bash -c "[ $rc -eq 2 ] && grep -q -- '--sizes' <<<'$out'"
out="$("$TRAIN" calibrate --gemm-sweep --device cuda-emulated --base h100 --sizes 16,16 2>&1)"; rc=$?
check "a size given twice: refused" bash -c "[ $rc -eq 2 ] && grep -q 'twice' <<<'$out'"
out="$("$TRAIN" calibrate --gemm-sweep --device cuda-emulated --base nosuch.yaml 2>&1)"; rc=$?
check "an unknown --base: refused, naming it" bash -c "[ $rc -eq 2 ] && grep -q 'nosuch.yaml' <<<'$out'"
out="$("$TRAIN" calibrate --gemm-sweep --threads 2 2>&1)"; rc=$?
check "a CPU calibration flag with --gemm-sweep: refused, naming it" bash -c "[ $rc -eq 2 ] && grep -q -- '--threads' <<<'$out'"
out="$("$TRAIN" calibrate --device cuda-emulated 2>&1)"; rc=$?
check "--device without --gemm-sweep: refused, naming it" bash -c "[ $rc -eq 2 ] && grep -q -- '--gemm-sweep' <<<'$out'"
[ $fail -eq 0 ] && echo "gemm_sweep_test: passed"
exit $fail
