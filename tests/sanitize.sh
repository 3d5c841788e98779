#!/usr/bin/env bash
# Sanitizer runs, each in a build tree of its own (CMake's GANTRY_SANITIZE; CUDA left out):
#   tests/sanitize.sh address [CTEST ARGS...]
#       ASan + UBSan: builds everything into build-address and runs every test but the gpu ones
#       (a UBSan finding aborts its test; LeakSanitizer reports leaks at exit).
#   tests/sanitize.sh thread [CTEST ARGS...]
#       TSan: builds the target threaded_tests into build-thread and runs the tests labelled
#       `threads` (the communication thread, the coordinator's reactor and scheduler, the
#       shard server, the checkpoint writer, the data loader), less those that run the CUDA
#       emulator unless GANTRY_TSAN_EMULATED=1: its fibers each have a TSan context, and they
#       run clean, but a thousand contexts make TSan some 250 times slower.
# GANTRY_SANITIZE_DIR names the build tree; GANTRY_JOBS the build's parallelism. Suppressions
# (tests/sanitizers/*.supp) each carry their reason. docs/testing.md, "Sanitizers".
set -euo pipefail
mode="${1:-}"
case "$mode" in
  address | thread) shift ;;
  *) echo "usage: tests/sanitize.sh address|thread [ctest args...]" >&2; exit 2 ;;
esac
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
dir="${GANTRY_SANITIZE_DIR:-build-$mode}"
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGANTRY_SANITIZE="$mode" >/dev/null
fi
jobs="${GANTRY_JOBS:-$(nproc)}"
supp="$ROOT/tests/sanitizers"
# One OpenMP thread: libgomp is not instrumented, and its barriers would read to TSan as
# unsynchronised; the kernels' threading is checked by their own tests (bitwise across
# thread counts), Gantry's threads here.
export OMP_NUM_THREADS=1
if [ "$mode" = address ]; then
  cmake --build "$dir" -j "$jobs"
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0:suppressions=$supp/asan.supp"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
  # The tests that measure the process's resident memory against the planner's bytes: ASan's
  # redzones and its quarantine of freed blocks (256 MB) add to the RSS, so they hold in the
  # plain build (the main suite) only.
  rss='MemoryTest'
  echo "sanitize.sh address: left out, as they measure resident memory (ASan's redzones and quarantine add to it):"
  (cd "$dir" && ctest -N -LE gpu -R "$rss" | grep 'Test *#' || true)
  # The check that the release image carries every shared library the built binaries need:
  # instrumented binaries also need the sanitizers' runtimes, which no image should carry.
  release='^docker_cpu_image$'
  echo "sanitize.sh address: left out, as it checks the release binaries' libraries against the image:"
  (cd "$dir" && ctest -N -LE gpu -R "$release" | grep 'Test *#' || true)
  cd "$dir"
  exec ctest --output-on-failure -LE gpu -E "$rss|$release" -j "$(nproc)" --timeout 1800 "$@"
fi
cmake --build "$dir" -j "$jobs" --target threaded_tests
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4:suppressions=$supp/tsan.supp"
# The tests that run the CUDA emulator (in their names, or ZeroEngineTest's that run cpu and
# cuda-emulated, or cuda-emulated alone: offload, the clip on the device, the working copy, the
# step's waits). The emulator gives each fiber a TSan context and switches it
# with the stack (kernels/emulated/emulator.cc; without that the switches corrupted TSan's
# state: a SEGV in __tsan::UnrefClockBlock). They pass so, but a block's thousand contexts
# are far more than TSan keeps clock slots for: TrainerTest's 2-second emulated test takes
# 8 minutes. Run with GANTRY_TSAN_EMULATED=1; left out of the default run (and CI's).
emulated='CudaEmulated|Emulated|OffloadedChunksGiveTheBitsOfOneChunkAndOfNoOffload|OneRankClipsOnTheDevice|TheUpdateWritesTheWorkingCopy|AStepOnADeviceWaitsForItOnce'
if [ -n "${GANTRY_TSAN_EMULATED:-}" ]; then emulated='^$'; fi
# The tests whose subject is gRPC's server side (the RPC edge, the shard server's services, the
# commit's calls to them, the parameter server and its data port's protocol tests, which set
# their ranges up through it, the worker's session against an in-process coordinator and
# shard server, WhoAmITest's coordinator answering identities through the edge,
# SubmitOnceTest's coordinator taking a job through SubmitJob, and the
# authorisation tables calling every method of both daemons, AuthzRpcTest and ShardAuthzTest): their
# calls run through Debian's libgrpc,
# which is not built with TSan, and TSan reports its internal hand-offs as races inside
# libgrpc (channel arguments' AVL tree, the TCP client's strings, the request matcher, the
# callback handlers' messages, the event engine's epoll descriptor: docs/testing.md). A
# TSan-built gRPC would bring them in. The data port's event loop itself is checked without
# gRPC (stream_server_test).
grpc='RpcEdgeTest|ShardServiceTest|CommitTest|ParamServer|DataPortTest|ShardServerSigtermTest|SessionTest|WhoAmITest|SubmitOnceTest|AuthzRpcTest|ShardAuthzTest'
echo "sanitize.sh thread: left out, as they run the CUDA emulator (slow under TSan; GANTRY_TSAN_EMULATED=1 runs them):"
(cd "$dir" && ctest -N -L threads -R "$emulated" | grep 'Test *#' || true)
echo "sanitize.sh thread: left out, as their subject is gRPC's server side (libgrpc has no TSan):"
(cd "$dir" && ctest -N -L threads -R "$grpc" | grep 'Test *#' || true)
cd "$dir"
exec ctest --output-on-failure -L threads -E "$emulated|$grpc" -j "$(nproc)" --timeout 1800 "$@"
