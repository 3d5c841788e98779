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
