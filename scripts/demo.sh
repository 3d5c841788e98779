#!/usr/bin/env bash
# Sets up, builds, starts a local Gantry cluster (coordinator, shard server, one CPU
# worker), trains the demo GPT on the fortunes corpus through it, and shows the result:
# progress, final val loss, a text sample, where the checkpoint is. Stops the cluster at
# the end (and on error).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BIN=build/cli
mkdir -p datasets/fortunes runs
if [ ! -f datasets/fortunes/train.bin ]; then
  "$BIN/gantry-train" prepare --out-dir datasets/fortunes /usr/share/games/fortunes
fi
CLUSTER=runs/cluster
bash deploy/local/cluster.sh stop --dir "$CLUSTER" >/dev/null 2>&1 || true
bash deploy/local/cluster.sh start --dir "$CLUSTER" --workers 1
trap 'bash deploy/local/cluster.sh stop --dir "$CLUSTER"' EXIT
source "$CLUSTER/env"
"$BIN/gantry" submit configs/demo.yaml --wait | tee runs/demo-watch.log
JOB=$(grep -m1 -o 'j-[0-9]*' runs/demo-watch.log)
echo
echo "final $(grep -o 'val loss [0-9.]*' runs/demo-watch.log | tail -1)"
"$BIN/gantry" checkpoints "$JOB"
"$BIN/gantry" export "$JOB" -o runs/demo/model
echo "--- a sample from $JOB:"
"$BIN/gantry" sample "$JOB" --prompt "The meaning of life" --tokens 200
echo "---"
echo "checkpoints: on the shard server (gantry checkpoints $JOB); exported model: runs/demo/model"
