#!/usr/bin/env bash
# Chaos (CTest label slow): a DP=2 job on 3 CPU workers and 2 shard servers. At points drawn
# from a fixed seed, one at a time, a worker, a shard server and the coordinator are
# SIGKILLed and restarted (the shard server once the job has lost it: its next checkpoint
# fails, and the restart waits for the server holding its last checkpoint). The job reaches
# SUCCEEDED, each re-placement resumes from a committed checkpoint, and its final parameters
# are bitwise equal to an undisturbed run's of the same spec and seed.
# Usage: chaos_test.sh BUILD_DIR [SEED]
set -uo pipefail
BUILD="$(cd "$1" && pwd)"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="$(mktemp -d)"
SEED="${2:-20261121}"
source "$ROOT/tests/integration/lib.sh"
RANDOM=$SEED

"$TRAIN" prepare --out-dir "$TMP/data" /usr/share/games/fortunes >/dev/null 2>&1 || { echo "FAIL prepare"; exit 1; }
STEPS=240
job() {  # job NAME
  cat <<YAML
name: $1
model: {n_layer: 4, n_head: 4, n_embd: 128, vocab_size: 256, seq_len: 128}
data: {train: $TMP/data/train.bin, shuffle: true}
train: {steps: $STEPS, micro_batch: 4, global_batch: 8, lr: 3.0e-3, warmup: 10, min_lr_ratio: 0.1, seed: 7}
checkpoint: {every: 20, dir: $TMP/unused}
parallel: {dp: 2, timeout_s: 5}
scheduling: {max_restarts: 10}
YAML
}
job calm >"$TMP/calm.yaml"; job chaos >"$TMP/chaos.yaml"

bash "$ROOT/deploy/local/cluster.sh" start --dir "$TMP/cluster" --workers 3 --shardservers 2 --threads 1 >/dev/null || exit 1
source "$TMP/cluster/env"
CPORT=${GANTRY_COORDINATOR##*:}
mapfile -t PIDS <"$TMP/cluster/pids"  # coordinator, shardserver, shardserver2, worker1..3
cpid=${PIDS[0]}; spid=${PIDS[2]}; wpids=("" "${PIDS[3]}" "${PIDS[4]}" "${PIDS[5]}")
SPORT=$(ready_port "$TMP/cluster/shardserver2.ready" grpc_port)

calm=$("$CLI" submit "$TMP/calm.yaml"); "$CLI" watch "$calm" >/dev/null
check "the undisturbed run SUCCEEDED ($calm)" bash -c "'$CLI' describe $calm | grep -q 'State:      SUCCEEDED'"
"$CLI" export "$calm" --step $STEPS -o "$TMP/calm" >/dev/null

# The disturbed run: a kill point per daemon, in thirds of the run, from the seed.
third=$((STEPS / 3))
at_worker=$((10 + RANDOM % (third - 20))); at_shard=$((third + 10 + RANDOM % (third - 20)))
at_coord=$((2 * third + 10 + RANDOM % (third - 30)))
echo "     seed $SEED: worker at step $at_worker, shard server at $at_shard, coordinator at $at_coord"
id=$("$CLI" submit "$TMP/chaos.yaml")
wait_step() {  # wait_step N: until the job has done N steps (2 minutes at most)
  local end=$(( $(date +%s) + 120 )) s
  while :; do
    s=$(steps_done "$id"); [ "${s:-0}" -ge "$1" ] && return 0
    [ "$(date +%s)" -ge "$end" ] && { echo "     step ${s:-?} after 2 minutes, waiting for $1"; return 1; }
    sleep 0.05
  done
}

wait_step "$at_worker"
victim=$("$CLI" describe "$id" | sed -n 's/^Workers: .*rank 1 \([^,]*\).*/\1/p')
host=$("$CLI" workers | awk -v w="$victim" '$1 == w {print $2}'); n=${host##*-w}
echo "     step $(steps_done "$id"): SIGKILL worker $n ($victim, rank 1)"
kill9 "${wpids[$n]}"; wpids[$n]=$(restart_worker "$n")

wait_step "$at_shard"
echo "     step $(steps_done "$id"): SIGKILL shardserver2, restarted once the job has noticed (its next checkpoint fails)"
kill9 "$spid"
wait_for 60 bash -c "'$CLI' describe $id | grep -q 'State:      RESTARTING'" || echo "     the job did not notice the lost shard server"
"$CLI" describe "$id" | grep -E '^Waiting:' | sed 's/^/     /'
spid=$(restart_shardserver shardserver2 "$SPORT")

wait_step "$at_coord"
echo "     step $(steps_done "$id"): SIGKILL the coordinator"
kill9 "$cpid"; cpid=$(restart_coordinator "$CPORT")

check "the disturbed run reaches SUCCEEDED" wait_for 240 bash -c "'$CLI' describe $id | grep -q 'State:      SUCCEEDED'"
"$CLI" describe "$id" | grep -E '^(Restarts|Last failure):' | sed 's/^/     /'
"$CLI" watch "$id" 2>/dev/null | grep -E 'restart|resumed|RESTARTING|restarted' | sed 's/^/     /'
"$CLI" watch "$id" >"$TMP/chaos.txt" 2>&1
check "the lost worker, the lost shard server and the coordinator restart each re-placed the job (3 RESTARTING)" \
  bash -c "[ \$(grep -c ' RESTARTING\$' '$TMP/chaos.txt') -ge 3 ]"
check "every re-placement resumed from a committed checkpoint, not from step 1" \
  bash -c "grep -q 'resumed: step' '$TMP/chaos.txt' && ! grep -q 'resumed: step 1 done' '$TMP/chaos.txt'"
check "checkpoints after the shard server's restart are committed on both shard servers again" \
  bash -c "grep 'checkpoint of step $STEPS committed on' '$TMP/chaos.txt' | grep -q ', '"
"$CLI" export "$id" --step $STEPS -o "$TMP/chaos" >/dev/null
rel=$("$TRAIN" compare "$TMP/chaos" "$TMP/calm" | awk '{print $3}')
check "its final parameters are bitwise equal to the undisturbed run's (relative difference ${rel:-none})" \
  bash -c "cmp -s '$TMP/chaos/model.safetensors' '$TMP/calm/model.safetensors'"

echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]
