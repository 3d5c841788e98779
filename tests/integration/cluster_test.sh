#!/usr/bin/env bash
# The cluster end to end on loopback with the real binaries (deploy/local/cluster.sh, port
# 0, a temp dir): a job runs to SUCCEEDED and is watched; its checkpoints are listed,
# exported, and the export gives gantry-train's own loss on a fixed batch; two jobs run at
# once on two workers; a wrong crc32c is refused and nothing is committed; a shard server
# SIGKILLed after a commit reads the checkpoint back identical; a coordinator SIGKILLed
# with a queued job restarts and runs it, and the running jobs resume from their newest
# committed checkpoints; a parallel: auto job gets the planner's layout, says it, and gives
# one process's losses; of two queued jobs the higher priority is placed first, within a
# second of a cancel freeing a worker; a worker SIGKILLed mid-job restarts the job on the
# spare worker from its last committed checkpoint (and with max_restarts 0 fails it with a
# reason); every daemon's /metrics passes promtool; stop is clean.
# Usage: cluster_test.sh BUILD_DIR
set -uo pipefail
BUILD="$(cd "$1" && pwd)"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="$(mktemp -d)"
source "$ROOT/tests/integration/lib.sh"
PROBE="$BUILD/tests/grpc_probe"

# Data: the fortunes corpus (scripts/setup.sh installs it).
"$TRAIN" prepare --out-dir "$TMP/data" /usr/share/games/fortunes >/dev/null 2>&1 || { echo "FAIL prepare"; exit 1; }
job() {  # job NAME STEPS
  cat <<YAML
name: $1
model: {n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 256, seq_len: 32}
data: {train: $TMP/data/train.bin, val: $TMP/data/val.bin, shuffle: true}
train: {steps: $2, micro_batch: 4, global_batch: 8, lr: 3.0e-3, warmup: 2, min_lr_ratio: 0.1, seed: 5}
eval: {every: 10, batches: 2}
checkpoint: {every: 10, dir: $TMP/unused}
YAML
}
job example 30 >"$TMP/example.yaml"
job long 100000 >"$TMP/long.yaml"

bash "$ROOT/deploy/local/cluster.sh" start --dir "$TMP/cluster" --workers 2 --threads 1 || exit 1
source "$TMP/cluster/env"

# A job that cannot fit any worker (a 1.5B model at micro-batch 4096) is refused at submit,
# with the planner's figures and what to change.
sed -e 's/^model:.*/model: {n_layer: 48, n_head: 25, n_embd: 1600, vocab_size: 50257, seq_len: 1024}/' \
    -e 's/micro_batch: 4, global_batch: 8/micro_batch: 4096, global_batch: 4096/' "$TMP/example.yaml" >"$TMP/huge.yaml"
check "a job that cannot fit its workers is refused at submit, saying why" bash -c \
  "! '$CLI' submit '$TMP/huge.yaml' 2>'$TMP/huge.err' && grep -q 'FAILED_PRECONDITION: the job needs .* GB per worker (parameters' '$TMP/huge.err' && \
   grep -q 'gantry plan JOB.yaml' '$TMP/huge.err' && '$CLI' plan '$TMP/huge.yaml' | grep -q 'activations'"

{ cat "$TMP/example.yaml"; echo "parallel: {pp: 2, zero_stage: 3}"; } >"$TMP/pp.yaml"
check "pipeline parallelism with ZeRO 3 is refused at submit, saying why" bash -c \
  "! '$CLI' submit '$TMP/pp.yaml' 2>'$TMP/pp.err' && grep -q 'parallel.zero_stage. is 3 with pp 2: pipeline stages run with ZeRO 0 or 1' '$TMP/pp.err'"

"$CLI" submit "$TMP/example.yaml" --wait >"$TMP/watch.txt"; rc=$?
check "example job watched to SUCCEEDED" bash -c "[ $rc -eq 0 ] && grep -q 'j-000001 SUCCEEDED' '$TMP/watch.txt' && grep -q 'step    30/30' '$TMP/watch.txt'"
check "checkpoints lists steps 10, 20, 30" bash -c "[ \$('$CLI' checkpoints j-000001 | grep -cE '^(10|20|30) ') -eq 3 ]"
check "checkpoints of a job no one knows: NOT_FOUND naming it, exit 2" bash -c \
  "'$CLI' checkpoints j-424242 2>'$TMP/nf.txt'; [ \$? -eq 2 ] && grep -q 'NOT_FOUND: job j-424242 not found' '$TMP/nf.txt'"
