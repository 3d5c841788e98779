#!/usr/bin/env bash
# The CUDA code path through real worker processes, without a GPU: workers started with
# --device cuda-emulated run the model on kernels/cuda's own launchers and device code under
# the CPU emulator (kernels/emulated), with their groups on Gloo. Three workers on loopback
# (deploy/local/cluster.sh --devices with 8 cuda-emulated workers and a cpu one, --per-host 2:
# the cuda-emulated workers two to a host), one shard server:
#  - `gantry workers` shows each worker's device kind, and the device (name, memory) of the
#    cuda-emulated ones;
#  - a job of resources.device cuda-emulated is placed on the cuda-emulated workers only, and
#    while too few of them are free it waits, saying for what, though the cpu worker is idle;
#  - dp 2 with ZeRO 1, and tp 2, each give gantry-train's one-process cpu losses for 20 steps
#    (<= 1e-5 relative), and so do dp 2 with ZeRO 0, 2 and 3, (1, 1, 2) and (2, 2, 2), each
#    with recompute none and full; the dp 2 job's checkpoint, exported, holds the one-process
#    parameters, and each of its ranks holds the bytes `gantry plan --ranks` gives it (the
#    planner counts the fused attention's log-sum-exps for a cuda-emulated job);
#  - a cpu job (the default) runs on the cpu worker meanwhile.
# Usage: cuda_emulated_cluster_test.sh BUILD_DIR
set -uo pipefail
BUILD="$(cd "$1" && pwd)"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="$(mktemp -d)"
source "$ROOT/tests/integration/lib.sh"
declare -A ids

"$TRAIN" prepare --out-dir "$TMP/data" /usr/share/games/fortunes >/dev/null 2>&1 || { echo "FAIL prepare"; exit 1; }
job() {  # job NAME DEVICE PARALLEL RECOMPUTE
  cat <<YAML
name: $1
model: {n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 256, seq_len: 16}
data: {train: $TMP/data/train.bin, shuffle: true}
train: {steps: 20, micro_batch: 2, global_batch: 4, lr: 3.0e-3, warmup: 2, min_lr_ratio: 0.1, seed: 5, recompute: ${4:-none}}
checkpoint: {every: 20, dir: $TMP/unused}
parallel: {$3}
resources: {device: $2}
YAML
}
job one cpu "dp: 1" >"$TMP/one.yaml"
"$TRAIN" "$TMP/one.yaml" --print-losses --save "$TMP/one" --no-progress --threads 1 | grep '^step' | awk '{print $4}' >"$TMP/one.txt"
[ "$(wc -l <"$TMP/one.txt")" -eq 20 ] || { echo "FAIL one-process reference"; exit 1; }

E=cuda-emulated
bash "$ROOT/deploy/local/cluster.sh" start --dir "$TMP/cluster" --workers 9 --shardservers 1 --threads 1 \
  --per-host 2 --devices $E,$E,$E,$E,$E,$E,$E,$E,cpu >/dev/null || exit 1
source "$TMP/cluster/env"
check "gantry workers shows each worker's device kind (8 cuda-emulated, 1 cpu)" bash -c \
  "[ \"\$('$CLI' workers | grep -c 'cuda-emulatedx1')\" -eq 8 ] && [ \"\$('$CLI' workers | grep -c ' cpux1 ')\" -eq 1 ]"
check "gantry workers shows each cuda-emulated worker's device, with its memory, and none for the cpu one" bash -c \
  "[ \"\$('$CLI' workers | grep -c 'cuda-emulatedx1 .* cuda-emulated:0, [0-9.]* GB\$')\" -eq 8 ] &&
   '$CLI' workers | grep ' cpux1 ' | grep -q ' -\$'"

