#!/usr/bin/env bash
# Sets up, builds and runs every test that needs no GPU (CTest label `gpu` is excluded:
# tests/gpu/run.sh runs those on a machine with an NVIDIA GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
# kubernetes-validate (PyPI: it carries the Kubernetes schemas) for k8s_manifests. Best
# effort: without it (no PyPI) that test prints why it skips.
TOOLS="${GANTRY_BUILD_DIR:-build}/tools"
if [ ! -x "$TOOLS/bin/kubernetes-validate" ]; then
  { python3 -m venv "$TOOLS" &&
    timeout 300 "$TOOLS/bin/pip" install -q --disable-pip-version-check kubernetes-validate==1.37.0; } ||
    echo "test.sh: kubernetes-validate could not be installed from PyPI: k8s_manifests will skip"
fi
# ctest starts the tests in descending order of their last run's times (its cost data); a
# fresh build tree has none, so the committed times of a full run stand in (docs/testing.md,
# "CI's time"): the longest tests start first rather than wherever they are declared.
costs="${GANTRY_BUILD_DIR:-build}/Testing/Temporary/CTestCostData.txt"
if [ ! -f "$costs" ]; then
  mkdir -p "$(dirname "$costs")"
  cp tests/ctest_costs.txt "$costs"
fi
(cd "${GANTRY_BUILD_DIR:-build}" && ctest --output-on-failure -LE gpu -j "$(nproc)" --timeout 900)
# The tests of Gantry's threads again, under ThreadSanitizer, in a build tree of their own
# (tests/sanitize.sh; docs/testing.md, "Sanitizers").
bash tests/sanitize.sh thread
# Each libFuzzer target for 25 s over its committed corpus, under ASan and UBSan, in a clang
# build tree of its own (tests/fuzz/run.sh installs clang if missing; docs/testing.md,
# "Fuzzing"), one target a core at a time. One input may take 60 s rather than 10 before it
# counts as a hang: a shared CI machine can stall a process for seconds, and a real hang
# still ends the run.
bash tests/fuzz/run.sh --timeout 60 --parallel "$(nproc)" 25
