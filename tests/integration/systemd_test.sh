#!/usr/bin/env bash
# The systemd units (deploy/systemd) pass `systemd-analyze verify` with no warning at all (it
# exits 0 on unknown keys or bad values, so any output is a failure), pointed at this build's
# binaries; and a daemon started as systemd would start it (NOTIFY_SOCKET) announces READY=1.
# Usage: systemd_test.sh BUILD_DIR
set -uo pipefail
BUILD="$(cd "$1" && pwd)"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
fail=0; passed=0
check() { local n="$1"; shift; if "$@"; then echo "ok   $n"; passed=$((passed + 1)); else echo "FAIL $n"; fail=$((fail + 1)); fi; }
if ! command -v systemd-analyze >/dev/null; then
  echo "SKIP: systemd-analyze is not installed (scripts/setup.sh installs systemd)"; exit 77
fi
for f in "$ROOT"/deploy/systemd/*.service "$ROOT"/deploy/systemd/*.target; do
  name=$(basename "$f"); role=${name#gantry-}; role=${role%.service}
  sed "s|/usr/local/bin/gantry-$role|$BUILD/$role/gantry-$role|" "$f" >"$TMP/$name"
done
out=$(cd "$TMP" && systemd-analyze verify ./*.service ./*.target 2>&1); rc=$?
[ -n "$out" ] && echo "$out" | sed 's/^/     /'
check "systemd-analyze verify: the three units and gantry.target, no warning" bash -c "[ $rc -eq 0 ] && [ -z \"\$1\" ]" _ "$out"
printf '[Service]\nRestart=sometimes\n' >"$TMP/bad.service"
bad=$(cd "$TMP" && systemd-analyze verify ./bad.service 2>&1)
check "(the check can fail: a bad value is reported)" bash -c "[ -n \"\$1\" ]" _ "$bad"
# Readiness: the coordinator, run with NOTIFY_SOCKET, sends READY=1 once it serves.
python3 - "$BUILD/coordinator/gantry-coordinator" "$TMP" <<'PY'
import os, socket, subprocess, sys
binary, tmp = sys.argv[1], sys.argv[2]
path = os.path.join(tmp, "notify")
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
s.settimeout(20)
p = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--metrics_listen", "127.0.0.1:0", "--data_dir", os.path.join(tmp, "db")],
                     env=dict(os.environ, NOTIFY_SOCKET=path), stderr=subprocess.DEVNULL)
try:
    msg = s.recv(512).decode()
    p.terminate()
    p.wait(20)
    stop = s.recv(512).decode()
finally:
    p.kill()
ok = msg.startswith("READY=1\nSTATUS=serving gRPC on port ") and stop == "STOPPING=1"
print(("ok   " if ok else "FAIL ") + "the coordinator tells systemd READY=1 (" + msg.replace("\n", " | ") + ") and STOPPING=1 on SIGTERM")
sys.exit(0 if ok else 1)
PY
[ $? -eq 0 ] && passed=$((passed + 1)) || fail=$((fail + 1))
echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]
