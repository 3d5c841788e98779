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

# The speed half (issue 39, item 3): --cluster ranks every layout that fits by predicted
# tokens/s, --layout evaluates one, -o json for tools.
LLAMA70="--arch llama --n-layer 80 --d-model 8192 --heads 64 --kv-heads 8 --ffn-hidden 28672 --vocab 128256 --seq-len 4096 --precision bf16"
has() { grep -q -- "$1" <<<"$out"; }
out="$("$GANTRY" plan $LLAMA70 --cluster dgx-h100 --gpus 64 --global-batch 512 2>&1)"; rc=$?
echo "$out" | head -4
ranked_five() { [ $rc -eq 0 ] && has 'cluster dgx-h100: 64 x h100' && has 'MFU' && [ "$(grep -c '^[1-5] .*tp .*ZeRO' <<<"$out")" -eq 5 ]; }
check "--cluster ranks five layouts, each with its step, tokens/s/GPU, MFU and memory" ranked_five
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
"$GANTRY" -o json plan $LLAMA70 --cluster dgx-h100 --gpus 64 --global-batch 512 --top 8 >"$TMP/rank.json"
check "-o json: layouts in order of tokens/s, each fitting 90% of 80 GB, its split adding up to its step" python3 - "$TMP/rank.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ls = d["layouts"]
assert d["gpus"] == 64 and len(ls) == 8, ls
assert all(a["tokens_per_s"] >= b["tokens_per_s"] for a, b in zip(ls, ls[1:]))
for l in ls:
    assert l["fits"] and l["memory_bytes"] <= 0.9 * 80e9, l
    assert l["tp"] * l["pp"] * l["dp"] == 64 and l["micro_batch"] * l["microbatches"] * l["dp"] == 512, l
    parts = l["compute_s"] + l["exposed_comm_s"] + l["bubble_s"] + l["optimizer_s"]
    assert abs(parts - l["step_s"]) <= 1e-4 * l["step_s"], l
    assert abs(l["tokens_per_s"] - 512 * 4096 / l["step_s"]) <= 1e-4 * l["tokens_per_s"], l
PY
out="$("$GANTRY" plan $LLAMA70 --cluster dgx-h100 --gpus 64 --global-batch 512 --layout tp=8,pp=8,zero=1,mb=1,recompute=full 2>&1)"; rc=$?
check "--layout evaluates the one named (tp 8 pp 8 dp 1, 512 micro-batches)" bash -c \
  "[ $rc -eq 0 ] && [ \$(grep -c '^1 .*tp 8 pp 8 dp 1, ZeRO 1, mb 1 x 512, recompute full' <<<'$out') -eq 1 ]"
out="$("$GANTRY" plan $LLAMA70 --cluster dgx-h100 --gpus 64 --global-batch 512 --layout tp=8,pp=16 2>&1)"; rc=$?
check "--layout whose degrees are not --gpus is refused (exit 2)" bash -c "[ $rc -eq 2 ] && grep -q 'is not --gpus 64' <<<'$out'"
out="$("$GANTRY" plan --params 7e9 --cluster dgx-h100 --gpus 8 --global-batch 64 2>&1)"; rc=$?
refused() { [ $rc -eq 2 ] && has "$1"; }
check "--cluster without a shape is refused (exit 2)" refused 'needs the model'
# Item 6: the layout chosen by memory alone (tp 2 x dp 32, ZeRO 3: each micro-batch gathers and
# reduces the model over data parallelism) is not the fastest on a network of one 100 Gb/s
# port per node.
cat >"$TMP/slow.yaml" <<'YAML'
name: h100-slow-network
gpus_per_node: 8
gpu: h100
intra_node: {bandwidth_gbs: 360, latency_us: 3}
inter_node: {bandwidth_gbs: 1.5625, latency_us: 10}
YAML
out="$("$GANTRY" plan $LLAMA70 --gpus 64 --gpu-memory 80 --global-batch 512 2>&1)"
check "by memory alone: tp 2 x dp 32, ZeRO 3" bash -c "grep -A1 '^recommended' <<<'$out' | grep -q 'tp 2 x pp 1 x dp 32, ZeRO 3'"
out="$("$GANTRY" plan $LLAMA70 --cluster "$TMP/slow.yaml" --gpus 64 --global-batch 512 2>&1)"; rc=$?
echo "$out" | sed -n 3p
check "by speed on a slow network: another layout first" bash -c \
  "[ $rc -eq 0 ] && grep -q '^1 ' <<<'$out' && ! grep -q '^1 .*tp 2 pp 1 dp 32, ZeRO 3' <<<'$out'"
[ $fail -eq 0 ] && echo "plan_test: passed"
exit $fail
