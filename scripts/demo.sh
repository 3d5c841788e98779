#!/usr/bin/env bash
# Sets up, builds, prepares the fortunes corpus and trains the demo GPT on CPU, then samples.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BIN=build/cli
mkdir -p data/fortunes runs
if [ ! -f data/fortunes/train.bin ]; then
  "$BIN/gantry-train" prepare --out-dir data/fortunes /usr/share/games/fortunes
fi
"$BIN/gantry-train" configs/demo.yaml --save runs/demo/model
"$BIN/gantry-train" sample --from runs/demo/model --prompt "The meaning of life" --tokens 200 --seed 1
echo "model: runs/demo/model (Hugging Face GPT-2 layout: config.json + model.safetensors)"