check "checkpoints streamed from the workers' memory: no file was written under their work dirs" \
  bash -c "[ -z \"\$(find '$TMP'/cluster/worker[0-9] -type f 2>/dev/null)\" ]"
"$CLI" export j-000001 --step 30 -o "$TMP/export" >/dev/null
"$TRAIN" "$TMP/example.yaml" --save "$TMP/local" --no-progress --threads 1 >/dev/null
eval_loss() { "$TRAIN" eval --from "$1" --data "$TMP/data/val.bin" --seq-len 32 --batch 4 --batches 3 --threads 1; }
la=$(eval_loss "$TMP/export"); lb=$(eval_loss "$TMP/local")
check "export loads into gantry-train with the one-process run's loss on a fixed batch ($la vs $lb)" \
  [ -n "$la" -a "$la" = "$lb" ]
# sample and export are one implementation in both front ends (cli/model_commands.h,
# cli/export_checkpoint.h): gantry sample of the job's checkpoint writes what gantry-train
# sample writes from its export.
SAMPLE="--prompt ab --tokens 12 --seed 7 --threads 1"
sa=$("$CLI" sample j-000001 --step 30 $SAMPLE 2>&1); sb=$("$TRAIN" sample --from "$TMP/export" $SAMPLE 2>&1)
check "gantry sample of the job's checkpoint is gantry-train sample of its export ('$sa')" \
  bash -c '[ "${#1}" -gt 2 ] && [ "$1" = "$2" ]' _ "$sa" "$sb"

# A new job starting from another job's newest checkpoint (checkpoint.resume_from).
sed 's/^train: {steps: 30,/train: {steps: 40,/' "$TMP/example.yaml" >"$TMP/more.yaml"
sed -i 's|^checkpoint: {every: 10, dir: \(.*\)}|checkpoint: {every: 10, dir: \1, resume_from: j-000001}|' "$TMP/more.yaml"
"$CLI" submit "$TMP/more.yaml" --wait >"$TMP/more.txt"; rc=$?
check "a new job resumes from another job's newest checkpoint (step 30 of j-000001) and runs steps 31-40" bash -c \
  "[ $rc -eq 0 ] && grep -q 'resuming from the checkpoint of step 30 of job j-000001' '$TMP'/cluster/worker*.log && \
   [ \$(grep -c '^step' '$TMP/more.txt') -eq 10 ] && grep -q '^step    31/40' '$TMP/more.txt' && grep -q 'SUCCEEDED' '$TMP/more.txt'"

# Two long jobs (a short one may end before both are seen running), then cancelled.
job twin 100000 | sed 's/^checkpoint:.*/checkpoint: {every: 0}/' >"$TMP/twin.yaml"
a=$("$CLI" submit "$TMP/twin.yaml"); b=$("$CLI" submit "$TMP/twin.yaml")
wait_for 20 bash -c "'$CLI' describe $a | grep -q 'State:      RUNNING' && '$CLI' describe $b | grep -q 'State:      RUNNING' && \
                     [ \$('$CLI' workers | grep -c busy) -eq 2 ]"; both=$?
"$CLI" cancel "$a" >/dev/null; "$CLI" cancel "$b" >/dev/null
check "two jobs at once on two workers" bash -c "[ $both -eq 0 ] && '$CLI' watch $a | grep -q CANCELLED && '$CLI' watch $b | grep -q CANCELLED"

# Data parallelism across the two workers (Gloo over TCP, rendezvous through the
# coordinator) gives the one-process losses of the same global batch.
sed 's/^train: {steps: 30, micro_batch: 4, global_batch: 8,/train: {steps: 15, micro_batch: 2, global_batch: 8,/' \
  "$TMP/example.yaml" >"$TMP/dp1.yaml"
{ cat "$TMP/dp1.yaml"; echo "parallel: {dp: 2}"; } >"$TMP/dp2.yaml"
"$CLI" submit "$TMP/dp2.yaml" --wait >"$TMP/dp2.txt"; rc=$?
"$TRAIN" "$TMP/dp1.yaml" --print-losses --no-progress --threads 1 | grep '^step' >"$TMP/dp1.txt"
check "a DP=2 job on two workers gives one process's losses (15 steps, <= 1e-5 relative)" bash -c "[ $rc -eq 0 ] && \
  paste <(grep '^step' '$TMP/dp2.txt' | awk -F'|' '{print \$2}' | awk '{print \$2}') <(awk '{print \$4}' '$TMP/dp1.txt') | \
  awk 'BEGIN {n = 0} {n++; d = (\$1 - \$2) / \$2; if (d < 0) d = -d; if (d > 1e-5) bad = 1} END {exit !(n == 15 && !bad)}'"

