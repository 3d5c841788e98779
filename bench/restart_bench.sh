#!/usr/bin/env bash
# Worker SIGKILL to the first resumed step, on loopback with a spare worker: a DP=2 job on 3
# CPU workers and a shard server; after a committed checkpoint, the worker of rank 1 is
# SIGKILLed (and started again, as the next trial's spare); the time runs from the kill to
# the job being RUNNING again (its first step of the new placement reported). Target < 10 s.
# Prints each trial, the median and the coordinator's own figure (failure seen to resumed
# step, gantry_coordinator_restart_seconds).
# Usage: bench/restart_bench.sh BUILD_DIR [TRIALS]
set -uo pipefail
BUILD="$(cd "$1" && pwd)"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TMP="$(mktemp -d)"
TRIALS="${2:-5}"
source "$ROOT/tests/integration/lib.sh"

"$TRAIN" prepare --out-dir "$TMP/data" /usr/share/games/fortunes >/dev/null 2>&1 || { echo "prepare failed"; exit 1; }
cat >"$TMP/job.yaml" <<YAML
name: restart-bench
model: {n_layer: 4, n_head: 4, n_embd: 128, vocab_size: 256, seq_len: 128}
data: {train: $TMP/data/train.bin, shuffle: true}
train: {steps: 100000, micro_batch: 4, global_batch: 8, lr: 3.0e-3, warmup: 10, seed: 7}
checkpoint: {every: 20, keep: 2, dir: $TMP/unused}
parallel: {dp: 2, timeout_s: 10}
scheduling: {max_restarts: 100}
YAML
bash "$ROOT/deploy/local/cluster.sh" start --dir "$TMP/cluster" --workers 3 --threads 1 >/dev/null || exit 1
source "$TMP/cluster/env"
mapfile -t PIDS <"$TMP/cluster/pids"  # coordinator, shardserver, worker1..3
wpids=("" "${PIDS[2]}" "${PIDS[3]}" "${PIDS[4]}")
id=$("$CLI" submit "$TMP/job.yaml")
now() { date +%s.%N; }
times=()
for t in $(seq 1 "$TRIALS"); do
  base=$(steps_done "$id"); base=${base:-0}
  wait_for 120 bash -c "'$CLI' checkpoints $id | awk 'NR > 1 && \$1 > $base' | grep -q ." || { echo "no checkpoint"; exit 1; }
  restarts=$("$CLI" describe "$id" | sed -n 's/^Restarts: *//p')
  victim=$("$CLI" describe "$id" | sed -n 's/^Workers: .*rank 1 \([^,]*\).*/\1/p')
  host=$("$CLI" workers | awk -v w="$victim" '$1 == w {print $2}'); n=${host##*-w}
  t0=$(now)
  kill9 "${wpids[$n]}"
  until "$CLI" describe "$id" | grep -q "Restarts:   $((restarts + 1))" && "$CLI" describe "$id" | grep -q 'State:      RUNNING'; do
    sleep 0.02
    [ "$(awk -v a="$t0" -v b="$(now)" 'BEGIN {print (b - a > 60)}')" = 1 ] && { echo "trial $t: not resumed in 60 s"; exit 1; }
  done
  secs=$(awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.2f", b - a}')
  times+=("$secs")
  echo "trial $t: worker $n ($victim) SIGKILLed at step $(steps_done "$id"); first resumed step reported ${secs} s later"
  wpids[$n]=$(restart_worker "$n")
  wait_for 30 bash -c "[ \$('$CLI' workers | grep -c ' idle ') -ge 1 ]"
done
median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
metrics=$(curl -sf "http://127.0.0.1:$(ready_port "$TMP/cluster/coordinator.ready" metrics_port)/metrics")
sum=$(echo "$metrics" | awk '/^gantry_coordinator_restart_seconds_sum/ {print $2}')
cnt=$(echo "$metrics" | awk '/^gantry_coordinator_restart_seconds_count/ {print $2}')
redone=$(echo "$metrics" | awk '/^gantry_coordinator_steps_redone_total/ {print $2}')
echo "SIGKILL to the first resumed step: median ${median} s over $TRIALS trials (target < 10 s)"
echo "coordinator: failure seen to resumed step, mean $(awk -v s="${sum:-0}" -v c="${cnt:-1}" 'BEGIN {printf "%.2f", s / c}') s; steps redone ${redone:-?} in all"
awk -v m="$median" 'BEGIN {exit !(m < 10)}'
