#!/usr/bin/env bash
# Preemption that checkpoints first (CTest label integration; docs/operations.md
# "Preemption"), on a local cluster of one CPU worker and one shard server. A long job of
# priority 0 runs; a job of priority 10 is submitted and cannot be placed. Then:
#   - checkpoint, then release: the long job is told to checkpoint a little ahead, its
#     checkpoint of that step commits, and only then does it release its worker; it waits as
#     PREEMPTED, its events naming the job that preempted it and why; the urgent job runs;
#     the long job is placed again, resumes from that checkpoint, and its final parameters are
#     bitwise equal to an undisturbed run's; gantry_coordinator_preemptions_total counts it;
#   - past the grace period: the worker frozen (SIGSTOP) so that it cannot checkpoint, the
#     job is stopped at its scheduling.preemption_grace_s, resumes from its last committed
#     checkpoint, and still ends bitwise equal;
#   - every kill point of the preemption path (coordinator.preempt.*, as the coordinator
#     lists them): the coordinator dies there by SIGKILL and restarts; both jobs reach
#     SUCCEEDED (no job lost), no placement (job, generation) is made twice, and the long
#     job's parameters are bitwise equal.
# About 95 s on 2 cores, three quarters of it the kill points (a worker re-attaches seconds after
# a coordinator restart, its back-off grown while the coordinator was away).
# Usage: preemption_test.sh BUILD_DIR [REGEX]  (REGEX: only the kill points it matches)
set -uo pipefail
BUILD="$(cd "$1" && pwd)"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="$(mktemp -d)"
ONLY="${2:-.}"
source "$ROOT/tests/integration/lib.sh"
COORD_BIN="$BUILD/coordinator/gantry-coordinator"

"$TRAIN" prepare --out-dir "$TMP/data" /usr/share/games/fortunes >/dev/null 2>&1 || { echo "FAIL prepare"; exit 1; }
# Enough steps that the stop step (0.3 s of steps ahead: a hundred at 3 ms a step) comes
# before the end after step 60.
STEPS=400
job() {  # job NAME STEPS PRIORITY [GRACE_S]
  cat <<YAML
name: $1
model: {n_layer: 2, n_head: 4, n_embd: 64, vocab_size: 256, seq_len: 64}
data: {train: $TMP/data/train.bin, shuffle: true}
train: {steps: $2, micro_batch: 4, global_batch: 4, lr: 3.0e-3, warmup: 5, seed: 5}
checkpoint: {every: 50, dir: $TMP/unused}
scheduling: {priority: $3, max_restarts: 10${4:+, preemption_grace_s: $4}}
YAML
}
job long $STEPS 0 >"$TMP/long.yaml"; job long $STEPS 0 1 >"$TMP/long_grace.yaml"; job urgent 5 10 >"$TMP/urgent.yaml"

