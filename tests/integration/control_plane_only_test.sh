#!/usr/bin/env bash
# deploy/local/cluster.sh start --workers 0: a control plane alone (a coordinator and a shard
# server) comes up, answers, queues a job that waits for workers, and stops cleanly. (It once
# failed at once on a division by zero.)
set -uo pipefail
BUILD="$(realpath "$1")"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="$(mktemp -d)"
source "$ROOT/tests/integration/lib.sh"
# (To a file: the daemons keep a command substitution's pipe open.)
bash "$ROOT/deploy/local/cluster.sh" start --dir "$TMP/cluster" --workers 0 >"$TMP/start.log" 2>&1
rc=$?
cat "$TMP/start.log"
check "start --workers 0 brings up a control plane alone" bash -c "[ $rc -eq 0 ] && grep -q '0 worker(s)' '$TMP/start.log'"
source "$TMP/cluster/env" 2>/dev/null || true
check "the coordinator lists no worker" bash -c "[ \"\$('$CLI' workers | tail -n +2 | wc -l)\" -eq 0 ]"
cat >"$TMP/job.yaml" <<YAML
model: {n_layer: 1, n_head: 1, n_embd: 8, vocab_size: 16, seq_len: 8}
data: {train: /nonexistent.bin}
train: {steps: 2, micro_batch: 1, lr: 1.0e-3}
YAML
job="$("$CLI" submit "$TMP/job.yaml")"
check "a submitted job is queued, waiting for workers ($job)" bash -c "'$CLI' describe '$job' | grep -q 'State: *PENDING'"
bash "$ROOT/deploy/local/cluster.sh" stop --dir "$TMP/cluster" >"$TMP/stop.log" 2>&1
check "stop is clean" bash -c "grep -q 'stopped' '$TMP/stop.log' && ! grep -q 'killing' '$TMP/stop.log'"
echo "control_plane_only: $passed passed, $fail failed"
[ "$fail" -eq 0 ]
