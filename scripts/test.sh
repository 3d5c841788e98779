#!/usr/bin/env bash
# Sets up, builds and runs every test that needs no GPU (CTest label `gpu` is excluded:
# tests/gpu/run.sh runs those on a machine with an NVIDIA GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd "${GANTRY_BUILD_DIR:-build}"
ctest --output-on-failure -LE gpu -j "$(nproc)" --timeout 900
