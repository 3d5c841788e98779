#!/usr/bin/env bash
# Builds Gantry's libFuzzer targets (clang, ASan + UBSan: GANTRY_FUZZ=ON) and runs each for
# SECONDS over its committed seed corpus, --parallel at a time (default one after another). Prints the executions per
# target; fails if any target crashes, leaks, times out (an input over 10 s: --timeout),
# exceeds its memory (2 GB) or makes a sanitizer report. A timeout's input is run once more
# and its time printed: one that runs in milliseconds then was the machine stalling. The committed corpus is only read: what a run
# finds goes to RUN_DIR/<target>/corpus, crashes and their inputs to RUN_DIR/<target>/.
#
#   bash tests/fuzz/run.sh [options] SECONDS
#     --build-dir DIR   the fuzz build tree (default: build-fuzz in the repository, ignored by git)
#     --no-build        use the targets already built there
#     --only T[,T...]   run only these targets (e.g. job_spec_fuzz)
#     --run-dir DIR     where logs, new inputs and crashes go (default: BUILD_DIR/fuzz-runs/<time>)
#     --corpus          regenerate the seed corpora (tests/fuzz/corpus) with fuzz_make_corpus first
#     --jobs N          compile with N jobs (default: the cores)
#     --timeout S       seconds one input may take (default 10)
#     --parallel N      run N targets at a time (default 1; CI: the cores, each target one)
#
# Installs clang and libFuzzer's runtime with apt-get when missing (non-interactive,
# idempotent), and Gantry's other packages through scripts/setup.sh.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build_dir="$root/build-fuzz"
run_dir=""
build=1
only=""
corpus=0
jobs="$(nproc)"
timeout=10
parallel=1
seconds=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2;;
    --no-build) build=0; shift;;
    --only) only="$2"; shift 2;;
    --run-dir) run_dir="$2"; shift 2;;
    --corpus) corpus=1; shift;;
    --jobs) jobs="$2"; shift 2;;
    --timeout) timeout="$2"; shift 2;;
    --parallel) parallel="$2"; shift 2;;
    -h|--help) sed -n '2,23p' "$0"; exit 0;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2;;
    *) seconds="$1"; shift;;
  esac
done
if ! [[ "$parallel" =~ ^[0-9]+$ ]] || [ "$parallel" -lt 1 ]; then
  echo "run.sh: --parallel takes a number of targets at a time, at least 1 (got '$parallel')" >&2
  exit 2
fi
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "usage: bash tests/fuzz/run.sh [options] SECONDS (run.sh --help)" >&2
  exit 2
fi

TARGETS=(job_spec_fuzz safetensors_fuzz hf_config_fuzz token_file_fuzz checkpoint_fuzz tokenizer_fuzz
         shard_chunks_fuzz param_wire_fuzz coordinator_fuzz principals_fuzz)
if [ -n "$only" ]; then IFS=, read -r -a TARGETS <<< "$only"; fi

if [ "$build" = 1 ]; then
  # clang, libFuzzer and the sanitizers' runtimes (libclang-rt-dev), clang's OpenMP.
  need=()
  for p in clang libclang-rt-dev libomp-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    echo "run.sh: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
  fi
  bash "$root/scripts/setup.sh"
  if [ ! -f "$build_dir/build.ninja" ]; then
    mkdir -p "$build_dir"
    CC=clang CXX=clang++ cmake -S "$root" -B "$build_dir" -G Ninja -DGANTRY_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
  fi
  start=$(date +%s)
  ninja -C "$build_dir" -j "$jobs" "${TARGETS[@]}" fuzz_make_corpus
  echo "run.sh: built in $(( $(date +%s) - start )) s"
fi
if [ "$corpus" = 1 ]; then
  "$build_dir/tests/fuzz/fuzz_make_corpus" "$root" "$here/corpus"
fi

[ -n "$run_dir" ] || run_dir="$build_dir/fuzz-runs/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$run_dir"
# halt_on_error: UBSan's and ASan's first report ends the run (an artifact is written);
# detect_leaks: LeakSanitizer after every input that leaves more allocations than it found.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
export GLOG_minloglevel="${GLOG_minloglevel:-3}"  # the daemons' logs would drown the fuzzers'
printf '%-20s %12s %10s %8s  %s\n' target executions exec/s corpus result > "$run_dir/summary.txt"
# One target's run; its summary line goes to $out/result.txt (the lines are gathered in the
# targets' order once all have run, whatever order they end in).
run_target() {
  local t="$1" bin="$build_dir/tests/fuzz/$1" out="$run_dir/$1"
  mkdir -p "$out/corpus"
  local dict=()
  [ -f "$here/$t.dict" ] && dict=(-dict="$here/$t.dict")
  echo "== $t: ${seconds} s"
  local rc=0
  # New inputs go to $out/corpus (first directory); the committed seeds are only read.
  "$bin" -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$out/" "${dict[@]}" "$out/corpus" "$here/corpus/$t" > "$out/log.txt" 2>&1 || rc=$?
  local execs rate units result=ok
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/log.txt" | tail -1 | grep -o '[0-9]*$' || true)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$out/log.txt" | tail -1 | grep -o '[0-9]*$' || true)
  units=$(grep -o 'corp: [0-9]*' "$out/log.txt" | tail -1 | grep -o '[0-9]*$' || true)
  if [ "$rc" -ne 0 ] || grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|==[0-9]+==ERROR' "$out/log.txt"; then
    result="FAILED (exit $rc; $(grep -m1 -oE 'ERROR: [A-Za-z]+: [^ ]+( [^ ]+)?|runtime error: [^/]{0,60}|deadly signal|timeout after [0-9]+ seconds|out-of-memory' "$out/log.txt" || echo see log))"
    local slow s0
    slow=$(ls "$out"/timeout-* 2>/dev/null | head -1 || true)
    if [ -n "$slow" ]; then
      s0=$(date +%s%N)
      "$bin" -timeout="$timeout" "$slow" > "$out/rerun.txt" 2>&1 || true
      result="$result; rerun of the input: $(( ($(date +%s%N) - s0) / 1000000 )) ms"
    fi
  fi
  printf '%-20s %12s %10s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "${units:-?}" "$result" | tee "$out/result.txt"
}
for t in "${TARGETS[@]}"; do
  [ -x "$build_dir/tests/fuzz/$t" ] || { echo "run.sh: $build_dir/tests/fuzz/$t is not built" >&2; exit 1; }
done
running=0
for t in "${TARGETS[@]}"; do
  if [ "$running" -ge "$parallel" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  run_target "$t" &
  running=$((running + 1))
done
wait || true
failed=()
for t in "${TARGETS[@]}"; do
  if [ -f "$run_dir/$t/result.txt" ]; then
    cat "$run_dir/$t/result.txt" >> "$run_dir/summary.txt"
    grep -q '  ok$' "$run_dir/$t/result.txt" || failed+=("$t")
  else
    printf '%-20s %12s %10s %8s  %s\n' "$t" ? ? ? "FAILED (the run left no result)" >> "$run_dir/summary.txt"
    failed+=("$t")
  fi
done
echo "run.sh: logs, new inputs and any crash in $run_dir"
cat "$run_dir/summary.txt"
if [ ${#failed[@]} -gt 0 ]; then
  echo "run.sh: FAILED: ${failed[*]} (see $run_dir/<target>/log.txt and the crash-* inputs beside it)" >&2
  exit 1
fi
