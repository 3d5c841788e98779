#!/usr/bin/env bash
# A cluster that two teams share (issue 50; docs/operations.md "Users, teams and quotas" and
# "Preemption"), end to end on the cpu backend: a local cluster of two CPU workers and one
# shard server serving TLS with a principals file: users alice and amy of team vision, bob and
# ben of team nlp, an admin (root) and a viewer (vic); vision and nlp have a quota of 1 cpu slot
# each, in cohort research. The daemons use the cluster token (one admin). In turn:
#   - quotas held: with alice's and bob's long-running jobs placed, ben's job waits, its
#     waiting_for naming team nlp at its quota of 1 cpu slot and a cohort with none idle;
#   - fair share: amy's job, submitted after ben's, is placed first when alice's job ends
#     (vision then uses 0 of its quota, nlp 1 of 1: equal priority, the lesser share first);
#   - borrowing, then reclaimed: ben's job borrows vision's idle slot once amy's ends; alice's
#     job within vision's quota reclaims it by preemption: ben's job checkpoints first, waits as
#     PREEMPTED, resumes from that checkpoint, and its final parameters are bitwise equal to an
#     undisturbed run's; gantry_coordinator_preemptions_total counts it;
#   - authorisation: the viewer reads bob's job but may not cancel it, alice (team vision) may
#     not cancel it: PERMISSION_DENIED naming who, what and which;
#   - a token revoked by a reload: bob removed from the file, SIGHUP: his token is refused
#     from then on, and his running job goes on training;
#   - with one worker (the second stopped): past the grace period (the worker frozen: the
#     victim is stopped at its scheduling.preemption_grace_s and resumes from its last committed
#     checkpoint, bitwise equal); and every kill point of the preemption path (coordinator.
#     preempt.*, as the coordinator lists them): the coordinator dies there by SIGKILL and
#     restarts; both jobs reach SUCCEEDED (no job lost), no placement (job, generation) is made
#     twice, and the victim's parameters are bitwise equal.
# About 45 s on 2 cores (shared); each kill point about 5 s (the worker re-attaches within a
# second of a coordinator's restart: worker/agent/agent.cc).
# Usage: teams_test.sh BUILD_DIR [REGEX]  (REGEX: only the kill points it matches)
set -uo pipefail
BUILD="$(cd "$1" && pwd)"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="$(mktemp -d)"
ONLY="${2:-.}"
source "$ROOT/tests/integration/lib.sh"
COORD_BIN="$BUILD/coordinator/gantry-coordinator"
command -v openssl >/dev/null || { echo "SKIP: openssl is not installed (a principals file needs TLS)"; exit 77; }

# TLS, the cluster token (the daemons'), and the principals file.
bash "$ROOT/deploy/tls/make-test-ca.sh" "$TMP/tls" >/dev/null || { echo "FAIL make-test-ca"; exit 1; }
export GANTRY_TLS_CA="$TMP/tls/ca.pem" GANTRY_TLS_CERT="$TMP/tls/server.pem" GANTRY_TLS_KEY="$TMP/tls/server.key"
export GANTRY_TLS_CLIENT_CA="$TMP/tls/ca.pem" GANTRY_TOKEN_FILE="$TMP/tls/token"
export GANTRY_PRINCIPALS_FILE="$TMP/principals.yaml"
for u in ALICE AMY BOB BEN ADMIN VIC; do printf -v "$u" '%s' "$(openssl rand -hex 16)"; done
sha() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
user() { printf '  - name: %s\n    team: %s\n    role: %s\n    token_sha256: %s\n' "$1" "$2" "$3" "$(sha "$4")"; }
principals() {  # principals [USER...]: the file with these users of team nlp (bob, ben) besides the others
  echo "users:"
  user alice vision user "$ALICE"; user amy vision user "$AMY"
  for u in "$@"; do case $u in bob) user bob nlp user "$BOB" ;; ben) user ben nlp user "$BEN" ;; esac; done
  user root ops admin "$ADMIN"; user vic ops viewer "$VIC"
  printf 'teams:\n  - name: vision\n    quota: {cpu: 1}\n    cohort: research\n'
  printf '  - name: nlp\n    quota: {cpu: 1}\n    cohort: research\n'
}
principals bob ben >"$TMP/principals.yaml"
as() { local token="$1"; shift; GANTRY_TOKEN="$token" "$CLI" "$@"; }  # as TOKEN ARGS...: the CLI as that user

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
job long $STEPS 0 >"$TMP/long.yaml"; job long $STEPS 0 1 >"$TMP/long_grace.yaml"
job short 5 0 >"$TMP/short.yaml"; job urgent 5 10 >"$TMP/urgent.yaml"
# A job that trains until it is cancelled (a tiny model: it holds its team's slot).
cat >"$TMP/spin.yaml" <<YAML
name: spin
model: {n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 16}
data: {train: $TMP/data/train.bin}
train: {steps: 100000000, micro_batch: 2, lr: 1.0e-3}
YAML