{ cat "$TMP/dp1.yaml"; echo "parallel: {dp: 2, zero_stage: 1}"; } >"$TMP/zero1.yaml"
"$CLI" submit "$TMP/zero1.yaml" --wait >"$TMP/zero1.txt"; rc=$?
check "a DP=2 ZeRO-1 job on two workers gives one process's losses (15 steps, <= 1e-5 relative)" bash -c "[ $rc -eq 0 ] && \
  paste <(grep '^step' '$TMP/zero1.txt' | awk -F'|' '{print \$2}' | awk '{print \$2}') <(awk '{print \$4}' '$TMP/dp1.txt') | \
  awk 'BEGIN {n = 0} {n++; d = (\$1 - \$2) / \$2; if (d < 0) d = -d; if (d > 1e-5) bad = 1} END {exit !(n == 15 && !bad)}'"

# parallel: auto: the coordinator chooses the layout for the two workers (the cost model's
# first; the event and describe say which and its prediction), and any layout gives the
# one-process losses of the same global batch.
sed -e 's/micro_batch: 2, //' "$TMP/dp1.yaml" >"$TMP/auto.yaml"
printf 'parallel: auto\nresources: {workers: 2}\n' >>"$TMP/auto.yaml"
"$CLI" submit "$TMP/auto.yaml" --wait >"$TMP/auto.txt"; rc=$?
auto_id=$(grep -o 'j-[0-9]*' "$TMP/auto.txt" | head -1)
check "a parallel: auto job gets its layout and prediction in its events and describe, and one process's losses" bash -c \
  "[ $rc -eq 0 ] && grep -q 'parallel: auto on 2 cpu workers (cluster cpu .*): dp .* x tp .* x pp .*: predicted step .* tokens/s .* MFU .* GB per worker' '$TMP/auto.txt' && \
   '$CLI' describe $auto_id | grep -q '^Layout:     parallel: auto on 2 cpu workers' && \
   paste <(grep '^step' '$TMP/auto.txt' | awk -F'|' '{print \$2}' | awk '{print \$2}') <(awk '{print \$4}' '$TMP/dp1.txt') | \
  awk 'BEGIN {n = 0} {n++; d = (\$1 - \$2) / \$2; if (d < 0) d = -d; if (d > 1e-5) bad = 1} END {exit !(n == 15 && !bad)}'"

SHARD="127.0.0.1:$(sed 's/.*"grpc_port": \([0-9]*\).*/\1/' "$TMP/cluster/shardserver.ready")"
check "a chunk with a wrong crc32c is refused (DATA_LOSS) and nothing is committed" "$PROBE" badchunk "$SHARD"

w1port=$(sed 's/.*"metrics_port": \([0-9]*\).*/\1/' "$TMP/cluster/worker1.ready")
check "worker metrics: tokens/s, step seconds, loss, MFU, memory" bash -c "curl -sf http://127.0.0.1:$w1port/metrics | \
  grep -c -E '^gantry_worker_(tokens_per_second|step_seconds_count|loss|mfu_ratio|memory_bytes\\{kind=\"params\"\\}) ' | grep -qx 5"
for f in coordinator shardserver worker1 worker2; do
  port=$(sed 's/.*"metrics_port": \([0-9]*\).*/\1/' "$TMP/cluster/$f.ready")
  check "promtool check metrics: $f" bash -c "curl -sf http://127.0.0.1:$port/metrics | promtool check metrics"
done

