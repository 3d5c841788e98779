#!/usr/bin/env bash
# Runs the test suite under each OpenBLAS kernel family and several thread counts, so that no
# test depends on which GEMM kernels the machine picks. CI machines differ: AVX2-only or
# AVX-512 CPUs, and on some the environment sets OPENBLAS_CORETYPE. CI itself never sets it.
#
#   bash tests/openblas_coretypes.sh [BUILD_DIR]
#
# Environment (all optional):
#   CORETYPES  the core types to force (default: Haswell Zen SkylakeX Cooperlake, and
#              "native": OPENBLAS_CORETYPE unset, whatever OpenBLAS detects here)
#   THREADS    OMP_NUM_THREADS values for the unit tests (default: 1 2 3; the whole suite
#              runs at the machine's default)
#   LABELS     a ctest -L regex for the whole-suite runs (default: every test but `gpu`)
# Prints one line per run and a summary; exits non-zero if any run failed. A core type this
# CPU cannot run (AVX-512 kernels on an AVX2-only machine) is reported as skipped, with why.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD="$(realpath "${1:-${GANTRY_BUILD_DIR:-build}}")"
CORETYPES="${CORETYPES:-Haswell Zen SkylakeX Cooperlake native}"
THREADS="${THREADS:-1 2 3}"
LOGS="$(mktemp -d)"
[ -x "$BUILD/tests/kernels_test" ] || { echo "openblas_coretypes: $BUILD is not built (run scripts/build.sh)"; exit 2; }

# The kernel OpenBLAS says it uses (openblas_get_corename) under the environment given.
LIBOPENBLAS="$(ldd "$BUILD/tests/kernels_test" | awk '/libopenblas/ {print $3; exit}')"
corename() {
  env "$@" python3 -c 'import ctypes, sys
lib = ctypes.CDLL(sys.argv[1]); lib.openblas_get_corename.restype = ctypes.c_char_p
print(lib.openblas_get_corename().decode())' "$LIBOPENBLAS" 2>/dev/null || echo "?"
}
avx512=0
grep -qw avx512f /proc/cpuinfo && avx512=1

failed=0
summary=()
run() {  # run TAG ENV... -- CTEST_ARGS...
  local tag="$1"; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local log="$LOGS/$tag.log" t0=$SECONDS
  (cd "$BUILD" && env "${envs[@]}" ctest --output-on-failure "$@" >"$log" 2>&1)
  local rc=$? line
  line="$(grep -E 'tests passed|tests failed' "$log" | tail -1)"
  printf '%-34s %-60s %4ds\n' "$tag" "${line:-no ctest summary (rc $rc)}" $((SECONDS - t0))
  summary+=("$tag: ${line:-rc $rc}")
  if [ $rc -ne 0 ]; then
    failed=$((failed + 1))
    grep -E '^\s*[0-9]+ - .*(Failed|Timeout|Exception)' "$log" | sed 's/^/    /'
  fi
}

echo "openblas_coretypes: CPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores," \
     "AVX-512 $([ $avx512 = 1 ] && echo yes || echo no); environment OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}"
for ct in $CORETYPES; do
  if [ "$ct" = native ]; then
    envs=(-u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
  else
    case "$ct" in SkylakeX|Cooperlake|SapphireRapids)
      if [ $avx512 = 0 ]; then
        echo "$ct: skipped: this CPU has no AVX-512, its kernels would not run"
        summary+=("$ct: skipped (no AVX-512)")
        continue
      fi;;
    esac
    envs=("OPENBLAS_CORETYPE=$ct")
  fi
  kernel="$(corename "${envs[@]}")"
  run "$ct ($kernel) all" "${envs[@]}" -- -LE gpu ${LABELS:+-L "$LABELS"} -j "$(nproc)" --timeout 900
  for th in $THREADS; do
    run "$ct ($kernel) unit, $th threads" "${envs[@]}" "OMP_NUM_THREADS=$th" -- -L unit -LE gpu -j "$(nproc)" --timeout 900
  done
done
echo
echo "summary:"
printf '  %s\n' "${summary[@]}"
echo "logs: $LOGS"
[ $failed -eq 0 ] && echo "openblas_coretypes: every run passed" || echo "openblas_coretypes: $failed run(s) failed"
exit $((failed > 0))
