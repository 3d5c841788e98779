#!/usr/bin/env bash
# The GPU suite. Two halves, because the GPU host has no gRPC/RocksDB/BLAS packages and
# no network:
#   bash tests/gpu/run.sh bundle   here: build, then copy every gpu-labelled test binary and
#                                  the shared libraries it needs into .bundle/: not libc,
#                                  and not the CUDA 13 libraries (driver, runtime, cuBLAS,
#                                  cuBLASLt, NCCL), which the GPU host has and which would
#                                  not fit the 64 MiB a device run may carry
#                                  and .bundle.txz, the same packed (stripped, some 130 MB with
#                                  OpenBLAS, over what a device run may carry; packed, 44)
#   bash tests/gpu/run.sh run      on the GPU host, from the repository root with .bundle/ or
#                                  .bundle.txz carried along: run each bundled test (each
#                                  within GANTRY_GPU_TEST_TIMEOUT seconds, 300 by default); a
#                                  missing GPU is a failure (GANTRY_REQUIRE_GPU=1)
#   bash tests/gpu/run.sh sanitize [GTEST_FILTER]
#                                  on the GPU host: compute-sanitizer's racecheck (shared-memory
#                                  hazards) and memcheck over cuda_kernels_test (all of it, or
#                                  the filter's tests); any hazard or error fails
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/gpu/env.sh
BUNDLE=.bundle
case "${1:-}" in
  bundle)
    bash scripts/build.sh
    rm -rf "$BUNDLE" && mkdir -p "$BUNDLE/bin" "$BUNDLE/lib"
    # The gantry_test targets labelled gpu (tests/CMakeLists.txt), each named cuda_*_test or
    # nccl_*_test (nccl_*: where NCCL was found).
    for bin in build/tests/cuda_*_test build/tests/nccl_*_test build/bench/gpt2_gpu_bench build/bench/ops_bench; do
      [ -e "$bin" ] || continue
      gpu_bundle_copy "$bin" "$BUNDLE/bin" "$BUNDLE/lib"
    done
    # The daemons and the CLIs for tests/gpu/cluster.sh, in the build tree's layout (what
    # deploy/local/cluster.sh's GANTRY_BIN names), sharing lib/ with the tests: one bundle, so
    # one device call runs the suite, the benchmarks and the cluster job (tests/gpu/check.sh).
    for bin in coordinator/gantry-coordinator shardserver/gantry-shardserver worker/gantry-worker cli/gantry \
               cli/gantry-train; do
      mkdir -p "$BUNDLE/build/$(dirname "$bin")"
      gpu_bundle_copy "build/$bin" "$BUNDLE/build/$(dirname "$bin")" "$BUNDLE/lib"
    done
    # Symbols stripped: the bundle with the working tree must fit the 64 MiB a device run carries.
    strip --strip-unneeded "$BUNDLE"/bin/* "$BUNDLE"/build/*/gantry* "$BUNDLE"/lib/* 2>/dev/null || true
    # (no fixtures: no GPU test reads tests/reference/fixtures)
    gpu_bundle_pack "$BUNDLE"
    du -sh "$BUNDLE" "$BUNDLE.txz"
    echo "carry $BUNDLE.txz and run there (device timeout_s 420): bash tests/gpu/check.sh (GPT-2 and Llama beside PyTorch, the suite, the cluster job)"
    ;;
  run)
    gpu_bundle_unpack "$BUNDLE"
    gpu_bundle_env "$PWD/$BUNDLE/lib"
    export GANTRY_REQUIRE_GPU=1
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    fail=0; passed=0
    for bin in "$BUNDLE"/bin/*_test; do
      echo "== $(basename "$bin")"
      if timeout "${GANTRY_GPU_TEST_TIMEOUT:-300}" "$bin" --gtest_brief=1; then passed=$((passed + 1)); else fail=$((fail + 1)); fi
    done
    echo "$passed passed, $fail failed"
    [ "$fail" -eq 0 ]
    ;;
  sanitize)
    gpu_bundle_unpack "$BUNDLE"
    gpu_bundle_env "$PWD/$BUNDLE/lib"
    export GANTRY_REQUIRE_GPU=1
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    fail=0
    for tool in racecheck memcheck; do
      echo "== compute-sanitizer --tool $tool"
      "$cs" --tool "$tool" --error-exitcode 3 "$BUNDLE/bin/cuda_kernels_test" --gtest_brief=1 \
        --gtest_filter="${2:-*}" || fail=1
    done
    [ "$fail" -eq 0 ]
    ;;
  *)
    echo "usage: tests/gpu/run.sh bundle|run|sanitize" >&2; exit 2 ;;
esac
