#!/usr/bin/env bash
# Data parallelism and ZeRO with real worker processes on loopback (deploy/local/cluster.sh,
# 4 workers, 2 shard servers, port 0, a temp dir):
#  - DP in {1, 2, 4} x ZeRO in {0, 1, 2, 3}, the same global batch and seed: each job's 20
#    per-step losses are gantry-train's in one process (<= 1e-5 relative), and its final
#    checkpoint, exported, holds the same parameters (<= 1e-5 relative, gantry-train compare);
#  - in each of those jobs every rank holds the model-state bytes `gantry plan JOB.yaml --ranks`
#    gives for it within 10%, and exactly its activation bytes;
#  - DP=2 in parameter-server mode (AdamW on 2 shard servers) gives the same losses;
#  - a rank SIGKILLed mid-step: the job fails naming the lost worker and its rank, and every
#    surviving rank fails its step within the collective timeout + the failure grace (1.5x) with
#    an error naming the rank that did not arrive; no rank hangs.
# Usage: dp_matrix_test.sh BUILD_DIR
set -uo pipefail
BUILD="$(cd "$1" && pwd)"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="$(mktemp -d)"
source "$ROOT/tests/integration/lib.sh"

"$TRAIN" prepare --out-dir "$TMP/data" /usr/share/games/fortunes >/dev/null 2>&1 || { echo "FAIL prepare"; exit 1; }
job() {  # job NAME DP ZERO STEPS [EXTRA]
  cat <<YAML
name: $1
model: {n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 256, seq_len: 32}
data: {train: $TMP/data/train.bin, shuffle: true}
train: {steps: $4, micro_batch: 2, global_batch: 8, lr: 3.0e-3, warmup: 2, min_lr_ratio: 0.1, seed: 5}
checkpoint: {every: $4, dir: $TMP/unused}
parallel: {dp: $2, zero_stage: $3, bucket_mb: 0.02${5:-}}
YAML
}
job one 1 0 20 >"$TMP/one.yaml"
"$TRAIN" "$TMP/one.yaml" --print-losses --save "$TMP/one" --no-progress --threads 1 | grep '^step' | awk '{print $4}' >"$TMP/one.txt"
[ "$(wc -l <"$TMP/one.txt")" -eq 20 ] || { echo "FAIL one-process reference"; exit 1; }

bash "$ROOT/deploy/local/cluster.sh" start --dir "$TMP/cluster" --workers 4 --shardservers 2 --threads 1 >/dev/null || exit 1
source "$TMP/cluster/env"

# Incoherent specs are refused at submit, with the reason, and nothing is queued.
{ job bad 2 3 20; echo "optimizer: {placement: shardserver}"; } >"$TMP/bad1.yaml"
{ job bad 4 1 20; echo "resources: {workers: 2}"; } >"$TMP/bad2.yaml"
check "ZeRO-3 with parameter-server placement is refused at submit" bash -c \
  "! '$CLI' submit '$TMP/bad1.yaml' 2>'$TMP/bad1.err' && grep -q 'zero_stage 3 shards the parameters' '$TMP/bad1.err'"
check "dp 4 on 2 workers asked for is refused at submit" bash -c \
  "! '$CLI' submit '$TMP/bad2.yaml' 2>'$TMP/bad2.err' && grep -q '2 workers asked for, but the parallel degrees need dp 4' '$TMP/bad2.err'"
check "nothing was queued" bash -c "[ -z \"\$('$CLI' jobs | tail -n +2)\" ]"

# Submitted by DP size so that FIFO gang placement runs four DP=1 jobs at once, then two
# DP=2, then one DP=4.
declare -A ids
for dp in 1 2 4; do
  for zero in 0 1 2 3; do
    job "dp$dp-zero$zero" "$dp" "$zero" 20 >"$TMP/dp$dp-zero$zero.yaml"
    ids[$dp.$zero]=$("$CLI" submit "$TMP/dp$dp-zero$zero.yaml")
  done
done
same_losses() {  # same_losses WATCH_OUTPUT: 20 step losses within 1e-5 of one.txt
  paste <(grep '^step' "$1" | awk -F'|' '{print $2}' | awk '{print $2}') "$TMP/one.txt" |
    awk 'BEGIN {n = 0} {n++; d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > 1e-5) bad = 1} END {exit !(n == 20 && !bad)}'
}
rel_params() {  # rel_params JOB: its step-20 checkpoint, exported, against the one-process model
  "$CLI" export "$1" --step 20 -o "$TMP/export-$1" >/dev/null && "$TRAIN" compare "$TMP/export-$1" "$TMP/one" | awk '{print $3}'
}
for dp in 1 2 4; do
  for zero in 0 1 2 3; do
    id=${ids[$dp.$zero]}
    "$CLI" watch "$id" >"$TMP/$id.txt"; rc=$?
    check "DP=$dp ZeRO-$zero ($id): one process's 20 losses" bash -c "[ $rc -eq 0 ] && $(declare -f same_losses); TMP='$TMP' same_losses '$TMP/$id.txt'"
    rel=$(rel_params "$id")
    check "DP=$dp ZeRO-$zero ($id): one process's final parameters (relative difference ${rel:-none})" \
      awk -v r="$rel" 'BEGIN {exit !(r != "" && r + 0 <= 1e-5)}'
    check "DP=$dp ZeRO-$zero ($id): each rank holds what gantry plan --ranks gives it" \
      as_planned "$id" "$TMP/dp$dp-zero$zero.yaml" "$dp" 1 1
  done
