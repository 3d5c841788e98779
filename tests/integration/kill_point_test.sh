#!/usr/bin/env bash
# Kill-point crash test (CTest label integration): every kill point of a checkpoint commit
# (common/kill_point.h), as the daemons list them (--list_kill_points, so that a new one
# cannot be missed), on a local cluster of real daemons. For each point, a job of 6 steps
# checkpoints at steps 2, 4 and 6 with the daemon armed to die by SIGKILL the second time it
# reaches the point: during the commit of step 4. The worker is then frozen (SIGSTOP, so
# that the job cannot write step 4 again while the state the crash left is checked) and the
# daemon restarted. Then:
#   - the daemon died at that point, by SIGKILL;
#   - the checkpoint of step 2 is listed and its files are byte-identical to those of an
#     undisturbed run of the same spec (manifest.json but for the job id and generation);
#   - step 4 is invisible when the point is before the commit point, and listed and
#     byte-identical when after it (as --list_kill_points declares);
#   - the worker thawed, the job reaches SUCCEEDED (re-placed, it resumes from step 2 or 4,
#     the newest whole checkpoint; a job that was not re-placed goes on), and its final
#     checkpoint is byte-identical to the undisturbed run's.
# The shard server's points run on a cluster with one shard server (its commit record is
# then the checkpoint's commit point), the coordinator's on one with two (so that it can
# die between the two servers' commits). With one rank, each point is reached once per
# checkpoint (one WriteChunks stream and one commit per server); a point reached more often
# would kill the commit of step 2 instead, and the test fails on step 2.
# Usage: kill_point_test.sh BUILD_DIR [REGEX]  (REGEX: only the points it matches)
set -uo pipefail
BUILD="$(cd "$1" && pwd)"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="$(mktemp -d)"
source "$ROOT/tests/integration/lib.sh"
COORD_BIN="$BUILD/coordinator/gantry-coordinator"; SHARD_BIN="$BUILD/shardserver/gantry-shardserver"
ONLY="${2:-.}"

"$TRAIN" prepare --out-dir "$TMP/data" /usr/share/games/fortunes >/dev/null 2>&1 || { echo "FAIL prepare"; exit 1; }
cat >"$TMP/job.yaml" <<YAML
name: crash
model: {n_layer: 2, n_head: 4, n_embd: 256, vocab_size: 256, seq_len: 128}
data: {train: $TMP/data/train.bin, shuffle: true}
train: {steps: 6, micro_batch: 8, global_batch: 8, lr: 3.0e-3, warmup: 1, seed: 11}
checkpoint: {every: 2, dir: $TMP/unused}
scheduling: {max_restarts: 10}
YAML
# Steps of about 0.1 s: the coordinator's commit of step 2 (milliseconds) has long landed
# when the worker starts uploading step 4, so the points on the upload path meet step 4 with
# step 2 whole. (Should it not have, the checks below follow what the servers hold.)

registered() { [ "$(grep -c 'registered with coordinator' "$1")" -ge 1 ]; }  # registered LOG
listed() { "$CLI" checkpoints "$1" 2>/dev/null | awk 'NR > 1 {print $1}' | tr '\n' ' '; }  # listed JOB: "2 4 "
has_step() { case " $(listed "$1")" in *" $2 "*) return 0 ;; *) return 1 ;; esac; }  # has_step JOB STEP
# same_files DIR REF: the same file names, each byte-identical; manifest.json after dropping
# the writer's job_id and generation (the one field that differs between the two runs).
same_files() {
  [ "$(cd "$1" && ls | sort)" = "$(cd "$2" && ls | sort)" ] || { echo "     files differ: $(ls "$1" | tr '\n' ' ') vs $(ls "$2" | tr '\n' ' ')"; return 1; }
  local f
  for f in $(cd "$1" && ls); do
    if [ "$f" = manifest.json ]; then
      python3 - "$1/$f" "$2/$f" <<'PY' || return 1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for m in (a, b):
    m.pop("job_id", None); m.pop("generation", None)
if a != b:
    print(f"     {sys.argv[1]} differs from {sys.argv[2]}"); sys.exit(1)
PY
    else
      cmp -s "$1/$f" "$2/$f" || { echo "     $1/$f differs from $2/$f"; return 1; }
    fi
  done
}
download() { rm -rf "$3"; "$CLI" download "$1" --step "$2" -o "$3" >/dev/null; }  # download JOB STEP DIR