bash "$ROOT/deploy/local/cluster.sh" start --dir "$TMP/cluster" --workers 1 --shardservers 1 --threads 1 >/dev/null || exit 1
source "$TMP/cluster/env"
CPORT=${GANTRY_COORDINATOR##*:}
mapfile -t PIDS <"$TMP/cluster/pids"  # coordinator, shard server, worker
COORD_PID=${PIDS[0]}; WORKER_PID=${PIDS[2]}

has_checkpoint() { "$CLI" checkpoints "$1" 2>/dev/null | grep -q "^$2 "; }  # has_checkpoint JOB STEP
state_is() { "$CLI" describe "$1" 2>/dev/null | grep -q "^State:      $2"; }
at_step() { local s; s=$(steps_done "$1"); [ "${s:-0}" -ge "$2" ]; }
succeeded() { state_is "$1" SUCCEEDED && state_is "$2" SUCCEEDED; }
bitwise() {  # bitwise JOB: its final parameters are the undisturbed run's
  rm -rf "$TMP/got"; "$CLI" export "$1" --step $STEPS -o "$TMP/got" >/dev/null && cmp -s "$TMP/got/model.safetensors" "$TMP/ref/model.safetensors"
}
preemptions() {  # the coordinator's gantry_coordinator_preemptions_total (every team)
  curl -s "http://127.0.0.1:$(ready_port "$TMP/cluster/coordinator.ready" metrics_port)/metrics" |
    awk '/^gantry_coordinator_preemptions_total/ {n += $2} END {print n + 0}'
}

t0=$SECONDS
REF=$("$CLI" submit "$TMP/long.yaml") && "$CLI" watch "$REF" >/dev/null || { echo "FAIL the undisturbed run ($REF)"; exit 1; }
"$CLI" export "$REF" --step $STEPS -o "$TMP/ref" >/dev/null || { echo "FAIL exporting the undisturbed run"; exit 1; }
echo "     undisturbed run $REF: $((SECONDS - t0)) s"

# 1. Checkpoint, then release.
t0=$SECONDS
long=$("$CLI" submit "$TMP/long.yaml")
wait_for 60 at_step "$long" 20 || echo "     $long did not reach step 20"
urgent=$("$CLI" submit "$TMP/urgent.yaml")
check "both jobs end SUCCEEDED" wait_for 120 succeeded "$long" "$urgent"
"$CLI" watch "$long" >"$TMP/long.events" 2>&1
"$CLI" watch "$urgent" >"$TMP/urgent.events" 2>&1
grep -E 'preempt|PREEMPTED|resum' "$TMP/long.events" | sed 's/^/     /'
stop=$(sed -n 's/.*it checkpoints after step \([0-9]*\).*/\1/p' "$TMP/long.events" | head -1)
check "the long job was asked to checkpoint for job $urgent, naming its submitter and why" \
  grep -q "preemption requested by job $urgent of .*(priority 10 over 0) needs 1 cpu slot" "$TMP/long.events"
check "its checkpoint of step ${stop:-?} committed before it went PREEMPTED" bash -c \
  "grep -n 'checkpoint of step $stop committed' '$TMP/long.events' | head -1 | cut -d: -f1 >'$TMP/a'; grep -n 'PREEMPTED\$' '$TMP/long.events' | head -1 | cut -d: -f1 >'$TMP/b'; [ -s '$TMP/a' ] && [ -s '$TMP/b' ] && [ \$(cat '$TMP/a') -lt \$(cat '$TMP/b') ]"
check "the PREEMPTED event says who preempted it and that it resumes from that checkpoint" \
  grep -q "preempted by job $urgent of .*; the checkpoint of step $stop is committed; its workers are released" "$TMP/long.events"
check "the urgent job was placed only after the long job released its worker" bash -c \
  "[ \$(grep -c 'placed: ' '$TMP/urgent.events') -eq 1 ] && ! grep -q 'preempt' '$TMP/urgent.events'"
check "the long job resumed from the checkpoint of step $stop" \
  grep -q "job $long: rank 0 resuming from the checkpoint of step $stop " "$TMP/cluster/worker1.log"
check "its final parameters are bitwise equal to the undisturbed run's" bitwise "$long"
check "gantry_coordinator_preemptions_total counts the preemption ($(preemptions))" [ "$(preemptions)" -eq 1 ]
echo "     checkpoint, then release: $((SECONDS - t0)) s"

# 2. Past the grace period (1 s): the worker cannot checkpoint while frozen.
t0=$SECONDS
long=$("$CLI" submit "$TMP/long_grace.yaml")
wait_for 60 has_checkpoint "$long" 50 || echo "     $long has no checkpoint of step 50"
urgent=$("$CLI" submit "$TMP/urgent.yaml")
kill -STOP "$WORKER_PID"
wait_for 30 state_is "$long" PREEMPTED; kill -CONT "$WORKER_PID"
check "past its grace period the long job was stopped: PREEMPTED without that checkpoint" \
  bash -c "'$CLI' watch $long 2>&1 | grep -q 'within its grace period of 1.0 s: stopped; it resumes from its last committed checkpoint (step 50)'"
check "both jobs end SUCCEEDED" wait_for 120 succeeded "$long" "$urgent"
check "the long job resumed from its last committed checkpoint, step 50" \
  grep -q "job $long: rank 0 resuming from the checkpoint of step 50 " "$TMP/cluster/worker1.log"
check "its final parameters are bitwise equal to the undisturbed run's" bitwise "$long"
echo "     past the grace period: $((SECONDS - t0)) s"

# 3. The coordinator killed at each kill point of the preemption path.
respawn() {  # respawn LOG: a coordinator on its port (GANTRY_KILL_AT from the caller arms it)
  spawn_coordinator "$CPORT" "$1"; COORD_PID=$SPAWNED
  wait_for 30 test -s "$TMP/cluster/coordinator.ready" || { echo "     the coordinator did not start: $(tail -3 "$1")"; return 1; }
}
# The cluster serves again: the worker attached and idle, and the shard server registered (it
# lists the undisturbed run's last checkpoint): a job placed before would have nowhere to
# checkpoint.
ready() { "$CLI" workers 2>/dev/null | grep -q ' idle ' && "$CLI" checkpoints "$REF" 2>/dev/null | grep -q "^$STEPS "; }
crash() {  # crash POINT
  local point=$1 log="$TMP/logs/$1" t0=$SECONDS rc
  mkdir -p "$TMP/logs"
  stop_pid "$COORD_PID"
  GANTRY_KILL_AT="$point" respawn "$log.armed" || return 1
  wait_for 30 ready || { echo "     no idle worker or shard server after the armed coordinator started"; return 1; }
  long=$("$CLI" submit "$TMP/long.yaml") || return 1
  # Once its checkpoint of step 50 is committed: placed again after the restart, it waits for
  # the shard server holding it (which re-registers a few seconds after the coordinator is back).
  wait_for 60 has_checkpoint "$long" 50
  # The scheduling thread may preempt, and die, before SubmitJob's answer is out: the job is
  # stored by then, and found by its name after the restart.
  urgent=$("$CLI" submit "$TMP/urgent.yaml" 2>/dev/null)
  if ! wait_for 60 grep -q "kill point $point reached (hit 1): SIGKILL" "$log.armed"; then
    echo "     the coordinator never reached $point"; stop_pid "$COORD_PID"; return 1
  fi
  { wait "$COORD_PID"; rc=$?; } 2>/dev/null
  check "$point: the coordinator died there by SIGKILL (exit status $rc)" [ "$rc" -eq 137 ]
  respawn "$log.after" || return 1
  [ -n "$urgent" ] || urgent=$(sed -n 's/.*job \(j-[0-9]*\) (urgent) submitted.*/\1/p' "$log.armed" | tail -1)
  check "$point: after the restart both jobs reach SUCCEEDED (no job lost)" wait_for 120 succeeded "$long" "$urgent"
  check "$point: no placement was made twice (each job generation placed once over both coordinators)" bash -c \
    "! cat '$log.armed' '$log.after' | sed -n 's/.*\\(job j-[0-9]* generation [0-9]*\\) placed.*/\\1/p' | sort | uniq -d | grep -q ."
  check "$point: the long job's final parameters are bitwise equal to the undisturbed run's" bitwise "$long"
  echo "     $point: $((SECONDS - t0)) s"
}
"$COORD_BIN" --list_kill_points | awk -F'\t' -v re="$ONLY" '$1 ~ /^coordinator\.preempt\./ && $1 ~ re {print $1}' >"$TMP/points"
check "the coordinator lists the preemption's kill points ($(wc -l <"$TMP/points"))" [ "$(wc -l <"$TMP/points")" -ge 1 ]
while read -r -u 3 point; do crash "$point" || check "$point: the crash test ran" false; done 3<"$TMP/points"

echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]
