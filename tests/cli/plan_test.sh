#!/usr/bin/env bash
# gantry plan as a user types it: --params and shape flags never mix (issue 39 item 6: with
# --params 70e9 --arch llama the defaults of the shape flags won, and a 70B model was planned
# as 124M); --params alone, and a whole shape, each plan.
set -uo pipefail
GANTRY="$1"
fail=0
check() { local n="$1"; shift; if "$@"; then echo "ok   $n"; else echo "FAIL $n"; fail=1; fi; }
out="$("$GANTRY" plan --params 70e9 --arch llama --gpus 64 --gpu-memory 80 --global-batch 512 --seq-len 4096 \
  --precision bf16 2>&1)"; rc=$?
echo "$out" | head -3
check "--params with --arch is refused (exit 2), naming both" \
  bash -c "[ $rc -eq 2 ] && grep -q -- '--params' <<<'$out' && grep -q -- '--arch' <<<'$out'"
check "and no plan of another model is printed" bash -c "! grep -q 'd_model 768' <<<'$out'"
out="$("$GANTRY" plan --params 70e9 --gpus 64 --gpu-memory 80 --global-batch 512 --seq-len 4096 --precision bf16 2>&1)"
check "--params alone plans 7e+10 parameters" bash -c "grep -q '7e+10 parameters' <<<'$out'"
out="$("$GANTRY" plan --arch llama --n-layer 80 --d-model 8192 --heads 64 --kv-heads 8 --ffn-hidden 28672 \
  --vocab 128256 --seq-len 4096 --precision bf16 2>&1)"
check "a whole Llama 3 70B shape plans its 7.055e+10 parameters" bash -c "grep -q 'llama, 80 layers, d_model 8192' <<<'$out' && grep -q '7.055e+10 parameters' <<<'$out'"
[ $fail -eq 0 ] && echo "plan_test: passed"
exit $fail
