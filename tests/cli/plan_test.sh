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
    assert l["tp"] * l["cp"] * l["pp"] * l["dp"] == 64 and l["micro_batch"] * l["microbatches"] * l["dp"] == 512, l
    parts = l["compute_s"] + l["exposed_comm_s"] + l["bubble_s"] + l["optimizer_s"]
    assert abs(parts - l["step_s"]) <= 1e-4 * l["step_s"], l
    assert abs(l["tokens_per_s"] - 512 * 4096 / l["step_s"]) <= 1e-4 * l["tokens_per_s"], l
PY
# cp=2: context parallelism, each sequence over 2 ranks (twice the GPUs at the same dp): the
# ring's exchanges counted, the activations about halved.
"$GANTRY" -o json plan $LLAMA70 --cluster dgx-h100 --gpus 64 --global-batch 512 --layout tp=8,pp=8,mb=1 >"$TMP/cp1.json"
"$GANTRY" -o json plan $LLAMA70 --cluster dgx-h100 --gpus 128 --global-batch 512 --layout tp=8,pp=8,cp=2,mb=1 >"$TMP/cp2.json"
check "--layout cp=2: 128 GPUs at dp 1, the ring's time counted, less memory a GPU" python3 - "$TMP/cp1.json" "$TMP/cp2.json" <<'PY'
import json, sys
one, two = (json.load(open(f))["layouts"][0] for f in sys.argv[1:])
assert two["cp"] == 2 and two["dp"] == 1 and one["cp"] == 1, two
assert two["cp_comm_s"] > 0 and one["cp_comm_s"] == 0, (one, two)
assert two["memory_bytes"] < one["memory_bytes"], (one["memory_bytes"], two["memory_bytes"])
PY
out="$("$GANTRY" plan $LLAMA70 --cluster dgx-h100 --gpus 192 --global-batch 512 --layout tp=8,pp=8,cp=3 2>&1)"; rc=$?
check "--layout cp whose 2 x cp does not divide the sequence is refused (exit 2), naming it" \
  bash -c "[ $rc -eq 2 ] && grep -q 'cp 3' <<<'$out' && grep -q 'multiple of 2 x cp' <<<'$out'"
out="$("$GANTRY" plan $LLAMA70 --cluster dgx-h100 --gpus 64 --global-batch 512 --layout tp=8,pp=8,zero=1,mb=1,recompute=full 2>&1)"; rc=$?
check "--layout evaluates the one named (tp 8 pp 8 dp 1, 512 micro-batches)" bash -c \
  "[ $rc -eq 0 ] && [ \$(grep -c '^1 .*tp 8 pp 8 dp 1, ZeRO 1, mb 1 x 512, recompute full' <<<'$out') -eq 1 ]"
# vp=2: the interleaved schedule, its bubble (p-1)/(v·m+p-1) of the schedule against 1F1B's.
"$GANTRY" -o json plan $LLAMA70 --cluster dgx-h100 --gpus 64 --global-batch 512 --layout tp=8,pp=8,zero=1,mb=4,recompute=full >"$TMP/vp1.json"
"$GANTRY" -o json plan $LLAMA70 --cluster dgx-h100 --gpus 64 --global-batch 512 --layout tp=8,pp=8,vp=2,zero=1,mb=4,recompute=full >"$TMP/vp2.json"
check "--layout vp=2 halves the bubble's share of the schedule" python3 - "$TMP/vp1.json" "$TMP/vp2.json" <<'PY'
import json, sys
one, two = (json.load(open(f))["layouts"][0] for f in sys.argv[1:3])
assert one["vp"] == 1 and two["vp"] == 2, (one, two)
m = one["microbatches"]
share = lambda l: l["bubble_s"] / (l["compute_s"] + l["bubble_s"] + l["pp_comm_s"] + l["tp_comm_s"] + l["ep_comm_s"])
assert abs(share(one) - 7 / (m + 7)) < 1e-3 and abs(share(two) - 7 / (2 * m + 7)) < 1e-3, (share(one), share(two), m)
assert two["pp_comm_s"] > one["pp_comm_s"], (one, two)
PY
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
# Issue 49 item 0: Llama 3 405B's layout (128 layers here: pp 16 must divide them; tp 8, pp 16,
# dp 64, T 8192, micro-batch 1 x 32, full recomputation, sequence parallel, bf16, ZeRO 1) fits
# an 80 GB H100 with the fused attention of a GPU job: from flags with --device cuda, as from a
# job spec on a cuda device (the same bytes); from flags on the cpu (the default) the unfused
# attention's B·H·T² probabilities (in the recomputation's block and its gradient) make more.
L405="--arch llama --n-layer 128 --d-model 16384 --heads 128 --kv-heads 8 --ffn-hidden 53248 --vocab 128256 \
  --seq-len 8192 --precision bf16 --zero 1 --tp 8 --pp 16 --dp 64 --micro-batch 1 --microbatches 32 \
  --recompute full --sequence-parallel --gpu-memory 80"