done
check "the coordinator commits a DP=4 checkpoint on both shard servers once the 4 ranks' parts are in (4 ranks x 2 slices + manifest + config)" \
  grep -q 'checkpoint of step 20 committed on [^ ]*, [^ ]* (10 files' "$TMP/${ids[4.3]}.txt"
check "a DP=4 ZeRO-3 checkpoint is stored as each rank's part cut in 2 slices, one per shard server, with its layout" bash -c \
  "'$CLI' checkpoints ${ids[4.3]} -o json | grep -o 'part-0000[0-3]-00[01].safetensors' | sort -u | wc -l | grep -qx 8 && \
   '$CLI' checkpoints ${ids[4.3]} | grep -q '\"dp\":4,\"pp\":1,\"tp\":1,\"zero_stage\":3'"
# Parameter-server mode: AdamW on the two shard servers, over the coordinator's partition map.
job ps 2 0 20 | sed 's/^checkpoint:.*/checkpoint: {every: 0}/' >"$TMP/ps.yaml"
echo "optimizer: {placement: shardserver}" >>"$TMP/ps.yaml"
ps=$("$CLI" submit "$TMP/ps.yaml")
"$CLI" watch "$ps" >"$TMP/ps.txt"; rc=$?
check "DP=2 in parameter-server mode ($ps): one process's 20 losses" bash -c "[ $rc -eq 0 ] && $(declare -f same_losses); TMP='$TMP' same_losses '$TMP/ps.txt'"
optimizer_params() {  # optimizer_params SHARD: the parameters whose AdamW state that shard server holds
  local port; port=$(sed 's/.*"metrics_port": \([0-9]*\).*/\1/' "$TMP/cluster/$1.ready")
  curl -sf "http://127.0.0.1:$port/metrics" | awk '/^gantry_shardserver_optimizer_params / {print $2}'
}
data_pushes() {  # data_pushes SHARD: gradient pushes that came through its plain TCP data port
  local port; port=$(sed 's/.*"metrics_port": \([0-9]*\).*/\1/' "$TMP/cluster/$1.ready")
  curl -sf "http://127.0.0.1:$port/metrics" | awk '/^gantry_shardserver_rpcs_total\{code="OK",method="DataPush"\}/ {print $2}'
}
p1=$(optimizer_params shardserver); p2=$(optimizer_params shardserver2)
d1=$(data_pushes shardserver)
check "pushes go through the data port ($d1 on the first shard server)" awk -v d="$d1" 'BEGIN {exit !(d >= 40)}'
check "the workers ran AdamW on both shard servers ($p1 and $p2 parameters)" bash -c \
  "grep -q 'job $ps: AdamW on 2 shard server' '$TMP'/cluster/worker*.log && awk -v a='$p1' -v b='$p2' 'BEGIN {exit !(a > 0 && b > 0)}'" "$TMP"/cluster/worker1.log "$TMP"/cluster/worker2.log "$TMP"/cluster/worker3.log "$TMP"/cluster/worker4.log
check "the step-time split is reported (compute, exposed comm, optimizer)" \
  grep -q 'compute [0-9.]* comm [0-9.]* opt [0-9.]* ms' "$TMP/${ids[4.2]}.txt"
check "a DP=4 ZeRO-3 worker logs its memory next to the ZeRO formula" \
  grep -q 'memory (ZeRO 3, dp 4): params .* the ZeRO formula predicts' "$TMP/cluster/worker1.log"

# A rank SIGKILLed mid-step (collective timeout 3 s; no restarts, so that the failure itself
# is what the job reports).
{ job killed 4 2 100000 ", timeout_s: 3" | sed 's/^checkpoint:.*/checkpoint: {every: 0}/'; echo "scheduling: {max_restarts: 0}"; } >"$TMP/killed.yaml"
k=$("$CLI" submit "$TMP/killed.yaml")
wait_for 30 bash -c "'$CLI' describe $k | grep -qE 'Steps:      ([3-9]|[0-9]{2,})/'"
victim=$("$CLI" describe "$k" | sed -n 's/^Workers: .*rank 2 \([^,]*\).*/\1/p')
host=$("$CLI" workers | awk -v w="$victim" '$1 == w {print $2}')
n=${host##*-w}; wpid=$(sed -n "$((3 + n))p" "$TMP/cluster/pids")  # after the coordinator and 2 shard servers
t0=$(date +%s.%N)
kill -9 "$wpid"
check "the job fails naming the lost worker and its rank" \
  wait_for 15 bash -c "'$CLI' describe $k | grep -q 'Reason:     worker $victim (.*, rank 2) was lost at step'"
wait_for 20 bash -c "[ \$('$CLI' watch $k | grep -c 'rank 2 did not arrive') -ge 3 ]"; rc=$?
t1=$(date +%s.%N)
"$CLI" watch "$k" >"$TMP/killed.txt"
grep -E 'did not arrive|was lost' "$TMP/killed.txt" | sed 's/^/     /'
check "each of ranks 0, 1, 3 fails its step naming rank 2 ($(grep -c 'rank 2 did not arrive' "$TMP/killed.txt") reports)" \
  bash -c "[ $rc -eq 0 ] && for r in 0 1 3; do grep -q \"rank \$r on .*failed on rank \$r of 4: rank 2 did not arrive\" '$TMP/killed.txt' || exit 1; done"
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
check "within the 3 s timeout + 4.5 s grace (+ a step), not a hang ($secs s)" awk -v s="$secs" 'BEGIN {exit !(s < 10)}'

check "the surviving workers are idle again" wait_for 10 bash -c "[ \$('$CLI' workers | grep -c ' idle ') -eq 3 ]"

echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]