bash "$ROOT/deploy/local/cluster.sh" start --dir "$TMP/cluster" --workers 2 --shardservers 1 --threads 1 >/dev/null || exit 1
source "$TMP/cluster/env"
CPORT=${GANTRY_COORDINATOR##*:}
mapfile -t PIDS <"$TMP/cluster/pids"  # coordinator, shard server, worker 1, worker 2
COORD_PID=${PIDS[0]}; SHARD_PID=${PIDS[1]}; WORKER_PID=${PIDS[2]}; WORKER2_PID=${PIDS[3]}

has_checkpoint() { "$CLI" checkpoints "$1" 2>/dev/null | grep -q "^$2 "; }  # has_checkpoint JOB STEP
state_is() { "$CLI" describe "$1" 2>/dev/null | grep -q "^State:      $2"; }
at_step() { local s; s=$(steps_done "$1"); [ "${s:-0}" -ge "$2" ]; }
succeeded() { state_is "$1" SUCCEEDED && state_is "$2" SUCCEEDED; }
waiting() { "$CLI" describe "$1" 2>/dev/null | grep -qxF "Waiting:    $2"; }  # waiting JOB WHY
bitwise() {  # bitwise JOB: its final parameters are the undisturbed run's
  rm -rf "$TMP/got"; "$CLI" export "$1" --step $STEPS -o "$TMP/got" >/dev/null && cmp -s "$TMP/got/model.safetensors" "$TMP/ref/model.safetensors"
}
preemptions() {  # the coordinator's gantry_coordinator_preemptions_total (every team)
  curl -s "http://127.0.0.1:$(ready_port "$TMP/cluster/coordinator.ready" metrics_port)/metrics" |
    awk '/^gantry_coordinator_preemptions_total/ {n += $2} END {print n + 0}'
}
placed_line() { grep -n "job $1 generation $2 placed" "$TMP/cluster/coordinator.log" | head -1 | cut -d: -f1; }

t0=$SECONDS
REF=$(as "$ADMIN" submit "$TMP/long.yaml") && as "$ADMIN" watch "$REF" >/dev/null || { echo "FAIL the undisturbed run ($REF)"; exit 1; }
"$CLI" export "$REF" --step $STEPS -o "$TMP/ref" >/dev/null || { echo "FAIL exporting the undisturbed run"; exit 1; }
echo "     undisturbed run $REF: $((SECONDS - t0)) s"

# 1. Quotas held: each team at its quota of 1 cpu slot, ben's job waits.
t0=$SECONDS
A1=$(as "$ALICE" submit "$TMP/spin.yaml"); B1=$(as "$BOB" submit "$TMP/spin.yaml")
wait_for 30 state_is "$A1" RUNNING; wait_for 30 state_is "$B1" RUNNING
N=$(as "$BEN" submit "$TMP/long.yaml")
check "quotas held: ben's job waits, team nlp at its quota of 1 cpu slot and its cohort with none idle" \
  wait_for 20 waiting "$N" "team nlp at its quota: 1 of 1 cpu slot; its cohort research has none idle to lend"
as "$BEN" quota >"$TMP/quota.txt" 2>&1
check "gantry quota (ben): nlp uses 1 of 1 cpu slot, borrows none, one job queued and held" \
  grep -qE '^nlp +cpu +1 +1 +0 +research +0 +- +- +1\.00 +1 +- +1 +1$' "$TMP/quota.txt"

# 2. Fair share: amy's job (vision) is newer than ben's; when alice's job ends vision uses 0 of
# its quota and nlp 1 of 1, so amy's goes first, though ben's could borrow the freed slot.
V2=$(as "$AMY" submit "$TMP/short.yaml")
wait_for 20 waiting "$V2" "team vision at its quota: 1 of 1 cpu slot; its cohort research has none idle to lend"
as "$ALICE" cancel "$A1" >/dev/null
wait_for 30 state_is "$V2" SUCCEEDED
v2_at=$(placed_line "$V2" 1); n_at=$(placed_line "$N" 1)
check "fair share: amy's job (team vision, share 0) was placed before ben's older one (team nlp, share 1 of 1)" \
  bash -c "[ -n '$v2_at' ] && { [ -z '$n_at' ] || [ '$v2_at' -lt '$n_at' ]; }"

# 3. Borrowing, then reclaimed: ben's job borrows vision's idle slot; alice's job, within
# vision's quota, reclaims it by preemption.
wait_for 30 at_step "$N" 20 || echo "     $N did not reach step 20"
V3=$(as "$ALICE" submit "$TMP/short.yaml")
check "ben's and alice's jobs end SUCCEEDED" wait_for 120 succeeded "$N" "$V3"
as "$ADMIN" watch "$N" >"$TMP/n.events" 2>&1
as "$ADMIN" watch "$V3" >"$TMP/v3.events" 2>&1
grep -E 'borrow|preempt|PREEMPTED|resum' "$TMP/n.events" | sed 's/^/     /'
check "borrowing: ben's job ran on the slot vision lent (its event says so)" \
  grep -q "1 of its 1 cpu slot borrowed from cohort research (beyond team nlp's quota)" "$TMP/n.events"
stop=$(sed -n 's/.*it checkpoints after step \([0-9]*\).*/\1/p' "$TMP/n.events" | head -1)
check "reclaimed: ben's job was asked to checkpoint for alice's, cohort research reclaiming what nlp borrowed" \
  grep -q "preemption requested by job $V3 of alice.*: job $V3 of team vision needs 1 cpu slot within its team's quota and 0 are idle: cohort research reclaims the 1 team nlp borrowed" "$TMP/n.events"
check "its checkpoint of step ${stop:-?} committed before it went PREEMPTED" bash -c \
  "grep -n 'checkpoint of step $stop committed' '$TMP/n.events' | head -1 | cut -d: -f1 >'$TMP/a'; grep -n 'PREEMPTED\$' '$TMP/n.events' | head -1 | cut -d: -f1 >'$TMP/b'; [ -s '$TMP/a' ] && [ -s '$TMP/b' ] && [ \$(cat '$TMP/a') -lt \$(cat '$TMP/b') ]"
check "the PREEMPTED event says who preempted it and that it resumes from that checkpoint" \
  grep -q "preempted by job $V3 of alice.*; the checkpoint of step $stop is committed; its workers are released" "$TMP/n.events"
check "alice's job was placed only after ben's released its worker" bash -c \
  "[ \$(grep -c 'placed: ' '$TMP/v3.events') -eq 1 ] && ! grep -q 'preempt' '$TMP/v3.events'"
check "ben's job resumed from the checkpoint of step $stop" \
  grep -q "job $N: rank 0 resuming from the checkpoint of step $stop " "$TMP"/cluster/worker*.log
check "its final parameters are bitwise equal to the undisturbed run's" bitwise "$N"
check "gantry_coordinator_preemptions_total counts the preemption ($(preemptions))" [ "$(preemptions)" -eq 1 ]
echo "     quotas, fair share, borrowing and reclaim: $((SECONDS - t0)) s"

# 4. Authorisation: bob's job is read by the viewer, cancelled by neither the viewer nor alice.
t0=$SECONDS
check "the viewer reads bob's job" bash -c "GANTRY_TOKEN='$VIC' '$CLI' describe '$B1' | grep -qx 'Owner:      bob (team nlp)'"
as "$VIC" cancel "$B1" >"$TMP/e1" 2>&1; rc=$?
check "the viewer may not cancel it: PERMISSION_DENIED naming who, what and which" bash -c \
  "[ $rc -eq 1 ] && grep -qF 'PERMISSION_DENIED: user vic (team ops, role viewer) may not cancel job $B1 (owner bob, team nlp)' '$TMP/e1'"
as "$ALICE" cancel "$B1" >"$TMP/e2" 2>&1; rc=$?
check "alice (team vision) may not cancel it: PERMISSION_DENIED naming who, what and which" bash -c \
  "[ $rc -eq 1 ] && grep -qF 'PERMISSION_DENIED: user alice (team vision, role user) may not cancel job $B1 (owner bob, team nlp)' '$TMP/e2'"

# 5. bob's token revoked by a reload; his job goes on.
principals ben >"$TMP/p.new" && mv "$TMP/p.new" "$TMP/principals.yaml"
before=$(steps_done "$B1")
kill -HUP "$COORD_PID"
check "SIGHUP: the coordinator reloads the file (logged)" \
  wait_for 20 grep -qF "principals: reloaded $TMP/principals.yaml: 5 identities" "$TMP/cluster/coordinator.log"
as "$BOB" jobs >"$TMP/e3" 2>&1; rc=$?
check "bob's revoked token is refused (UNAUTHENTICATED)" bash -c "[ $rc -eq 1 ] && grep -q 'UNAUTHENTICATED: unknown token' '$TMP/e3'"
check "his running job goes on training after the reload (steps past ${before:-?})" \
  wait_for 20 bash -c "s=\$(GANTRY_TOKEN='$ADMIN' '$CLI' describe '$B1' | sed -n 's/^Steps: *\([0-9]*\)\/.*/\1/p'); [ \"\${s:-0}\" -gt '${before:-0}' ] && GANTRY_TOKEN='$ADMIN' '$CLI' describe '$B1' | grep -q '^State:      RUNNING'"
as "$ADMIN" cancel "$B1" >/dev/null; wait_for 30 state_is "$B1" CANCELLED
echo "     authorisation and the reload: $((SECONDS - t0)) s"

# 6. One worker from here on: past the grace period (1 s), the worker frozen so that it cannot
# checkpoint (before the urgent job is submitted: frozen after, a loaded machine may let it
# reach the stop step first; it is declared dead only after 5 s of silence).
stop_pid "$WORKER2_PID"
t0=$SECONDS
long=$(as "$AMY" submit "$TMP/long_grace.yaml")
wait_for 60 has_checkpoint "$long" 50 || echo "     $long has no checkpoint of step 50"
kill -STOP "$WORKER_PID"
urgent=$(as "$BEN" submit "$TMP/urgent.yaml")
wait_for 30 state_is "$long" PREEMPTED; kill -CONT "$WORKER_PID"
check "both jobs end SUCCEEDED" wait_for 120 succeeded "$long" "$urgent"
"$CLI" watch "$long" >"$TMP/grace.events" 2>&1
grep -E 'preempt|PREEMPTED|resum' "$TMP/grace.events" | sed 's/^/     /'
# Its last committed checkpoint: 50, or a later one where the machine was slow to see 50's.
last=$(sed -n 's/.*within its grace period of 1\.0 s: stopped; it resumes from its last committed checkpoint (step \([0-9]*\)).*/\1/p' "$TMP/grace.events" | head -1)
stop=$(sed -n 's/.*it checkpoints after step \([0-9]*\).*/\1/p' "$TMP/grace.events" | head -1)
check "past its grace period amy's job was stopped: PREEMPTED without the checkpoint it was asked for (step ${stop:-?}; its last is ${last:-?})" \
  bash -c "[ -n '$last' ] && [ -n '$stop' ] && [ '$last' -ge 50 ] && [ '$last' -lt '$stop' ]"
check "amy's job resumed from its last committed checkpoint, step ${last:-?}" \
  grep -q "job $long: rank 0 resuming from the checkpoint of step ${last:-x} " "$TMP/cluster/worker1.log"
check "its final parameters are bitwise equal to the undisturbed run's" bitwise "$long"
echo "     past the grace period: $((SECONDS - t0)) s"

# 7. The coordinator killed at each kill point of the preemption path (the principals file
# and TLS from the environment, as at the start). The coordinator that restarts after one
# crash is the one armed for the next (the jobs of the crash before it run to their end with
# no preemption: the urgent one is placed first), so each kill point costs one restart.
respawn() {  # respawn LOG: a coordinator on its port (GANTRY_KILL_AT from the caller arms it)
  spawn_coordinator "$CPORT" "$1"; COORD_PID=$SPAWNED
  wait_for 30 test -s "$TMP/cluster/coordinator.ready" || { echo "     the coordinator did not start: $(tail -3 "$1")"; return 1; }
}
# The cluster serves again: the worker attached and idle, and the shard server registered (it
# lists the undisturbed run's last checkpoint): a job placed before would have nowhere to
# checkpoint.
ready() { "$CLI" workers 2>/dev/null | grep -q ' idle ' && "$CLI" checkpoints "$REF" 2>/dev/null | grep -q "^$STEPS "; }
log_of() { echo "$TMP/logs/${1:-after}"; }  # the log of the coordinator armed for POINT ("": none)
crash() {  # crash POINT NEXT: the coordinator (armed for POINT) dies there; its successor is armed for NEXT
  local point=$1 next=$2 log t0=$SECONDS rc
  log=$(log_of "$point")
  wait_for 30 ready || { echo "     no idle worker or shard server after the armed coordinator started"; return 1; }
  long=$(as "$AMY" submit "$TMP/long.yaml") || return 1
  # Once its checkpoint of step 50 is committed: placed again after the restart, it waits for
  # the shard server holding it (which re-registers a few seconds after the coordinator is back).
  wait_for 60 has_checkpoint "$long" 50
  # The scheduling thread may preempt, and die, before SubmitJob's answer is out: the job is
  # stored by then, and found by its name after the restart.
  urgent=$(as "$BEN" submit "$TMP/urgent.yaml" 2>/dev/null)
  if ! wait_for 60 grep -q "kill point $point reached (hit 1): SIGKILL" "$log"; then
    echo "     the coordinator never reached $point"; return 1
  fi
  { wait "$COORD_PID"; rc=$?; } 2>/dev/null
  check "$point: the coordinator died there by SIGKILL (exit status $rc)" [ "$rc" -eq 137 ]
  GANTRY_KILL_AT="$next" respawn "$(log_of "$next")" || return 1
  [ -n "$urgent" ] || urgent=$(sed -n 's/.*job \(j-[0-9]*\) (urgent) submitted.*/\1/p' "$log" | tail -1)
  check "$point: after the restart both jobs reach SUCCEEDED (no job lost)" wait_for 120 succeeded "$long" "$urgent"
  check "$point: no placement was made twice (each job generation placed once over both coordinators)" bash -c \
    "! cat '$log' '$(log_of "$next")' | sed -n 's/.*\\(job j-[0-9]* generation [0-9]*\\) placed.*/\\1/p' | sort | uniq -d | grep -q ."
  check "$point: the long job's final parameters are bitwise equal to the undisturbed run's" bitwise "$long"
  echo "     $point: $((SECONDS - t0)) s"
}
"$COORD_BIN" --list_kill_points | awk -F'\t' -v re="$ONLY" '$1 ~ /^coordinator\.preempt\./ && $1 ~ re {print $1}' >"$TMP/points"
mapfile -t POINTS <"$TMP/points"
check "the coordinator lists the preemption's kill points (${#POINTS[@]})" [ "${#POINTS[@]}" -ge 1 ]
mkdir -p "$TMP/logs"
stop_pid "$COORD_PID"
if GANTRY_KILL_AT="${POINTS[0]}" respawn "$(log_of "${POINTS[0]}")"; then
  for i in "${!POINTS[@]}"; do
    if ! crash "${POINTS[$i]}" "${POINTS[$((i + 1))]:-}"; then
      check "${POINTS[$i]}: the crash test ran" false
      break  # the coordinator's state is unknown: the later points cannot run
    fi
  done
else
  check "the coordinator armed for ${POINTS[0]} started" false
fi

echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]