same_losses() {  # same_losses WATCH_OUTPUT: 20 step losses within 1e-5 of one.txt
  paste <(grep '^step' "$1" | awk -F'|' '{print $2}' | awk '{print $2}') "$TMP/one.txt" |
    awk 'BEGIN {n = 0} {n++; d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > 1e-5) bad = 1} END {exit !(n == 20 && !bad)}'
}

cpu_worker=$("$CLI" workers | awk '/ cpux1 / {print $1}')
# (2, 2, 2) first: it takes all 8 cuda-emulated workers, so the next waits for them while the
# cpu job, submitted after it, runs on the cpu worker at once.
declare -A layout=([3d]="dp: 2, tp: 2, pp: 2" [dp2z0]="dp: 2, zero_stage: 0" [dp2z1]="dp: 2, zero_stage: 1"
                   [dp2z2]="dp: 2, zero_stage: 2" [dp2z3]="dp: 2, zero_stage: 3" [tp2]="tp: 2" [pp2]="pp: 2")
names=()
for rec in none full; do
  for l in 3d dp2z0 dp2z1 dp2z2 dp2z3 tp2 pp2; do
    job "$l-$rec" cuda-emulated "${layout[$l]}" "$rec" >"$TMP/$l-$rec.yaml"
    ids[$l-$rec]=$("$CLI" submit "$TMP/$l-$rec.yaml")
    names+=("$l-$rec")
    if [ "$l-$rec" = 3d-none ]; then
      job cpu1 cpu "dp: 1" >"$TMP/cpu1.yaml"
      cpu1=$("$CLI" submit "$TMP/cpu1.yaml")
    fi
  done
done
check "a cuda-emulated job waits for cuda-emulated workers, saying so, while the cpu worker is idle or busy" wait_for 30 bash -c \
  "'$CLI' describe '${ids[dp2z0-none]}' | grep -q 'waiting for 2 cuda-emulated workers\\|queued behind'"
"$CLI" watch "$cpu1" >"$TMP/$cpu1.txt"; rc=$?
check "the cpu job, submitted behind a cuda-emulated one that waits, ran on the cpu worker" bash -c \
  "[ $rc -eq 0 ] && grep -o 'placed: .*' '$TMP/$cpu1.txt' | head -1 | grep -q '$cpu_worker'"
check "cpu dp 1 ($cpu1): one process's 20 losses" bash -c "$(declare -f same_losses); TMP='$TMP' same_losses '$TMP/$cpu1.txt'"
for n in "${names[@]}"; do
  id=${ids[$n]}
  "$CLI" watch "$id" >"$TMP/$id.txt"; rc=$?
  check "cuda-emulated $n ($id): one cpu process's 20 losses, on cuda-emulated workers only" bash -c \
    "[ $rc -eq 0 ] && ! grep -o 'placed: .*' '$TMP/$id.txt' | grep -q '$cpu_worker' &&
     $(declare -f same_losses); TMP='$TMP' same_losses '$TMP/$id.txt'"
done
dp2=${ids[dp2z1-none]}
rel=$("$CLI" export "$dp2" --step 20 -o "$TMP/export-dp2" >/dev/null && "$TRAIN" compare "$TMP/export-dp2" "$TMP/one" | awk '{print $3}')
check "the cuda-emulated dp 2 ZeRO 1 checkpoint, exported, holds the one-process parameters (relative difference ${rel:-none})" \
  awk -v r="$rel" 'BEGIN {exit !(r != "" && r + 0 <= 1e-5)}'
check "cuda-emulated dp 2 ZeRO 1 ($dp2): each rank holds what gantry plan --ranks gives it (fused attention's activations)" \
  as_planned "$dp2" "$TMP/dp2z1-none.yaml" 2 1 1
check "the workers' logs name the backend the model ran on" bash -c "grep -q 'runs on cuda-emulated:0' '$TMP/cluster/worker1.log' && grep -q 'runs on cuda-emulated:0' '$TMP/cluster/worker8.log' && grep -q 'runs on cpu' '$TMP/cluster/worker9.log'"

echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]
