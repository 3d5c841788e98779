#!/usr/bin/env bash
# GPU metrics through real worker processes (worker/gpu_metrics), without a GPU:
#  - a cuda-emulated worker with 2 emulated GPUs exports gantry_worker_gpu_* for each (labelled
#    gpu, uuid, model; no power or temperature series: an emulated device has none), and its
#    page passes promtool;
#  - `gantry workers` shows a line per GPU under it (utilisation, memory in use of the device's
#    80 GiB) and none under a cpu worker; while a dp 2 job runs on the worker, both GPUs show
#    busy (utilisation over 0%, time in the emulator's kernels) and memory in use;
#  - a worker told to read NVML from a library that is not there says so once in its log,
#    exports no GPU series and shows no GPU lines, and keeps working (it attaches).
# NVML itself is covered by gpu_metrics_test (a stand-in library) and prometheus_integration.
# Usage: gpu_metrics_test.sh BUILD_DIR
set -uo pipefail
BUILD="$(cd "$1" && pwd)"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="$(mktemp -d)"
source "$ROOT/tests/integration/lib.sh"
command -v promtool >/dev/null || { echo "SKIP: promtool is not installed (scripts/setup.sh installs it)"; exit 77; }

"$TRAIN" prepare --out-dir "$TMP/data" /usr/share/games/fortunes >/dev/null 2>&1 || { echo "FAIL prepare"; exit 1; }
bash "$ROOT/deploy/local/cluster.sh" start --dir "$TMP/cluster" --workers 2 --threads 1 \
  --devices cuda-emulated,cpu --gpus 2 >/dev/null || exit 1
source "$TMP/cluster/env"
"$BUILD/worker/gantry-worker" --coordinator "$GANTRY_COORDINATOR" --work_dir "$TMP/cluster/worker3" \
  --metrics_listen 127.0.0.1:0 --threads 1 --host "$(hostname)-nonvml" --gpu_metrics nvml \
  --nvml_library "$TMP/absent/libnvidia-ml.so.1" --heartbeat_ms 200 --ready_file "$TMP/cluster/worker3.ready" \
  2>"$TMP/cluster/worker3.log" &
echo $! >>"$TMP/extra.pids"
wait_for 30 test -s "$TMP/cluster/worker3.ready" || { echo "FAIL the worker without NVML did not start"; exit 1; }
page() { curl -sf "http://127.0.0.1:$(ready_port "$TMP/cluster/$1.ready" metrics_port)/metrics"; }
emu=$("$CLI" workers | awk '/cuda-emulatedx2/ {print $1}')
cpu=$("$CLI" workers | awk '/-w2 / {print $1}')
# the lines under worker $1 in `gantry workers`, up to the next worker
gpu_lines() { "$CLI" workers | awk -v w="$1" '$1 == w {on = 1; next} /^[^ ]/ {on = 0} on && /^  gpu /'; }

page worker1 >"$TMP/emu.txt"
check "the cuda-emulated worker exports utilisation and memory of its 2 GPUs" bash -c \
  "[ \$(grep -c '^gantry_worker_gpu_utilization_ratio{gpu=\"[01]\",model=\"emulated CUDA device\",uuid=\"EMU-' '$TMP/emu.txt') -eq 2 ] &&
   [ \$(grep -c '^gantry_worker_gpu_memory_total_bytes{gpu=\"[01]\",.*} 85899345920\$' '$TMP/emu.txt') -eq 2 ] &&
   [ \$(grep -c '^gantry_worker_gpu_memory_used_bytes{gpu=\"[01]\",' '$TMP/emu.txt') -eq 2 ]"
check "and no power, temperature, ECC or throttle series (an emulated device has none)" bash -c \
  "! grep -q 'gantry_worker_gpu_\(power\|temperature\|ecc\|throttled\|sm_clock\)' '$TMP/emu.txt'"
check "the cuda-emulated worker's page passes promtool check metrics" bash -c "promtool check metrics <'$TMP/emu.txt'"
check "gantry workers shows a line per GPU under the cuda-emulated worker, none under the cpu one" wait_for 10 bash -c \
  "$(declare -f gpu_lines); CLI='$CLI'; [ \$(gpu_lines $emu | grep -c 'util .*%  memory [0-9.]* / 85.9 GB') -eq 2 ] &&
   [ \$(gpu_lines $cpu | wc -l) -eq 0 ]"

cat >"$TMP/job.yaml" <<YAML
name: busy
model: {n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 256, seq_len: 16}
data: {train: $TMP/data/train.bin, shuffle: true}
train: {steps: 100000, micro_batch: 2, global_batch: 4, lr: 3.0e-3}
checkpoint: {every: 100000, dir: $TMP/unused}
parallel: {dp: 2}
resources: {device: cuda-emulated}
YAML
id=$("$CLI" submit "$TMP/job.yaml")
check "while the job runs, gantry workers shows both emulated GPUs busy, with memory in use" wait_for 60 bash -c \
  "$(declare -f gpu_lines); CLI='$CLI'; [ \$(gpu_lines $emu | awk '\$4 + 0 > 0 && \$6 + 0 > 0' | wc -l) -eq 2 ]"
gpu_lines "$emu" | sed 's/^/     /'
check "and /metrics says so too: both GPUs' utilisation over 0" wait_for 10 bash -c \
  "[ \$(curl -sf http://127.0.0.1:$(ready_port "$TMP/cluster/worker1.ready" metrics_port)/metrics |
        awk '/^gantry_worker_gpu_utilization_ratio/ && \$2 > 0' | wc -l) -eq 2 ]"
"$CLI" cancel "$id" >/dev/null

nonvml=$("$CLI" workers | awk '/-nonvml / {print $1}')
check "the worker without NVML attached and heartbeats (gantry workers lists it idle)" bash -c \
  "'$CLI' workers | grep -- '-nonvml ' | grep -q ' idle '"
check "it says once that it has no NVML and exports no GPU metrics" bash -c \
  "[ \$(grep -c 'GPU metrics: no NVML (cannot load $TMP/absent/libnvidia-ml.so.1: .*): this worker exports no GPU metrics' '$TMP/cluster/worker3.log') -eq 1 ]"
check "its page has no GPU series, and gantry workers no GPU lines under it" bash -c \
  "$(declare -f page gpu_lines ready_port); TMP='$TMP'; CLI='$CLI'; ! page worker3 | grep -q gantry_worker_gpu_ &&
   [ \$(gpu_lines $nonvml | wc -l) -eq 0 ]"
echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]