# Shard server SIGKILLed right after commits: the checkpoint reads back identical.
spid=$(sed -n 2p "$TMP/cluster/pids"); kill -9 "$spid"; wait "$spid" 2>/dev/null
SPORT=${SHARD##*:}
"$BUILD/shardserver/gantry-shardserver" --listen "127.0.0.1:$SPORT" --metrics_listen 127.0.0.1:0 \
  --data_dir "$TMP/cluster/shardserver" --coordinator "$GANTRY_COORDINATOR" 2>>"$TMP/cluster/shardserver.log" &
echo $! >>"$TMP/extra.pids"
wait_for 15 "$CLI" export j-000001 --step 30 -o "$TMP/export2"
check "after a shard server SIGKILL the committed checkpoint reads back identical" \
  bash -c "cmp '$TMP/export/model.safetensors' '$TMP/export2/model.safetensors' && cmp '$TMP/export/config.json' '$TMP/export2/config.json'"

# Coordinator SIGKILLed with a queued job (two long jobs hold both workers).
l1=$("$CLI" submit "$TMP/long.yaml"); l2=$("$CLI" submit "$TMP/long.yaml"); q=$("$CLI" submit "$TMP/example.yaml")
wait_for 10 bash -c "'$CLI' describe $q | grep -q 'PENDING (#1)'"
check "third job queued while both workers are busy" bash -c "'$CLI' describe $q | grep -q 'PENDING (#1)'"
# Both long jobs have a committed checkpoint to resume from before the kill (on a loaded machine
# the kill could otherwise come before their first commit, and they would start over).
wait_for 30 bash -c "'$CLI' checkpoints $l1 | grep -qE '^[1-9][0-9]* ' && '$CLI' checkpoints $l2 | grep -qE '^[1-9][0-9]* '"
cpid=$(sed -n 1p "$TMP/cluster/pids"); CPORT=${GANTRY_COORDINATOR##*:}
kill -9 "$cpid"; wait "$cpid" 2>/dev/null
"$BUILD/coordinator/gantry-coordinator" --listen "127.0.0.1:$CPORT" --metrics_listen 127.0.0.1:0 \
  --data_dir "$TMP/cluster/coordinator" 2>>"$TMP/cluster/coordinator.log" &
echo $! >>"$TMP/extra.pids"
wait_for 15 "$CLI" describe "$q"
check "after a coordinator SIGKILL the running jobs resume from their newest committed checkpoint" \
  wait_for 30 bash -c "grep -q 'job $l1: rank 0 resuming from the checkpoint of step [1-9]' '$TMP'/cluster/worker*.log && \
                       grep -q 'job $l2: rank 0 resuming from the checkpoint of step [1-9]' '$TMP'/cluster/worker*.log"
"$CLI" cancel "$l1" >/dev/null; "$CLI" cancel "$l2" >/dev/null
check "after a coordinator SIGKILL the queued job is still there and runs to SUCCEEDED" \
  wait_for 60 bash -c "'$CLI' describe $q | grep -q 'State:      SUCCEEDED'"

# Elastic: with one worker free, an elastic job (dp 1..2) starts at dp 1; once the other
# worker comes free it grows to dp 2 at its next checkpoint, resuming from it.
l1=$("$CLI" submit "$TMP/long.yaml")
wait_for 20 bash -c "'$CLI' describe $l1 | grep -q 'State:      RUNNING'"
sed 's/^checkpoint:.*/checkpoint: {every: 10, dir: x}/' "$TMP/long.yaml" >"$TMP/elastic.yaml"
printf 'parallel: {dp: 2}\nelastic: {min_dp: 1, max_dp: 2}\n' >>"$TMP/elastic.yaml"
e=$("$CLI" submit "$TMP/elastic.yaml")
check "an elastic job starts at dp 1 on the one free worker" wait_for 20 bash -c \
  "'$CLI' describe $e | grep -q 'State:      RUNNING' && '$CLI' describe $e | grep -q '^Workers:    rank 0 [^,]*\$'"
"$CLI" cancel "$l1" >/dev/null
check "it grows to dp 2 at its next checkpoint once the other worker is free, resuming from it" wait_for 30 bash -c \
  "'$CLI' describe $e | grep -q 'State:      RUNNING' && '$CLI' describe $e | grep -q 'rank 1 w-' && \
   grep -q 'job $e: rank 1 resuming from the checkpoint of step' '$TMP'/cluster/worker*.log"
# glog times (seconds in the day) of the lines matching $1 in files $2..., and the first of them.
log_times() {  # every matching line's time, in order
  local pat="$1"; shift
  grep -h "$pat" "$@" | awk '{split($2, t, ":"); printf "%.6f\n", t[1] * 3600 + t[2] * 60 + t[3]}' | sort -n
}
log_secs() { log_times "$@" | head -1; }
t0=$(date +%s.%N)
"$CLI" cancel "$e" >/dev/null
wait_for 60 bash -c "[ \$('$CLI' workers | grep -c ' idle ') -eq 2 ]"
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
# Timed in the cluster, from its logs: the first worker taking the cancel to the last of the
# job's two ranks stopping (one may be inside a collective, waiting for the other). The wall
# time through the CLI is printed too: it also counts the CLI's processes, which took seconds
# to start under a full ctest -j2 (seen: 2.2 s, with the ranks stopped well within a second).
c0=$(log_secs "job $e: cancel received" "$TMP"/cluster/worker*.log)
# (The job's first placement, at dp 1, stopped when it grew: only the stops after the cancel count.)
after_cancel() { awk -v a="${c0:-0}" '$1 >= a'; }
stops=0
for _ in $(seq 600); do  # up to 30 s for both ranks' lines
  stops=$(log_times "job $e stopped" "$TMP"/cluster/worker*.log | after_cancel | wc -l)
  [ "$stops" -ge 2 ] && break
  sleep 0.05
done
c1=$(log_times "job $e stopped" "$TMP"/cluster/worker*.log | after_cancel | tail -1)
csecs=$(awk -v a="${c0:-0}" -v b="${c1:-999}" 'BEGIN {if (b < a - 43200) b += 86400; printf "%.3f", b - a}')  # (past midnight)
check "cancelling it (dp 2) frees both workers, the rank inside a collective too, within a second ($csecs s in the cluster for $stops ranks, $secs s through the CLI)" \
  bash -c "[ '$stops' -ge 2 ] && awk -v s=$csecs 'BEGIN {exit !(s >= 0 && s < 1)}'"
check "the job's events say so, and it was not counted as a restart" bash -c \
  "'$CLI' watch $e 2>/dev/null | grep -q 'growing from dp 1 to dp 2 from the checkpoint of step' && \
   '$CLI' describe $e | grep -q 'Restarts:   0'"

# Priorities on a full cluster: two long jobs hold both workers; a low-priority job is
# queued, then a high-priority one. Cancelling a long job places the high one first, within
# a second; cancelling the other places the low one. The long jobs may not be preempted: else
# the high one takes a worker by preemption (its victim checkpoints, then yields), which was
# seen to win the race with the cancel (placed 3 ms before the cancel reached the coordinator).
{ cat "$TMP/long.yaml"; echo "scheduling: {preemptible: false}"; } >"$TMP/held.yaml"
l1=$("$CLI" submit "$TMP/held.yaml"); l2=$("$CLI" submit "$TMP/held.yaml")
{ cat "$TMP/long.yaml"; echo "scheduling: {priority: 0}"; } >"$TMP/low.yaml"
{ cat "$TMP/long.yaml"; echo "scheduling: {priority: 5}"; } >"$TMP/high.yaml"
check "both long jobs run" wait_for 20 bash -c \
  "'$CLI' describe $l1 | grep -q 'State:      RUNNING' && '$CLI' describe $l2 | grep -q 'State:      RUNNING'"
lo=$("$CLI" submit "$TMP/low.yaml"); hi=$("$CLI" submit "$TMP/high.yaml")
# (These two checks have failed under load, in a full ctest -j2 run, and not alone: on a
# failure, what the cluster said is printed.)
said() { { "$CLI" workers; for j in "$@"; do "$CLI" describe "$j"; done; } 2>&1 | sed 's/^/    /'; }
before=$fail
check "the later, higher-priority job is first in the queue, saying what it waits for" bash -c \
  "'$CLI' describe $hi | grep -q 'PENDING (#1)' && '$CLI' describe $lo | grep -q 'PENDING (#2)' && \
   '$CLI' describe $hi | grep -q 'Waiting:    waiting for 1 worker (0 idle of 2 attached)'"
[ "$fail" -eq "$before" ] || said "$hi" "$lo" "$l1" "$l2"
t0=$(date +%s.%N)
"$CLI" cancel "$l1" >/dev/null
until "$CLI" describe "$hi" | grep -qE 'State:      (SCHEDULED|RUNNING)'; do
  [ "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {print (b - a > 10)}')" = 1 ] && break; sleep 0.02
done
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
# The cluster's own time, from its log: the coordinator taking the cancel to its placing the
# high-priority job. (The worker's "cancel received" is no anchor: the coordinator frees the
# worker as it sends the cancel, and the worker joins the job's threads before it starts the
# next assignment, so the placement was seen logged 2 ms before the worker's line.) The wall
# time above also counts the CLI's processes, which on a 2-core machine under a full ctest
# -j2, beside two training jobs, took seconds to start (seen: the cancel reached the worker
# 1.2 s after the CLI began, the job was placed 3 ms later, and the loop's describes saw it 5 s
# after that).
c0=$(log_secs "job $l1: cancelled; its workers are told and free" "$TMP"/cluster/coordinator.log)
c1=$(log_secs "job $hi generation 1 placed" "$TMP"/cluster/coordinator.log)
csecs=$(awk -v a="${c0:-0}" -v b="${c1:-999}" 'BEGIN {if (b < a - 43200) b += 86400; printf "%.3f", b - a}')  # (past midnight)
before=$fail
check "a cancel frees its worker for the high-priority job within a second ($csecs s in the cluster, $secs s through the CLI)" \
  bash -c "[ -n '$c0' ] && [ -n '$c1' ] && awk -v s=$csecs 'BEGIN {exit !(s >= 0 && s < 1)}' && \
           '$CLI' describe $hi | grep -qE 'State:      (SCHEDULED|RUNNING)' && '$CLI' describe $lo | grep -q 'PENDING (#1)'"
[ "$fail" -eq "$before" ] || { said "$hi" "$lo" "$l1"; grep -h "$l1\|$hi" "$TMP"/cluster/*.log | tail -30 | sed 's/^/    /'; }
"$CLI" cancel "$l2" >/dev/null
check "the low-priority job runs next" wait_for 10 bash -c "'$CLI' describe $lo | grep -qE 'State:      (SCHEDULED|RUNNING)'"
"$CLI" cancel "$lo" >/dev/null

# A worker SIGKILLed mid-job: the job restarts on the spare worker and resumes from its last
# committed checkpoint.
k=$hi
wait_for 30 bash -c "'$CLI' describe $k | grep -qE 'Steps:      ([2-9][0-9]|[0-9]{3,})/'"
wait_for 20 bash -c "'$CLI' checkpoints $k | grep -qE '^[0-9]+ '"
host=$("$CLI" workers | awk -v j="$k" '$5 == j {print $2}')
n=${host##*-w}; wpid=$(sed -n "$((2 + n))p" "$TMP/cluster/pids")
kill -9 "$wpid"
check "a worker lost mid-job restarts the job, which resumes from its last committed checkpoint" \
  wait_for 30 bash -c "'$CLI' describe $k | grep -q 'State:      RUNNING' && \
    '$CLI' describe $k | grep -q 'Restarts:   1' && '$CLI' describe $k | grep -q 'Last failure: worker w-.* was lost at step' && \
    grep -q 'job $k: rank 0 resuming from the checkpoint of step [1-9]' '$TMP'/cluster/worker*.log"
"$CLI" cancel "$k" >/dev/null

# With scheduling.max_restarts 0 a lost worker fails the job, naming it. (The killed worker
# is not restarted: one worker is left.)
{ cat "$TMP/long.yaml"; echo "scheduling: {max_restarts: 0}"; } >"$TMP/norestart.yaml"
k=$("$CLI" submit "$TMP/norestart.yaml")
wait_for 20 bash -c "'$CLI' describe $k | grep -q 'State:      RUNNING'"
host=$("$CLI" workers | awk -v j="$k" '$5 == j {print $2}')
n=${host##*-w}; wpid=$(sed -n "$((2 + n))p" "$TMP/cluster/pids")
kill -9 "$wpid"
check "with max_restarts 0 a worker lost mid-job fails the job with a reason" \
  wait_for 15 bash -c "'$CLI' describe $k | grep -q 'State:      FAILED' && '$CLI' describe $k | grep -q 'Reason:     worker w-.* was lost at step'"

echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]
