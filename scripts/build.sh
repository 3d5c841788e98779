#!/usr/bin/env bash
# Configures (once) and builds Gantry into ./build with Ninja (ccache when present).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${GANTRY_BUILD_DIR:-build}"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${GANTRY_BUILD_TYPE:-Release}" ${GANTRY_CMAKE_ARGS:-}
fi
cmake --build "$BUILD_DIR" -j "${GANTRY_JOBS:-$(nproc)}"
