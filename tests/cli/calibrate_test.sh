#!/usr/bin/env bash
# gantry-train calibrate writes this machine as a cluster file that gantry plan reads (issue 39,
# item 2): every rate positive, the compute that concurrent communication costs measured (0 or
# more), and a layout of two ranks ranked from it. Small shapes and one repeat: a few seconds.
set -uo pipefail
TRAIN="$1"; GANTRY="$2"
fail=0
check() { local n="$1"; shift; if "$@"; then echo "ok   $n"; else echo "FAIL $n"; fail=1; fi; }
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
out="$("$TRAIN" calibrate --threads 1 --ranks 2 --n-embd 64 --heads 2 --seq-len 32 --rows 64 --repeats 1 \
  --out "$TMP/local.yaml" 2>&1)"; rc=$?
echo "$out"
check "calibrate exits 0 and says what it wrote" bash -c "[ $rc -eq 0 ] && grep -q '^wrote ' <<<'$out'"
field() { sed -n "s/^ *$1: *//p" "$TMP/local.yaml" | head -1; }
positive() { awk -v v="$(field "$1")" 'BEGIN { exit !(v + 0 > 0) }'; }
for f in memory_gbs host_link_gbs peak_tflops; do check "$f is measured (> 0)" positive "$f"; done
cost="$(field comm_compute_cost)"
check "comm_compute_cost is measured (a number >= 0): '$cost'" awk -v v="$cost" 'BEGIN { exit !(v ~ /^[0-9.e+-]+$/ && v + 0 >= 0) }'
out="$("$GANTRY" plan --n-layer 2 --d-model 64 --heads 2 --vocab 128 --seq-len 32 --precision fp32 \
  --cluster "$TMP/local.yaml" --gpus 2 --global-batch 8 2>&1)"; rc=$?
echo "$out" | head -3
check "gantry plan ranks layouts on the calibrated cluster" bash -c "[ $rc -eq 0 ] && grep -q '^1 .*ZeRO' <<<'$out'"
sed -i "s/^\( *comm_compute_cost:\).*/\1 -0.5/" "$TMP/local.yaml"
out="$("$GANTRY" plan --n-layer 2 --d-model 64 --heads 2 --vocab 128 --seq-len 32 --precision fp32 \
  --cluster "$TMP/local.yaml" --gpus 2 --global-batch 8 2>&1)"; rc=$?
check "a negative comm_compute_cost is refused by name" bash -c "[ $rc -ne 0 ] && grep -q 'comm_compute_cost' <<<'$out'"
[ $fail -eq 0 ] && echo "calibrate_test: passed"
exit $fail
