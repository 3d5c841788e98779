#!/usr/bin/env bash
# The CUDA code path through real worker processes, without a GPU: workers started with
# --device cuda-emulated run the model on kernels/cuda's own launchers and device code under
# the CPU emulator (kernels/emulated), with their groups on Gloo. Three workers on loopback
# (deploy/local/cluster.sh --devices cuda-emulated,cuda-emulated,cpu --per-host 2: the two
# cuda-emulated workers share a host), one shard server:
#  - `gantry workers` shows each worker's device kind;
#  - a job of resources.device cuda-emulated is placed on the cuda-emulated workers only, and
#    while only one of them is free it waits, saying for what, though the cpu worker is idle;
#  - dp 2 with ZeRO 1, and tp 2, each give gantry-train's one-process cpu losses for 20 steps
#    (<= 1e-5 relative), and the dp 2 job's checkpoint, exported, holds the one-process
#    parameters, and each of its ranks holds the bytes `gantry plan --ranks` gives it (the
#    planner counts the fused attention's log-sum-exps for a cuda-emulated job);
#  - a cpu job (the default) runs on the cpu worker meanwhile.
# Usage: cuda_emulated_cluster_test.sh BUILD_DIR
set -uo pipefail
BUILD="$(cd "$1" && pwd)"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="$(mktemp -d)"
source "$ROOT/tests/integration/lib.sh"

"$TRAIN" prepare --out-dir "$TMP/data" /usr/share/games/fortunes >/dev/null 2>&1 || { echo "FAIL prepare"; exit 1; }
job() {  # job NAME DEVICE PARALLEL
  cat <<YAML
name: $1
model: {n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 256, seq_len: 16}
data: {train: $TMP/data/train.bin, shuffle: true}
train: {steps: 20, micro_batch: 2, global_batch: 4, lr: 3.0e-3, warmup: 2, min_lr_ratio: 0.1, seed: 5}
checkpoint: {every: 20, dir: $TMP/unused}
parallel: {$3}
resources: {device: $2}
YAML
}
job one cpu "dp: 1" >"$TMP/one.yaml"
"$TRAIN" "$TMP/one.yaml" --print-losses --save "$TMP/one" --no-progress --threads 1 | grep '^step' | awk '{print $4}' >"$TMP/one.txt"
[ "$(wc -l <"$TMP/one.txt")" -eq 20 ] || { echo "FAIL one-process reference"; exit 1; }

bash "$ROOT/deploy/local/cluster.sh" start --dir "$TMP/cluster" --workers 3 --shardservers 1 --threads 1 \
  --per-host 2 --devices cuda-emulated,cuda-emulated,cpu >/dev/null || exit 1
source "$TMP/cluster/env"
check "gantry workers shows each worker's device kind (2 cuda-emulated, 1 cpu)" bash -c \
  "[ \"\$('$CLI' workers | grep -c 'cuda-emulatedx1')\" -eq 2 ] && [ \"\$('$CLI' workers | grep -c ' cpux1 ')\" -eq 1 ]"

same_losses() {  # same_losses WATCH_OUTPUT: 20 step losses within 1e-5 of one.txt
  paste <(grep '^step' "$1" | awk -F'|' '{print $2}' | awk '{print $2}') "$TMP/one.txt" |
    awk 'BEGIN {n = 0} {n++; d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > 1e-5) bad = 1} END {exit !(n == 20 && !bad)}'
}
emulated_workers() {  # the ids of the cuda-emulated workers, one a line
  "$CLI" workers | awk '/cuda-emulatedx1/ {print $1}'
}

job dp2 cuda-emulated "dp: 2, zero_stage: 1" >"$TMP/dp2.yaml"
job tp2 cuda-emulated "tp: 2" >"$TMP/tp2.yaml"
job cpu1 cpu "dp: 1" >"$TMP/cpu1.yaml"
dp2=$("$CLI" submit "$TMP/dp2.yaml")
tp2=$("$CLI" submit "$TMP/tp2.yaml")  # queued behind dp2: it needs both cuda-emulated workers
cpu1=$("$CLI" submit "$TMP/cpu1.yaml")
check "the tp 2 job waits for cuda-emulated workers while the cpu worker is busy or idle, saying so" wait_for 30 bash -c \
  "'$CLI' describe '$tp2' | grep -q 'queued behind $dp2\\|waiting for 2 cuda-emulated workers'"
for id in "$dp2" "$tp2" "$cpu1"; do "$CLI" watch "$id" >"$TMP/$id.txt"; echo "$id $?" >>"$TMP/rc.txt"; done
check "every job succeeded" bash -c "! grep -qv ' 0$' '$TMP/rc.txt'"
for id in "$dp2" "$tp2"; do
  check "$id ran on the cuda-emulated workers only" bash -c \
    "grep -o 'placed: .*' '$TMP/$id.txt' | head -1 | grep -q \"\$(emulated_workers | head -1)\" &&
     grep -o 'placed: .*' '$TMP/$id.txt' | head -1 | grep -q \"\$(emulated_workers | tail -1)\""
done
check "the cpu job ran on the cpu worker" bash -c \
  "grep -o 'placed: .*' '$TMP/$cpu1.txt' | head -1 | grep -q \"\$('$CLI' workers | awk '/ cpux1 / {print \$1}')\""
check "cuda-emulated dp 2 ZeRO 1 ($dp2): one cpu process's 20 losses" bash -c "$(declare -f same_losses); TMP='$TMP' same_losses '$TMP/$dp2.txt'"
check "cuda-emulated tp 2 ($tp2): one cpu process's 20 losses" bash -c "$(declare -f same_losses); TMP='$TMP' same_losses '$TMP/$tp2.txt'"
check "cpu dp 1 ($cpu1): one process's 20 losses" bash -c "$(declare -f same_losses); TMP='$TMP' same_losses '$TMP/$cpu1.txt'"
rel=$("$CLI" export "$dp2" --step 20 -o "$TMP/export-dp2" >/dev/null && "$TRAIN" compare "$TMP/export-dp2" "$TMP/one" | awk '{print $3}')
check "the cuda-emulated dp 2 checkpoint, exported, holds the one-process parameters (relative difference ${rel:-none})" \
  awk -v r="$rel" 'BEGIN {exit !(r != "" && r + 0 <= 1e-5)}'
check "cuda-emulated dp 2 ZeRO 1 ($dp2): each rank holds what gantry plan --ranks gives it (fused attention's activations)" \
  as_planned "$dp2" "$TMP/dp2.yaml" 2 1 1
check "the workers' logs name the backend the model ran on" bash -c "grep -q 'runs on cuda-emulated:0' '$TMP/cluster/worker1.log' && grep -q 'runs on cuda-emulated:0' '$TMP/cluster/worker2.log' && grep -q 'runs on cpu' '$TMP/cluster/worker3.log'"

echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]
