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
wait_for() {  # wait_for SECONDS COMMAND...: until COMMAND succeeds
  local end=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -ge "$end" ] && return 1; sleep 0.1; done
}

# Killing and restarting the daemons of deploy/local/cluster.sh's cluster in place (the
# fault tests). Each restart_* starts the replacement in the background (its stdout away from
# the caller's, so that $(restart_...) returns), records its pid in extra.pids (cleanup stops
# it) and prints the pid.
ready_port() { sed "s/.*\"$2\": \([0-9]*\).*/\1/" "$1"; }  # ready_port FILE KEY
kill9() { kill -9 "$1" 2>/dev/null; wait "$1" 2>/dev/null; true; }
restart_coordinator() {  # restart_coordinator PORT
  "$BUILD/coordinator/gantry-coordinator" --listen "127.0.0.1:$1" --metrics_listen 127.0.0.1:0 \
    --data_dir "$TMP/cluster/coordinator" >/dev/null 2>>"$TMP/cluster/coordinator.log" &
  echo $! >>"$TMP/extra.pids"; echo $!
}
restart_shardserver() {  # restart_shardserver NAME PORT: NAME is shardserver, shardserver2, ...
  "$BUILD/shardserver/gantry-shardserver" --listen "127.0.0.1:$2" --metrics_listen 127.0.0.1:0 \
    --data_dir "$TMP/cluster/$1" --coordinator "$GANTRY_COORDINATOR" >/dev/null 2>>"$TMP/cluster/$1.log" &
  echo $! >>"$TMP/extra.pids"; echo $!
}
restart_worker() {  # restart_worker N: a new gantry-worker in worker N's place
  (cd "$ROOT" && exec "$BUILD/worker/gantry-worker" --coordinator "$GANTRY_COORDINATOR" --work_dir "$TMP/cluster/worker$1" \
    --metrics_listen 127.0.0.1:0 --threads 1 --host "$(hostname)-w$1") >/dev/null 2>>"$TMP/cluster/worker$1.log" &
  echo $! >>"$TMP/extra.pids"; echo $!
}
steps_done() { "$CLI" describe "$1" 2>/dev/null | sed -n 's/^Steps: *\([0-9]*\)\/.*/\1/p'; }
