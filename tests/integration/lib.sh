# Shared by the cluster integration tests (source it after setting BUILD, ROOT, TMP): the
# binaries, cleanup of the cluster and of extra daemons, check and wait_for.
CLI="$BUILD/cli/gantry"; TRAIN="$BUILD/cli/gantry-train"
export GANTRY_BIN="$BUILD"
cleanup() {
  bash "$ROOT/deploy/local/cluster.sh" stop --dir "$TMP/cluster" >/dev/null 2>&1
  if [ -f "$TMP/extra.pids" ]; then
    for pid in $(cat "$TMP/extra.pids"); do kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
  fi
  [ -n "${KEEP_TMP:-}" ] && { echo "kept $TMP"; return; }
  rm -rf "$TMP"
}
trap cleanup EXIT
fail=0; passed=0
check() { local n="$1"; shift; if "$@"; then echo "ok   $n"; passed=$((passed + 1)); else echo "FAIL $n"; fail=$((fail + 1)); fi; }
# as_planned JOB YAML DP TP PP: every rank of JOB held the model-state bytes `gantry plan YAML
# --ranks` gives it within 10%, and exactly its activation bytes (from the line each worker
# logs when its part of a job ends). Names the rank and the bytes that differ.
as_planned() {
  "$CLI" plan "$2" --ranks | awk '/^per rank, in bytes/ {t = 1; next} t && $1 ~ /^[0-9]+$/ {print "plan", $1, $2, $4 + $5 + $6, $7}' >"$TMP/$1.plan"
  grep -h "job $1: rank [0-9]* held at the end" "$TMP"/cluster/worker*.log |
    sed -E 's/.*rank ([0-9]+) held at the end: .* = ([0-9]+) bytes; activations ([0-9]+),.*/held \1 \2 \3/' >>"$TMP/$1.plan"
  awk -v dp="$3" -v tp="$4" -v pp="$5" '
    $1 == "plan" {state[$2 " " $3] = $4; act[$2 " " $3] = $5; next}
    $1 == "held" {
      n++; k = int($2 / (dp * tp)) " " ($2 % tp)
      if (!(k in state)) { print "rank " $2 ": no planned row " k; bad = 1; next }
      d = $3 / state[k] - 1; if (d < 0) d = -d
      if (d > 0.10) { print "rank " $2 ": held " $3 " bytes of model state, planned " state[k]; bad = 1 }
      if ($4 != act[k]) { print "rank " $2 ": held " $4 " bytes of activations, planned " act[k]; bad = 1 }
    }
    END { if (n != dp * tp * pp) { print n " ranks logged, want " dp * tp * pp; bad = 1 }; exit bad }' "$TMP/$1.plan"
}
wait_for() {  # wait_for SECONDS COMMAND...: until COMMAND succeeds
  local end=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -ge "$end" ] && return 1; sleep 0.1; done
}

# Killing and restarting the daemons of deploy/local/cluster.sh's cluster in place (the
# fault tests). Each spawn_* starts the replacement in the background of this shell (so that
# `wait $SPAWNED` gives its exit status; variables set before the call, GANTRY_KILL_AT=...,
# reach it), its log appended to LOG (default: the cluster's log of that daemon), its ready
# file written anew; it records the pid in extra.pids (cleanup stops it) and in SPAWNED.
# Each restart_* spawns one with its stdout away from the caller's, so that $(restart_...)
# returns, and prints the pid.
ready_port() { sed "s/.*\"$2\": \([0-9]*\).*/\1/" "$1"; }  # ready_port FILE KEY
kill9() { kill -9 "$1" 2>/dev/null; wait "$1" 2>/dev/null; true; }
spawn_coordinator() {  # spawn_coordinator PORT [LOG]
  rm -f "$TMP/cluster/coordinator.ready"
  "$BUILD/coordinator/gantry-coordinator" --listen "127.0.0.1:$1" --metrics_listen 127.0.0.1:0 \
    --data_dir "$TMP/cluster/coordinator" --ready_file "$TMP/cluster/coordinator.ready" \
    >/dev/null 2>>"${2:-$TMP/cluster/coordinator.log}" &
  SPAWNED=$!; echo $SPAWNED >>"$TMP/extra.pids"
}
spawn_shardserver() {  # spawn_shardserver NAME PORT [LOG]: NAME is shardserver, shardserver2, ...
  rm -f "$TMP/cluster/$1.ready"
  "$BUILD/shardserver/gantry-shardserver" --listen "127.0.0.1:$2" --metrics_listen 127.0.0.1:0 \
    --data_dir "$TMP/cluster/$1" --coordinator "$GANTRY_COORDINATOR" --ready_file "$TMP/cluster/$1.ready" \
    >/dev/null 2>>"${3:-$TMP/cluster/$1.log}" &
  SPAWNED=$!; echo $SPAWNED >>"$TMP/extra.pids"
}
restart_coordinator() { spawn_coordinator "$1"; echo "$SPAWNED"; }  # restart_coordinator PORT
restart_shardserver() { spawn_shardserver "$1" "$2"; echo "$SPAWNED"; }  # restart_shardserver NAME PORT
restart_worker() {  # restart_worker N: a new gantry-worker in worker N's place
  (cd "$ROOT" && exec "$BUILD/worker/gantry-worker" --coordinator "$GANTRY_COORDINATOR" --work_dir "$TMP/cluster/worker$1" \
    --metrics_listen 127.0.0.1:0 --threads 1 --host "$(hostname)-w$1") >/dev/null 2>>"$TMP/cluster/worker$1.log" &
  echo $! >>"$TMP/extra.pids"; echo $!
}
gone() { [ ! -e "/proc/$1" ] || grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }  # exited (a zombie counts)
stop_pid() {  # stop_pid PID: SIGTERM, until it is gone (10 s at most)
  kill -TERM "$1" 2>/dev/null
  wait_for 10 gone "$1" || { echo "     $1 did not stop on SIGTERM: SIGKILL"; kill -9 "$1" 2>/dev/null; }
  wait "$1" 2>/dev/null; true
}
steps_done() { "$CLI" describe "$1" 2>/dev/null | sed -n 's/^Steps: *\([0-9]*\)\/.*/\1/p'; }
