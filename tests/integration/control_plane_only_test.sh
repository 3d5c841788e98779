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
# Listings page: 60 jobs queued; `gantry jobs` shows the newest 50 and says how to see more,
# --limit and --all choose, -o json lists every one.
for i in $(seq 2 60); do "$CLI" submit "$TMP/job.yaml" >/dev/null || echo "submit $i failed"; done
check "gantry jobs: the newest 50, and how to see the rest" bash -c \
  "[ \"\$('$CLI' jobs 2>'$TMP/hint' | tail -n +2 | wc -l)\" -eq 50 ] && grep -q -- '--limit N or --all' '$TMP/hint'"
check "gantry jobs --limit 5: five, newest first" bash -c \
  "[ \"\$('$CLI' jobs --limit 5 2>/dev/null | tail -n +2 | wc -l)\" -eq 5 ] && '$CLI' jobs --limit 1 2>/dev/null | tail -1 | grep -qv '$job'"
check "gantry jobs --all: all 60" bash -c "[ \"\$('$CLI' jobs --all 2>/dev/null | tail -n +2 | wc -l)\" -eq 60 ]"
check "gantry -o json jobs: all 60 in one list" bash -c \
  "'$CLI' -o json jobs | python3 -c 'import json,sys; j=json.load(sys.stdin)[\"jobs\"]; sys.exit(len(j) != 60 or j[-1][\"id\"] != \"$job\")'"
check "gantry jobs --limit 0 is refused" bash -c "! '$CLI' jobs --limit 0 2>/dev/null"
bash "$ROOT/deploy/local/cluster.sh" stop --dir "$TMP/cluster" >"$TMP/stop.log" 2>&1
check "stop is clean" bash -c "grep -q 'stopped' '$TMP/stop.log' && ! grep -q 'killing' '$TMP/stop.log'"
echo "control_plane_only: $passed passed, $fail failed"
[ "$fail" -eq 0 ]