# start_cluster SHARDS: a cluster with one worker, and the reference run (undisturbed) of the
# job, its checkpoints downloaded to $TMP/ref/STEP.
start_cluster() {
  SHARDS=$1
  bash "$ROOT/deploy/local/cluster.sh" start --dir "$TMP/cluster" --workers 1 --shardservers "$1" --threads 1 >/dev/null || exit 1
  source "$TMP/cluster/env"
  CPORT=${GANTRY_COORDINATOR##*:}
  mapfile -t PIDS <"$TMP/cluster/pids"  # coordinator, shard servers, the worker
  COORD_PID=${PIDS[0]}; SHARD_PID=${PIDS[1]}; WORKER_PID=${PIDS[$((1 + $1))]}
  SPORT=$(ready_port "$TMP/cluster/shardserver.ready" grpc_port)
  REF=$("$CLI" submit "$TMP/job.yaml") && "$CLI" watch "$REF" >/dev/null || { echo "FAIL the reference run ($REF)"; exit 1; }
  rm -rf "$TMP/ref"
  for s in 2 4 6; do download "$REF" $s "$TMP/ref/$s" || { echo "FAIL the reference run ($REF) has no checkpoint $s"; exit 1; }; done
  echo "     cluster of $1 shard server(s); reference run $REF: checkpoints $(listed "$REF")"
}
stop_cluster() {
  for pid in $COORD_PID $SHARD_PID; do stop_pid "$pid"; done
  bash "$ROOT/deploy/local/cluster.sh" stop --dir "$TMP/cluster" >/dev/null 2>&1
  rm -rf "$TMP/cluster"
}

# respawn DAEMON LOG: a coordinator or the (first) shard server in its place, on its port;
# GANTRY_KILL_AT set by the caller arms it. Waits until it serves (and for a shard server,
# has registered); sets the daemon's pid.
respawn() {
  if [ "$1" = coordinator ]; then
    spawn_coordinator "$CPORT" "$2"; COORD_PID=$SPAWNED
    wait_for 30 test -s "$TMP/cluster/coordinator.ready" || { echo "     the coordinator did not start: $(tail -3 "$2")"; return 1; }
  else
    spawn_shardserver shardserver "$SPORT" "$2"; SHARD_PID=$SPAWNED
    wait_for 30 registered "$2" || { echo "     the shard server did not register: $(tail -3 "$2")"; return 1; }
  fi
}
# The cluster serves again: the worker attached, and every shard server registered (the
# reference's last checkpoint is listed on all of them).
cluster_ready() {
  "$CLI" workers 2>/dev/null | grep -q ' idle ' &&
    [ "$("$CLI" checkpoints "$REF" 2>/dev/null | awk '$1 == 6 {print $5}' | tr ',' '\n' | grep -c .)" -eq "$SHARDS" ]
}

# crash POINT PHASE DAEMON: the test of one kill point (see the top).
crash() {
  local point=$1 phase=$2 daemon=$3 log="$TMP/logs/$1" t0=$SECONDS pid job rc newest=2
  [ "$phase" = after-commit ] && newest=4
  mkdir -p "$TMP/logs"; : >"$log.armed"; : >"$log.after"
  if [ "$daemon" = coordinator ]; then stop_pid "$COORD_PID"; else stop_pid "$SHARD_PID"; fi
  GANTRY_KILL_AT="$point@2" respawn "$daemon" "$log.armed" || return 1
  pid=$([ "$daemon" = coordinator ] && echo "$COORD_PID" || echo "$SHARD_PID")
  wait_for 30 cluster_ready || { echo "     the cluster is not ready after the armed $daemon started"; return 1; }
  job=$("$CLI" submit "$TMP/job.yaml") || return 1
  # The commit of step 4 reaches the point: the daemon dies.
  if ! wait_for 60 grep -q "kill point $point reached (hit 2): SIGKILL" "$log.armed"; then
    echo "     $daemon never reached $point a second time (job $job: $(listed "$job"))"; stop_pid "$pid"; return 1
  fi
  { wait "$pid"; rc=$?; } 2>/dev/null  # (bash would report the kill)
  kill -STOP "$WORKER_PID"
  check "$point: the $daemon died there by SIGKILL (exit status $rc)" [ "$rc" -eq 137 ]
  respawn "$daemon" "$log.after" || { kill -CONT "$WORKER_PID"; return 1; }
  wait_for 30 has_step "$job" 2
  # The worker uploads step 4 while the coordinator commits step 2: a shard server that dies
  # in that upload can die before step 2's commit reaches it (the coordinator then says it
  # was not committed). Step 2 is then absent, and nothing may be listed; or its commit
  # landed and only the reply was lost, and it must be whole. The job resumes from what is.
  if [ "$daemon" = shardserver ] && grep -q "checkpoint of $job step 2 not committed" "$TMP/cluster/coordinator.log" &&
     ! has_step "$job" 2; then
    echo "     $point: the shard server died before the commit of step 2 reached it: no checkpoint before the crash"
    newest=0
    check "$point: after the restart no checkpoint is listed, step 2's parts were never committed" \
      bash -c "[ -z \"\$('$CLI' checkpoints $job 2>/dev/null | awk 'NR > 1')\" ]"
  else
    check "$point: after the restart the checkpoint of step 2 is listed (listed: $(listed "$job"))" has_step "$job" 2
    check "$point: ... and its files are byte-identical to the undisturbed run's" \
      bash -c "$(declare -f download same_files); CLI='$CLI'; download $job 2 '$TMP/got2' && same_files '$TMP/got2' '$TMP/ref/2'"
  fi
  if [ "$phase" = before-commit ]; then
    check "$point: the interrupted checkpoint of step 4 is invisible" bash -c "! '$CLI' checkpoints $job | grep -q '^4 '"
  else
    check "$point: the checkpoint of step 4, committed before the crash, is listed and byte-identical" \
      bash -c "$(declare -f download same_files); CLI='$CLI'; download $job 4 '$TMP/got4' && same_files '$TMP/got4' '$TMP/ref/4'"
  fi
  kill -CONT "$WORKER_PID"
  check "$point: the job resumes and reaches SUCCEEDED" wait_for 120 bash -c "'$CLI' describe $job | grep -q 'State:      SUCCEEDED'"
  "$CLI" watch "$job" >"$TMP/$job.events" 2>&1
  if [ "$newest" -eq 0 ]; then
    check "$point: a re-placement started afresh (there was no whole checkpoint)" bash -c \
      "! grep -q 'job $job: rank 0 resuming from' '$TMP'/cluster/worker*.log"
  else
    check "$point: a re-placement resumed from the newest whole checkpoint, step $newest" bash -c \
      "! grep -q 'RESTARTING\$' '$TMP/$job.events' || grep -h -m1 'job $job: rank 0 resuming from' '$TMP'/cluster/worker*.log | grep -q 'of step $newest '"
  fi
  check "$point: its final checkpoint is byte-identical to the undisturbed run's" \
    bash -c "$(declare -f download same_files); CLI='$CLI'; download $job 6 '$TMP/got6' && same_files '$TMP/got6' '$TMP/ref/6'"
  echo "     $point: $((SECONDS - t0)) s ($(grep -c 'RESTARTING$' "$TMP/$job.events") re-placements; checkpoints $(listed "$job"))"
}

run_points() {  # run_points BINARY DAEMON SHARDS: every kill point the binary lists, on a cluster
  local point phase
  "$1" --list_kill_points >"$TMP/$2.points"
  check "$2: it lists kill points ($(wc -l <"$TMP/$2.points"))" [ "$(wc -l <"$TMP/$2.points")" -ge 2 ]
  # (The preemption's points, coordinator.preempt.*, are teams_test.sh's: not a commit's.)
  awk -F'\t' -v re="$ONLY" '$1 ~ re && $1 !~ /^coordinator\.preempt\./' "$TMP/$2.points" >"$TMP/$2.run"
  [ -s "$TMP/$2.run" ] || return 0
  start_cluster "$3"
  while IFS=$'\t' read -r -u 3 point phase _; do
    crash "$point" "$phase" "$2" || check "$point: the crash test ran" false
  done 3<"$TMP/$2.run"
  stop_cluster
}

run_points "$SHARD_BIN" shardserver 1
run_points "$COORD_BIN" coordinator 2

echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]
