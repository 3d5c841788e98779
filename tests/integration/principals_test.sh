#!/usr/bin/env bash
# Identities end to end (common/principals.h) on the coordinator binary, serving TLS with
# mutual TLS and a principals file: `gantry whoami` answers a user's token, a worker's, and,
# with no token, the identity the client certificate names; an unknown token is refused
# (UNAUTHENTICATED, the token in neither the error nor the daemon's log); the file rewritten
# and SIGHUP: a revoked token is refused, a new one accepted; a bad file and SIGHUP: the error
# logged with its line and field, the previous file in force; a bad file, or a principals file
# without TLS, at start: exit 2 naming why. `gantry principals hash` is sha256sum's digest.
# The cluster token beside the file is one admin; without the file its refusals read as
# before. A certificate's SAN names an identity too; one naming two is refused. Authorisation
# through the CLI: a job records its owner (jobs --owner, --mine, describe), a viewer may not
# cancel it, a worker may not list jobs. Quotas (the file's teams:): `gantry quota` shows a
# user their team's row and a viewer every team's, refuses a worker and another team's row, and
# alice's job waits for her team's quota, saying so. The shard server takes the file too: loads it, reloads it on SIGHUP, refuses a bad
# one at start.
# Usage: principals_test.sh GANTRY_COORDINATOR GANTRY GANTRY_SHARDSERVER
set -uo pipefail
COORD="$1"; CLI="$2"; SHARD="$3"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="$(mktemp -d)"
PID=""
cleanup() { [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
fail=0; passed=0
check() { local n="$1"; shift; if "$@"; then echo "ok   $n"; passed=$((passed + 1)); else echo "FAIL $n"; fail=$((fail + 1)); fi; }
wait_for() {  # wait_for SECONDS COMMAND...: until COMMAND succeeds
  local end=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -ge "$end" ] && return 1; sleep 0.1; done
}
has() { local f="$1"; shift; for l in "$@"; do grep -qxF "$l" "$f" || { echo "     $f lacks '$l':"; sed 's/^/     /' "$f"; return 1; }; done; }
command -v openssl >/dev/null || { echo "SKIP: openssl is not installed"; exit 77; }
bash "$ROOT/deploy/tls/make-test-ca.sh" "$TMP/tls" >/dev/null || { echo "FAIL make-test-ca"; exit 1; }
SERVER_TLS=(GANTRY_TLS_CA="$TMP/tls/ca.pem" GANTRY_TLS_CERT="$TMP/tls/server.pem" GANTRY_TLS_KEY="$TMP/tls/server.key"
            GANTRY_TLS_CLIENT_CA="$TMP/tls/ca.pem")
CLIENT_TLS=(GANTRY_TLS_CA="$TMP/tls/ca.pem" GANTRY_TLS_CERT="$TMP/tls/client.pem" GANTRY_TLS_KEY="$TMP/tls/client.key")
# as TOKEN ARGS...: the CLI over TLS with the test client certificate (CN "gantry client"),
# sending TOKEN ("": none).
as() {
  local token="$1"; shift
  if [ -n "$token" ]; then env "${CLIENT_TLS[@]}" GANTRY_TOKEN="$token" "$CLI" "$@"; else env "${CLIENT_TLS[@]}" "$CLI" "$@"; fi
}

ALICE=$(openssl rand -hex 16); BOB=$(openssl rand -hex 16); POOL=$(openssl rand -hex 16); DAVE=$(openssl rand -hex 16)
WRONG=$(openssl rand -hex 16)
sha() { printf '%s\n' "$1" | "$CLI" principals hash; }
check "gantry principals hash prints sha256sum's digest of the token" \
  [ "$(sha "$ALICE")" = "$(printf '%s' "$ALICE" | sha256sum | cut -d' ' -f1)" ]
"$CLI" principals hash </dev/null 2>/dev/null; rc=$?
check "principals hash with nothing on stdin: exit 2" [ "$rc" -eq 2 ]
user() { printf '  - name: %s\n    team: %s\n    role: %s\n    token_sha256: %s\n' "$1" "$2" "$3" "$(sha "$4")"; }
write() { cat >"$TMP/p.new"; mv "$TMP/p.new" "$TMP/principals.yaml"; }  # a reader sees the old file or the new
{ echo "users:"; user alice vision user "$ALICE"; user bob ops admin "$BOB"
  printf '  - name: carol\n    team: nlp\n    role: viewer\n    certificate: gantry client\n'
  printf 'services:\n  - name: gpu-pool-a\n    kind: worker\n    token_sha256: %s\n' "$(sha "$POOL")"
  printf 'teams:\n  - name: vision\n    quota: {cpu: 0}\n    cohort: research\n    borrowing_limit: {cpu: 3}\n    lending_limit: {cpu: 0}\n'
  printf '  - name: nlp\n    max_running_jobs: 2\n'; } | write

env "${SERVER_TLS[@]}" "$COORD" --listen 127.0.0.1:0 --metrics_listen 127.0.0.1:0 --data_dir "$TMP/coord" \
  --ready_file "$TMP/ready" --principals "$TMP/principals.yaml" 2>>"$TMP/coord.log" &
PID=$!
wait_for 20 test -s "$TMP/ready" || { echo "coordinator not ready:"; cat "$TMP/coord.log"; exit 1; }
export GANTRY_COORDINATOR="127.0.0.1:$(sed 's/.*"grpc_port": \([0-9]*\).*/\1/' "$TMP/ready")"

as "$ALICE" whoami >"$TMP/alice.txt" 2>&1
check "whoami with alice's token: alice, a user of team vision, role user, by token" \
  has "$TMP/alice.txt" "name:  alice" "kind:  user" "team:  vision" "role:  user" "by:    token"
as "$POOL" -o json whoami >"$TMP/pool.json" 2>&1
check "whoami with the worker's token: kind worker (-o json)" \
  python3 -c "import json; d=json.load(open('$TMP/pool.json')); assert d['name']=='gpu-pool-a' and d['kind']=='worker', d"
as "" whoami >"$TMP/carol.txt" 2>&1
check "whoami with no token: the identity the client certificate names (carol, viewer)" \
  has "$TMP/carol.txt" "name:  carol" "role:  viewer" "by:    certificate"
as "$WRONG" whoami >"$TMP/e1" 2>&1; rc=$?
check "an unknown token: UNAUTHENTICATED, exit 1, the token not shown" \
  bash -c "[ $rc -eq 1 ] && grep -q 'UNAUTHENTICATED: unknown token' '$TMP/e1' && ! grep -qF '$WRONG' '$TMP/e1'"
as "$WRONG" jobs >"$TMP/e1b" 2>&1; rc=$?
check "an unknown token on the job API too (jobs)" bash -c "[ $rc -eq 1 ] && grep -q UNAUTHENTICATED '$TMP/e1b'"
as "$ALICE" jobs >"$TMP/jobs.txt" 2>&1; rc=$?
check "alice's token lists jobs" [ "$rc" -eq 0 ]

# Authorisation (common/authz.h) through the CLI: alice's job records her; the admin filters by
# owner and sees the columns; a viewer may not cancel it, a worker may not list jobs.
printf 'name: tiny\nmodel: {n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 16}\ndata: {train: /nonexistent/train.bin}\ntrain: {steps: 10, micro_batch: 2, lr: 1.0e-3}\n' >"$TMP/job.yaml"
JOB=$(as "$ALICE" submit "$TMP/job.yaml" 2>"$TMP/submit.err")
check "alice submits a job" bash -c "[ -n '$JOB' ] || { cat '$TMP/submit.err'; false; }"
as "$BOB" jobs --owner alice >"$TMP/owned.txt" 2>&1
check "jobs --owner alice (the admin): her job, with OWNER and TEAM" \
  bash -c "head -1 '$TMP/owned.txt' | grep -q 'OWNER *TEAM' && grep -q '^$JOB .* alice *vision ' '$TMP/owned.txt'"
as "$BOB" jobs --mine >"$TMP/mine.txt" 2>&1
check "jobs --mine (the admin): not alice's job" bash -c "! grep -q '$JOB' '$TMP/mine.txt'"
as "" cancel "$JOB" >"$TMP/e2" 2>&1; rc=$?
check "the viewer (by certificate) may not cancel it: PERMISSION_DENIED naming who, what and which" \
  bash -c "[ $rc -eq 1 ] && grep -qF 'PERMISSION_DENIED: user carol (team nlp, role viewer) may not cancel job $JOB (owner alice, team vision)' '$TMP/e2'"
as "$POOL" jobs >"$TMP/e3" 2>&1; rc=$?
check "a worker identity may not list jobs" \
  bash -c "[ $rc -eq 1 ] && grep -qF 'PERMISSION_DENIED: worker gpu-pool-a may not list the jobs of the cluster' '$TMP/e3'"
as "$BOB" describe "$JOB" >"$TMP/describe.txt" 2>&1
check "describe shows the owner" grep -qx 'Owner:      alice (team vision)' "$TMP/describe.txt"

# Quotas: vision's 0 cpu slots hold alice's job once a pass has run (after the start's grace).
vision_held() { as "$ALICE" quota 2>&1 | grep -qE '^vision +cpu +0 +0 +0 +research +0 +3 +0 +0\.00 +0 +- +1 +1$'; }
check "quota (alice): her team's row, its quota of 0 cpu slots, none borrowed, its cohort lending none, its limits (borrowing 3, lending 0), her job queued and held" \
  wait_for 20 vision_held
as "$ALICE" quota >"$TMP/quota.txt" 2>&1
check "quota (alice): the header, and no other team's row" bash -c \
  "head -1 '$TMP/quota.txt' | grep -qE '^TEAM +DEVICE +USED +QUOTA +BORROWED +COHORT +LENDABLE +BORROW-LIMIT +LEND-LIMIT +SHARE +RUNNING +CAP +QUEUED +HELD$' && [ \$(wc -l <'$TMP/quota.txt') -eq 2 ]"
as "$ALICE" describe "$JOB" >"$TMP/describe2.txt" 2>&1
check "describe says why the job waits, and that its cohort has nothing to lend" \
  grep -qx "Waiting:    team vision's quota of 0 cpu slots is less than the 1 this job needs; its cohort research has none idle to lend" "$TMP/describe2.txt"
as "" quota >"$TMP/quota_viewer.txt" 2>&1
check "quota (the viewer): every team, nlp with its cap of 2 running jobs" bash -c \
  "grep -qE '^nlp +- +0 +- +0 +- +- +- +- +0\.00 +0 +2 +0 +0$' '$TMP/quota_viewer.txt' && grep -q '^vision ' '$TMP/quota_viewer.txt'"
as "$ALICE" quota --team nlp >"$TMP/e4" 2>&1; rc=$?
check "quota --team nlp (alice): PERMISSION_DENIED naming the team" bash -c \
  "[ $rc -eq 1 ] && grep -qF 'PERMISSION_DENIED: user alice (team vision, role user) may not read the quota of team nlp' '$TMP/e4'"
as "$POOL" quota >"$TMP/e5" 2>&1; rc=$?
check "quota (a worker identity): PERMISSION_DENIED" bash -c "[ $rc -eq 1 ] && grep -q PERMISSION_DENIED '$TMP/e5'"

# Revoke alice, add dave; SIGHUP.
{ echo "users:"; user bob ops admin "$BOB"; user dave vision user "$DAVE"
  printf 'services:\n  - name: gpu-pool-a\n    kind: worker\n    token_sha256: %s\n' "$(sha "$POOL")"; } | write
kill -HUP "$PID"
check "SIGHUP: the file is reloaded (logged)" \
  wait_for 20 grep -qF "principals: reloaded $TMP/principals.yaml: 3 identities" "$TMP/coord.log"
as "$ALICE" whoami >"$TMP/e2" 2>&1; rc=$?
check "after the reload alice's revoked token is refused (UNAUTHENTICATED)" bash -c "[ $rc -eq 1 ] && grep -q UNAUTHENTICATED '$TMP/e2'"
as "$DAVE" whoami >"$TMP/dave.txt" 2>&1
check "and dave's new one is accepted" has "$TMP/dave.txt" "name:  dave"

# A bad file: the reload fails, the previous file stays in force.
{ echo "users:"; user bob ops superuser "$BOB"; } | write
kill -HUP "$PID"
check "SIGHUP with a bad file: the error logged with its line and field" wait_for 20 grep -qF \
  "the reload failed, the previous file stays in force: $TMP/principals.yaml:4: users[0].role: unknown role 'superuser'" "$TMP/coord.log"
as "$DAVE" whoami >"$TMP/dave2.txt" 2>&1
as "$ALICE" whoami >"$TMP/e3" 2>&1; rc=$?
check "and the previous file is in force: dave accepted, alice refused" \
  bash -c "grep -qx 'name:  dave' '$TMP/dave2.txt' && [ $rc -eq 1 ] && grep -q UNAUTHENTICATED '$TMP/e3'"
check "the daemon logged the refusals (UNAUTHENTICATED warnings naming the method)" \
  grep -q "WhoAmI from .*UNAUTHENTICATED: unknown token" "$TMP/coord.log"
check "no token reached the daemon's log" \
  bash -c "! grep -qF -e '$ALICE' -e '$BOB' -e '$WRONG' -e '$DAVE' -e '$POOL' '$TMP/coord.log'"
kill -TERM "$PID"; wait "$PID"; rc=$?; PID=""
check "SIGTERM still stops it cleanly (exit 0)" [ "$rc" -eq 0 ]

# The cluster token: one admin beside the file; alone, its refusals as before the file.
start_with() {  # start_with DIR VAR=VALUE [FLAGS...]: a coordinator with the server TLS, VAR and FLAGS; sets PID
  local dir="$1" var="$2"; shift 2
  env "${SERVER_TLS[@]}" "$var" "$COORD" --listen 127.0.0.1:0 --metrics_listen 127.0.0.1:0 --data_dir "$TMP/$dir" \
    --ready_file "$TMP/$dir.ready" "$@" 2>>"$TMP/$dir.log" &
  PID=$!
  wait_for 20 test -s "$TMP/$dir.ready" || { echo "coordinator not ready:"; cat "$TMP/$dir.log"; exit 1; }
  export GANTRY_COORDINATOR="127.0.0.1:$(sed 's/.*"grpc_port": \([0-9]*\).*/\1/' "$TMP/$dir.ready")"
}
stop() { kill -TERM "$PID"; wait "$PID"; PID=""; }
openssl rand -hex 24 >"$TMP/cluster.token"
# The test client certificate: CN "gantry client", SANs DNS:localhost and IP:127.0.0.1.
{ echo "users:"; user bob ops admin "$BOB"; printf '  - name: erin\n    role: viewer\n    certificate: localhost\n'; } | write
start_with both GANTRY_TOKEN_FILE="$TMP/cluster.token" --principals "$TMP/principals.yaml"
as "$(cat "$TMP/cluster.token")" whoami >"$TMP/ct.txt" 2>&1
check "the cluster token beside the file: one admin, by cluster token" \
  has "$TMP/ct.txt" "name:  cluster-token" "role:  admin" "by:    cluster token"
as "$BOB" whoami >"$TMP/bob.txt" 2>&1
check "and the file's tokens as well" has "$TMP/bob.txt" "name:  bob"
as "" whoami >"$TMP/erin.txt" 2>&1
check "a certificate's SAN (DNS:localhost) names erin" has "$TMP/erin.txt" "name:  erin" "by:    certificate"
{ echo "users:"; user bob ops admin "$BOB"; printf '  - name: erin\n    role: viewer\n    certificate: localhost\n'
  printf '  - name: carol\n    role: viewer\n    certificate: gantry client\n'; } | write
kill -HUP "$PID"
wait_for 20 grep -qF "principals: reloaded $TMP/principals.yaml: 3 identities" "$TMP/both.log"
as "" whoami >"$TMP/e6" 2>&1; rc=$?
check "a certificate whose CN and SAN name two identities: UNAUTHENTICATED, naming both" bash -c \
  "[ $rc -eq 1 ] && grep -q 'UNAUTHENTICATED: the client certificate names two identities, carol and erin' '$TMP/e6'"
stop
start_with token_only GANTRY_TOKEN_FILE="$TMP/cluster.token"
env "${CLIENT_TLS[@]}" "$CLI" whoami >"$TMP/e4" 2>&1
as "$WRONG" whoami >"$TMP/e5" 2>&1
as "$(cat "$TMP/cluster.token")" whoami >"$TMP/ct2.txt" 2>&1
check "no file, a cluster token: no token and a wrong one refused as before; the token is the admin" bash -c \
  "grep -q 'UNAUTHENTICATED: this cluster needs its token (GANTRY_TOKEN or GANTRY_TOKEN_FILE)' '$TMP/e4' && \
   grep -q 'UNAUTHENTICATED: wrong cluster token' '$TMP/e5' && grep -qx 'name:  cluster-token' '$TMP/ct2.txt'"
stop

# The shard server: loads the file, reloads it on SIGHUP, refuses a bad one at start.
{ echo "users:"; user bob ops admin "$BOB"
  printf 'services:\n  - name: shard-1\n    kind: shardserver\n    token_sha256: %s\n' "$(sha "$POOL")"; } | write
env "${SERVER_TLS[@]}" "$SHARD" --listen 127.0.0.1:0 --metrics_listen 127.0.0.1:0 --data_dir "$TMP/shard" \
  --ready_file "$TMP/shard.ready" --principals "$TMP/principals.yaml" 2>>"$TMP/shard.log" &
PID=$!
check "the shard server starts with the file" wait_for 20 test -s "$TMP/shard.ready"
check "and says how many identities it holds" grep -qF "principals: $TMP/principals.yaml: 2 identities" "$TMP/shard.log"
{ echo "users:"; user bob ops admin "$BOB"; } | write
kill -HUP "$PID"
check "SIGHUP: the shard server reloads it" \
  wait_for 20 grep -qF "principals: reloaded $TMP/principals.yaml: 1 identities" "$TMP/shard.log"
stop
{ echo "users:"; echo "  - name: bob"; echo "    role: admin"; echo "    token_sha256: $BOB"; } | write
env "${SERVER_TLS[@]}" "$SHARD" --listen 127.0.0.1:0 --metrics_listen 127.0.0.1:0 --data_dir "$TMP/shard" \
  --principals "$TMP/principals.yaml" 2>"$TMP/shard-bad.log"; rc=$?
check "a token where its hash goes: the shard server exits 2, naming the line, not the token" bash -c \
  "[ $rc -eq 2 ] && grep -qF '$TMP/principals.yaml:4: users[0].token_sha256: must be' '$TMP/shard-bad.log' && \
   ! grep -qF '$BOB' '$TMP/shard-bad.log'"
{ echo "users:"; user bob ops superuser "$BOB"; } | write

# At start: a bad file, and a principals file without TLS, are refused (exit 2).
env "${SERVER_TLS[@]}" "$COORD" --listen 127.0.0.1:0 --metrics_listen 127.0.0.1:0 --data_dir "$TMP/coord2" \
  --principals "$TMP/principals.yaml" 2>"$TMP/start.log"; rc=$?
check "a bad file at start: exit 2 naming its line and field" \
  bash -c "[ $rc -eq 2 ] && grep -qF '$TMP/principals.yaml:4: users[0].role: unknown role' '$TMP/start.log'"
GANTRY_PRINCIPALS_FILE="$TMP/principals.yaml" "$COORD" --listen 127.0.0.1:0 --metrics_listen 127.0.0.1:0 \
  --data_dir "$TMP/coord3" 2>"$TMP/plain.log"; rc=$?
check "a principals file (GANTRY_PRINCIPALS_FILE) without TLS: exit 2, said why" \
  bash -c "[ $rc -eq 2 ] && grep -q 'a principals file needs TLS' '$TMP/plain.log'"
echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]
