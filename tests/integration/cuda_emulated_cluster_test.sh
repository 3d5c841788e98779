#!/usr/bin/env bash
# The CUDA code path through real worker processes, without a GPU: workers started with
# --device cuda-emulated run the model on kernels/cuda's own launchers and device code under
# the CPU emulator (kernels/emulated), with their groups on Gloo. Four workers on loopback
# (deploy/local/cluster.sh --devices with 3 cuda-emulated workers of 4, 2 and 2 fake GPUs
# (--gpus) and a cpu one, --per-host 2: the 4- and a 2-GPU worker on one host), one shard
# server:
#  - a worker refuses more GPUs than there are, or GPUs on a cpu worker, naming why;
#  - `gantry workers` shows each worker's device kind and GPU count, and the device (name,
#    memory) of the cuda-emulated ones;
#  - a job's ranks run one per GPU, a rank's local index is its device ordinal: the
#    (2, 2, 2) job takes all 8 GPUs of the three workers (its tensor-parallel pairs on one
#    host), and a dp 2 job goes whole to a 2-GPU worker;
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

WORKER="$BUILD/worker/gantry-worker"
check "a worker refuses more emulated GPUs than the emulated runtime has, naming the count" bash -c \
  "'$WORKER' --work_dir '$TMP/w' --device cuda-emulated:6 --gpus 3 2>&1 | grep -q -- '--gpus: 3 GPUs from cuda-emulated:6 asked, but 2 emulated devices exist from it'"
check "a cpu worker refuses --gpus" bash -c \
  "'$WORKER' --work_dir '$TMP/w' --gpus 2 2>&1 | grep -q -- '--gpus: a cpu worker offers no GPU'"

E=cuda-emulated
bash "$ROOT/deploy/local/cluster.sh" start --dir "$TMP/cluster" --workers 4 --shardservers 1 --threads 1 \
  --per-host 2 --devices $E,$E,$E,cpu --gpus 4,2,2 >/dev/null || exit 1
source "$TMP/cluster/env"
check "gantry workers shows each worker's device kind and GPUs (cuda-emulated x4, x2, x2, cpu)" bash -c \
  "[ \"\$('$CLI' workers | grep -c 'cuda-emulatedx4')\" -eq 1 ] && [ \"\$('$CLI' workers | grep -c 'cuda-emulatedx2')\" -eq 2 ] &&
   [ \"\$('$CLI' workers | grep -c ' cpux1 ')\" -eq 1 ]"
check "gantry workers shows each cuda-emulated worker's device, with its memory, and none for the cpu one" bash -c \
  "[ \"\$('$CLI' workers | grep -c 'cuda-emulatedx[42] .* cuda-emulated:0, [0-9.]* GB\$')\" -eq 3 ] &&
   '$CLI' workers | grep ' cpux1 ' | grep -q ' -\$'"
w4=$("$CLI" workers | awk '/cuda-emulatedx4/ {print $1}')

same_losses() {  # same_losses WATCH_OUTPUT: 20 step losses within 1e-5 of one.txt
  paste <(grep '^step' "$1" | awk -F'|' '{print $2}' | awk '{print $2}') "$TMP/one.txt" |
    awk 'BEGIN {n = 0} {n++; d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > 1e-5) bad = 1} END {exit !(n == 20 && !bad)}'
}

cpu_worker=$("$CLI" workers | awk '/ cpux1 / {print $1}')
# (2, 2, 2) first: it takes all 8 cuda-emulated GPUs, so the next waits for them while the
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
  "'$CLI' describe '${ids[dp2z0-none]}' | grep -q 'waiting for 2 cuda-emulated GPUs (0 on 0 idle of 3\\|queued behind'"
check "gantry workers shows the ranks a busy worker runs (the 4-GPU worker's)" wait_for 60 bash -c \
  "'$CLI' workers | awk '\$1 == \"$w4\" && \$4 == \"busy\" {print \$6}' | grep -q '^0,1'"
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
d3=${ids[3d-none]}
check "the (2, 2, 2) job's placement: ranks 0-3 on the 4-GPU worker's GPUs 0-3, 4-5 and 6-7 on the 2-GPU workers' 0-1" bash -c \
  "grep -o 'placed: .*' '$TMP/$d3.txt' | head -1 |
   grep -q 'rank 0 $w4 ([^ ]* gpu 0), rank 1 $w4 ([^ ]* gpu 1), rank 2 $w4 ([^ ]* gpu 2), rank 3 $w4 ([^ ]* gpu 3), rank 4 w-[0-9]* ([^ ]* gpu 0), rank 5 w-[0-9]* ([^ ]* gpu 1), rank 6 w-[0-9]* ([^ ]* gpu 0), rank 7 w-[0-9]* ([^ ]* gpu 1)'"
for n in dp2z0-none dp2z1-none dp2z2-none dp2z3-none; do
  check "dp 2 ($n) went whole to one worker, its ranks on GPUs 0 and 1" bash -c \
    "grep -o 'placed: .*' '$TMP/${ids[$n]}.txt' | head -1 | grep -q 'rank 0 \(w-[0-9]*\) ([^ ]* gpu 0), rank 1 \1 ([^ ]* gpu 1)\$'"
done
check "each rank ran on the device of its local rank, as the workers' logs say, and the cpu job on cpu" bash -c \
  "for rd in 0:0 1:1 2:2 3:3 4:0 5:1 6:0 7:1; do
     grep -q \"job $d3: rank \${rd%:*} runs on cuda-emulated:\${rd#*:}\$\" '$TMP'/cluster/worker[123].log || exit 1
   done; grep -q 'runs on cpu' '$TMP/cluster/worker4.log'"

# A cancel reaches every rank of a worker with several GPUs: a dp 4 job, whole on the 4-GPU
# worker, cancelled while it runs, stops its four rank threads and frees the worker.
job long4 cuda-emulated "dp: 4" | sed 's/steps: 20,/steps: 100000,/; s/micro_batch: 2,/micro_batch: 1,/' >"$TMP/long4.yaml"
l4=$("$CLI" submit "$TMP/long4.yaml")
wait_for 60 bash -c "'$CLI' describe $l4 | grep -qE 'Steps:      [1-9]'"
ranks_of() { "$CLI" workers | awk -v w="$1" '$1 == w {print $5, $6}'; }
state_of() { "$CLI" workers | awk -v w="$1" '$1 == w {print $4}'; }
w4_idle() { [ "$(state_of "$w4")" = idle ]; }
# Each rank stops at its next step (cancelled) or in the collective it is in (aborted).
four_stopped() { [ "$(grep -c "job $l4 stopped: \(cancelled\|.*placement was aborted\)" "$TMP/cluster/worker1.log")" -eq 4 ]; }
check "a dp 4 job runs whole on the 4-GPU worker, ranks 0-3" bash -c "[ \"$(ranks_of "$w4")\" = '$l4 0,1,2,3' ]"
"$CLI" cancel "$l4" >/dev/null
check "cancelled, the worker is free at once" wait_for 10 w4_idle
check "and its four rank threads stop, each saying why" wait_for 20 four_stopped

echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]