cat >"$TMP/l405.yaml" <<'YAML'
name: llama3-405b
model: {arch: llama, n_layer: 128, n_head: 128, n_kv_head: 8, n_embd: 16384, ffn_hidden: 53248, vocab_size: 128256,
        rope_theta: 500000, max_seq_len: 8192, seq_len: 8192}
data: {train: none.bin}
train: {steps: 1, micro_batch: 1, global_batch: 2048, precision: bf16, recompute: full, lr: 1.0e-4}
resources: {device: cuda}
parallel: {dp: 64, tp: 8, pp: 16, zero_stage: 1, sequence_parallel: true}
YAML
out="$("$GANTRY" plan $L405 --device cuda 2>&1)"; rc=$?
echo "$out" | grep -E 'activations|total'
check "405B from flags with --device cuda: fits 80 GB (exit 0), fused attention's activations" bash -c \
  "[ $rc -eq 0 ] && grep -q 'of 80.0 GB: fits' <<<'$out' && grep -q 'activations .*(fused attention' <<<'$out'"
flags_total="$(grep '^  total' <<<"$out")"
spec_total="$("$GANTRY" plan "$TMP/l405.yaml" --gpu-memory 80 2>&1 | grep '^  total')"
check "405B: --device cuda plans the bytes of a cuda job spec ($flags_total)" bash -c "[ -n '$flags_total' ] && [ '$flags_total' = '$spec_total' ]"
fused_act="$(grep '^  activations' <<<"$out" | awk '{print $2}')"
out="$("$GANTRY" plan $L405 2>&1)"
cpu_act="$(grep '^  activations' <<<"$out" | awk '{print $2}')"
check "405B from flags without --device: the cpu's unfused attention, more activations ($cpu_act > $fused_act GB)" \
  bash -c "grep -q 'activations .*(unfused attention' <<<'$out' && awk 'BEGIN { exit !($cpu_act > $fused_act) }'"
# Its 128K-token stage: --cp 16 (as Meta ran it) keeps a rank's 8,192 rows, the ring's bytes printed.
out="$("$GANTRY" plan ${L405/--seq-len 8192/--seq-len 131072} --dp 8 --microbatches 16 --cp 16 --device cuda 2>&1)"; rc=$?
echo "$out" | grep -E 'layout|activations|total|ring'
check "--cp 16 at T 131072: the layout names cp, the ring's bytes are printed, and it fits 80 GB (exit 0)" bash -c \
  "[ $rc -eq 0 ] && grep -q 'tp 8 x cp 16 x pp 16 x dp 8' <<<'$out' && grep -q 'context-parallel ring' <<<'$out' && grep -q 'fits' <<<'$out'"
# Its 126 layers over 16 stages: uneven stages (7 or 8 layers, BalanceStages), planned and fitting.
sed -i 's/n_layer: 128/n_layer: 126/' "$TMP/l405.yaml"
out="$("$GANTRY" plan "$TMP/l405.yaml" --gpu-memory 80 --ranks 2>&1)"; rc=$?
echo "$out" | grep -E '^  (activations|total)'
check "405B's 126 layers over 16 stages: planned, every stage, and fits 80 GB (exit 0)" bash -c \
  "[ $rc -eq 0 ] && grep -q 'llama, 126 layers' <<<'$out' && grep -q 'of 80.0 GB: fits' <<<'$out' && [ \$(grep -c '^15 ' <<<'$out') -eq 8 ]"
out="$("$GANTRY" plan $L405 --device tpu 2>&1)"; rc=$?
check "--device names the backends it takes (exit 2)" bash -c "[ $rc -eq 2 ] && grep -q 'cpu, cuda or cuda-emulated' <<<'$out'"
[ $fail -eq 0 ] && echo "plan_test: passed"
exit $fail
