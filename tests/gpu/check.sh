#!/usr/bin/env bash
# The one prepared device call (issue 48, item 1): at most 6 minutes of the 15 a session is lent,
# so that a fix and a rerun still fit. Here: bash tests/gpu/run.sh bundle; carry .bundle.txz
# (timeout_s 420). There, from the repository root:
#   bash tests/gpu/check.sh [BENCH ARGS...]      (default --steps 8; they go to bench/gpu/run.sh)
#
# The parts, in the order of what they tell, each with its own time limit (seconds, each
# overridable by its variable), each logged to $OUT/PART.log as it runs:
#   gpt2     bench/gpu/run.sh --only gpt2: gantry's GPT-2 step, then PyTorch's, then the ratio
#            GANTRY_CHECK_GPT2_TIMEOUT, 110 = a gantry run's 20 (GANTRY_BENCH_GANTRY_TIMEOUT) +
#            a PyTorch run's 85 (GANTRY_BENCH_TORCH_TIMEOUT) + 5; about 50 s expected
#   llama    the same for the Llama                    GANTRY_CHECK_LLAMA_TIMEOUT, 110; about 60
#   suite    tests/gpu/run.sh run, the gpu label       GANTRY_CHECK_SUITE_TIMEOUT, 55; about 30
#            (each binary within GANTRY_GPU_TEST_TIMEOUT, by default the part's limit)
#   cluster  tests/gpu/cluster.sh run cuda             GANTRY_CHECK_CLUSTER_TIMEOUT, 50; about 30
#            (the job's wait within GANTRY_GPU_CLUSTER_TIMEOUT, by default the limit less 15)
#   -- the default parts: 325 s at most, about 3 minutes expected --
#   ops      bench/kernels/ops_bench, opt-in (GANTRY_CHECK_OPS=1)   GANTRY_CHECK_OPS_TIMEOUT, 90
#   sweep    bench/gpu/gemm_sweep.sh, the planner's GEMM sweep, where that file exists
#            (GANTRY_CHECK_SWEEP=0: not run)                  GANTRY_CHECK_SWEEP_TIMEOUT, 90
#   candidates  bench/gpu/run.sh --candidates, opt-in by name only (GANTRY_CHECK_PARTS=candidates):
#            both models beside PyTorch, then each candidate on    GANTRY_CHECK_CANDIDATES_TIMEOUT, 300
# GANTRY_CHECK_PARTS="gpt2 suite" runs those, in that order (a rerun after a fix). The old
# GANTRY_GPU_SKIP_SUITE=1 and GANTRY_GPU_SKIP_CLUSTER=1 still leave those out.
#
# The whole call keeps within GANTRY_CHECK_BUDGET seconds (345, unpacking the bundle included):
# a part's limit is cut to what is left of it, and a part with under 10 s left is not run
# (reported NOT RUN; for ops and sweep that is no failure). A part over its limit is stopped,
# its whole process session (test binaries under their own timeout, daemons, torch.compile's
# workers), TERM and 5 s later KILL; it is reported TIMED OUT (exit 124) and the next part runs.
#
# Where the results go, as they come (at most 8 files come back): $OUT/summary.txt, appended after
# each part (its status, seconds and limit) and by bench/gpu/run.sh after each run (its JSON
# line) and each pair (the ratio and memory lines), so a call cut short still returns what it
# measured; $OUT/PART.log for each part (gpt2, llama, suite, cluster, ops, sweep, candidates;
# gemm_sweep.sh may write one file of its own under $OUT). On stdout: each part's highlights as
# it ends, then the summary. Exit 0 if every part that ran passed; 1 if any failed, timed out or
# (a default part) was not run; the summary's last line names them.
#
# Expected times are estimates from docs/perf.md's GPU entries, not timings of each part (none was
# timed alone; the summary now records each part's seconds). On the H100, 2026-11-26, two calls of
# 120 s and 96 s ran the suite, PyTorch's GPT-2 and three gantry GPT-2 runs whose timed steps alone
# come to 55 s and 31 s: about 65 s for the suite, PyTorch's GPT-2 and the starts. On the H200,
# 2026-11-27, check.sh --steps 8 (the suite, ops_bench, three gantry runs, both PyTorch runs) took
# about 3.5 minutes (docs/testing.md). Hence: a gantry run about 10 s (its start, cuDNN's plans,
# 3 + 8 + 1 steps of 0.14 s); a PyTorch run 40-60 s, nearly all of it torch.compile's compile, in
# the first of its warmup + 2 untimed steps (--steps sets only the timed steps: 8 are about 1 s);
# the suite 20-40 s. The cluster job has never run on a GPU (1.5 minutes on cuda-emulated here,
# its kernels on 2 CPUs; on the GPU its 200 steps of a 4 x 256 model should take seconds).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
SELF=tests/gpu/check.sh

# --- a part's process session: a part runs in a session of its own (setsid), so that stopping it
# stops everything it started, a test binary under its own timeout (another process group) too ---
sid_of() {  # the session id of process $1: /proc/PID/stat's sixth field (fourth after "(comm) ")
  local stat
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  stat=${stat##*) }
  # shellcheck disable=SC2086  # the fields, split on purpose
  set -- $stat
  echo "$4"
}
session_pids() {  # session_pids SID [EXCEPT]: its live processes (not zombies, which hold nothing),
  # less EXCEPT and this function's own (its subshell and what it runs, ps: the watchdog calls it
  # from inside the session), and what either started
  local sid=$1 except=${2:-} me=$BASHPID all p st
  if ! all=$(ps -e -o pid=,ppid=,sid=,stat= 2>/dev/null); then
    all=""
    for p in /proc/[0-9]*; do
      read -r st 2>/dev/null <"$p/stat" || continue
      st=${st##*) }
      # shellcheck disable=SC2086  # the fields, split on purpose
      set -- $st
      all+="${p#/proc/} $2 $4 $1"$'\n'
    done
  fi
  awk -v s="$sid" -v x="$except" -v me="$me" '
    { pid[NR] = $1; pp[$1] = $2; ss[$1] = $3; st[$1] = $4 }
    END {
      for (i = 1; i <= NR; i++) {
        p = pid[i]
        if (ss[p] != s || st[p] ~ /^Z/) continue
        n = 0  # up its parents to me or EXCEPT (then it is left out) or to init
        for (q = p; q > 1 && q != me && q != x && n++ < 1000;) q = pp[q]
        if (q != me && q != x) print p
      }
    }' <<<"$all"
}
session_kill() {  # session_kill SIGNAL SID [EXCEPT]: signal each live process of it; 0 if there was one
  local sig=$1 sid=$2 pids
  { [ -n "$sid" ] && [ "$sid" != "$GUARD_SID" ]; } || return 1  # never check.sh's own session
  pids=$(session_pids "$sid" "${3:-}")
  [ -n "$pids" ] || return 1
  # shellcheck disable=SC2086  # one pid a word
  kill "-$sig" $pids 2>/dev/null
  return 0
}

# bash tests/gpu/check.sh __part LIMIT FLAG PARENT COMMAND...: how part_run starts a part, under
# setsid. As the session's leader it starts the part's watchdog in the session, then becomes
# COMMAND. The watchdog stops the whole session (TERM, then KILL 5 s later) at LIMIT seconds (and
# creates FLAG), or within a second of check.sh's end (PARENT gone: the device tool kills what is
# left of a call, but not what runs in a session of its own). Not a session leader (no setsid):
# COMMAND under timeout instead.
if [ "${1:-}" = __part ]; then
  limit=$2 flag=$3 parent=$4
  shift 4
  GUARD_SID=$(sid_of "$parent")
  if [ "$(sid_of $$)" != $$ ] || [ "$GUARD_SID" = $$ ]; then exec timeout -k 5 "$limit" "$@"; fi
  fifo=0  # the watchdog's ticks: a read that times out on a FIFO no one writes, no process each tick
  if mkfifo "$flag.fifo" 2>/dev/null && exec 9<>"$flag.fifo"; then
    read -r -t 0.05 -u 9 _
    [ $? -gt 128 ] && fifo=1  # (it timed out, as it should: else sleep, not a busy loop)
  fi
  tick() { if [ "$fifo" = 1 ]; then read -r -t "$1" -u 9 _; else sleep "$1"; fi; }
  (
    trap '' TERM INT HUP
    dog=$BASHPID  # (inside $(...) BASHPID would be that subshell's)
    printf -v t0 '%(%s)T' -1
    while :; do
      tick 1
      kill -0 "$parent" 2>/dev/null || break
      printf -v now '%(%s)T' -1
      if [ $((now - t0)) -ge "$limit" ]; then : >"$flag"; break; fi
    done
    session_kill TERM $$ "$dog"
    for _ in {1..50}; do
      tick 0.1
      [ -n "$(session_pids $$ "$dog")" ] || exit 0
    done
    session_kill KILL $$ "$dog"
  ) &
  echo $! >"$flag.dog"
  exec "$@" 9>&-
fi

source tests/gpu/env.sh
OUT=${OUT:-/tmp/gantry-gpu-check}
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
ALL_PARTS="gpt2 llama suite cluster ops sweep candidates"
for p in $ALL_PARTS; do rm -f "$OUT/$p.log"; done
rm -f "$SUMMARY"
T0=$(date +%s)
BUDGET=${GANTRY_CHECK_BUDGET:-345}
[ $# -gt 0 ] || set -- --steps 8
export GANTRY_BENCH_GANTRY_TIMEOUT=${GANTRY_BENCH_GANTRY_TIMEOUT:-20}
export GANTRY_BENCH_TORCH_TIMEOUT=${GANTRY_BENCH_TORCH_TIMEOUT:-85}
export GANTRY_BENCH_SUMMARY=$SUMMARY
PAIR=$((GANTRY_BENCH_GANTRY_TIMEOUT + GANTRY_BENCH_TORCH_TIMEOUT + 5))
TMPD=$(mktemp -d)
GUARD_SID=$(sid_of $$)

note() { echo "$*"; echo "$*" >>"$SUMMARY"; }
elapsed() { echo $(($(date +%s) - T0)); }

limit_of() {
  case $1 in
    gpt2) echo "${GANTRY_CHECK_GPT2_TIMEOUT:-$PAIR}" ;;
    llama) echo "${GANTRY_CHECK_LLAMA_TIMEOUT:-$PAIR}" ;;
    suite) echo "${GANTRY_CHECK_SUITE_TIMEOUT:-55}" ;;
    cluster) echo "${GANTRY_CHECK_CLUSTER_TIMEOUT:-50}" ;;
    ops) echo "${GANTRY_CHECK_OPS_TIMEOUT:-90}" ;;
    sweep) echo "${GANTRY_CHECK_SWEEP_TIMEOUT:-90}" ;;
    candidates) echo "${GANTRY_CHECK_CANDIDATES_TIMEOUT:-300}" ;;
  esac
}

if [ -n "${GANTRY_CHECK_PARTS:-}" ]; then
  PARTS=$GANTRY_CHECK_PARTS
else
  PARTS="gpt2 llama"
  [ "${GANTRY_GPU_SKIP_SUITE:-0}" = 1 ] || PARTS="$PARTS suite"
  [ "${GANTRY_GPU_SKIP_CLUSTER:-0}" = 1 ] || PARTS="$PARTS cluster"
  [ "${GANTRY_CHECK_OPS:-0}" != 1 ] || PARTS="$PARTS ops"
  { [ "${GANTRY_CHECK_SWEEP:-1}" = 0 ] || [ ! -f bench/gpu/gemm_sweep.sh ]; } || PARTS="$PARTS sweep"
fi
for p in $PARTS; do
  case " $ALL_PARTS " in *" $p "*) ;; *) echo "check.sh: no part '$p' (parts: $ALL_PARTS)" >&2; exit 2 ;; esac
done
if [ ! -d .bundle ] && [ ! -f .bundle.txz ]; then
  echo "check.sh: no .bundle/ or .bundle.txz here: run 'bash tests/gpu/run.sh bundle' and carry .bundle.txz" >&2
  exit 2
fi

SETSID=()  # util-linux's setsid, else Python's os.setsid; with neither, a part runs under timeout
if setsid -w true 2>/dev/null; then SETSID=(setsid -w)
elif command -v setsid >/dev/null 2>&1; then SETSID=(setsid)
elif python3 -c 'import os' 2>/dev/null; then
  SETSID=(python3 -c 'import os, sys; os.setsid(); os.execvp(sys.argv[1], sys.argv[1:])')
fi
CUR_SID=""
CUR_PART=""
part_stop() { session_kill "$1" "$CUR_SID"; }  # part_stop SIGNAL: the running part's session

# part_run NAME LIMIT COMMAND...: COMMAND in a session of its own, its output in $OUT/NAME.log,
# stopped at LIMIT seconds; PART_RC is its exit status (124: stopped at its limit).
part_run() {
  local name=$1 limit=$2 pid dog=""
  local flag="$TMPD/$name.timedout"
  shift 2
  rm -f "$flag" "$flag.dog" "$flag.fifo"
  CUR_PART=$name
  "${SETSID[@]}" bash "$SELF" __part "$limit" "$flag" $$ "$@" >"$OUT/$name.log" 2>&1 </dev/null &
  pid=$!
  # setsid makes its own process the session's leader: a background job leads no process group,
  # so setsid need not fork (with -w it would wait for the child, and the session would be that one's).
  CUR_SID=$pid
  wait "$pid"
  PART_RC=$?
  [ ! -f "$flag.dog" ] || { dog=$(cat "$flag.dog"); kill -KILL "$dog" 2>/dev/null; }
  [ ! -f "$flag" ] || PART_RC=124
  # What the part left running (daemons, a test binary under its own timeout, what is still
  # going after the watchdog's TERM): stopped now, so that the next part has the GPU to itself.
  # (The watchdog, killed above, is left out: KILL takes a moment.)
  if [ -n "$(session_pids "$CUR_SID" "$dog")" ]; then
    part_stop TERM
    for _ in $(seq 1 30); do [ -n "$(session_pids "$CUR_SID" "$dog")" ] || break; sleep 0.1; done
    if [ -n "$(session_pids "$CUR_SID" "$dog")" ]; then
      part_stop KILL
      note "  ($name left processes running; TERM did not stop them in 3 s: killed)"
    else
      note "  ($name left processes running: stopped)"
    fi
  fi
  CUR_SID=""
  CUR_PART=""
}

on_signal() {
  local sig=$1
  trap - INT TERM
  if [ -n "$CUR_PART" ]; then
    part_stop TERM
    sleep 1
    part_stop KILL
    note "$CUR_PART: INTERRUPTED (SIG$sig) at +$(elapsed) s"
  fi
  note "check: interrupted by SIG$sig at +$(elapsed) s"
  rm -rf "$TMPD"
  [ "$sig" = INT ] && exit 130
  exit 143
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
trap 'rm -rf "$TMPD"' EXIT

# --- the parts --------------------------------------------------------------------------------------
ops_bench() { gpu_bundle_env "$PWD/.bundle/lib" && exec .bundle/bin/ops_bench; }
run_part() {  # run_part NAME LIMIT: the part's command
  local name=$1 limit=$2
  shift 2
  case $name in
    gpt2 | llama) part_run "$name" "$limit" bash bench/gpu/run.sh --only "$name" "$@" ;;
    candidates) part_run "$name" "$limit" bash bench/gpu/run.sh --candidates "$@" ;;
    suite)
      part_run suite "$limit" env GANTRY_GPU_TEST_TIMEOUT="${GANTRY_GPU_TEST_TIMEOUT:-$limit}" \
        bash tests/gpu/run.sh run ;;
    cluster)
      local wait_s=$((limit > 25 ? limit - 15 : 10))
      part_run cluster "$limit" env GANTRY_GPU_CLUSTER_TIMEOUT="${GANTRY_GPU_CLUSTER_TIMEOUT:-$wait_s}" \
        bash tests/gpu/cluster.sh run cuda ;;
    ops) part_run ops "$limit" bash -c "$(declare -f gpu_bundle_env ops_bench); ops_bench" ;;
    sweep) part_run sweep "$limit" bash bench/gpu/gemm_sweep.sh ;;
  esac
}
highlights() {  # highlights NAME: the lines of its log worth reading in the reply
  local log="$OUT/$1.log"
  case $1 in
    suite) grep -E "^== |FAILED|passed, .* failed|Failure|error" "$log" | head -60 ;;
    cluster) grep -E "^(PASS|FAIL|---|[0-9]+ passed)|SUCCEEDED|FAILED|step +[0-9]+/" "$log" | head -30 ;;
    ops | sweep) tail -n 60 "$log" ;;
  esac
}

{
  echo "== gantry GPU check, $(date -u +%FT%TZ)$(c=$(git rev-parse --short HEAD 2>/dev/null) && echo ", commit $c")"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2 | tr '\n' ' ')"
  echo -n "parts:"
  for p in $PARTS; do echo -n " $p (limit $(limit_of "$p") s)"; done
  echo "; budget $BUDGET s; bench args: $*"
} >>"$SUMMARY"
cat "$SUMMARY"
gpu_bundle_unpack .bundle || note "bundle: could not unpack .bundle.txz"
note "bundle unpacked at +$(elapsed) s"

ok="" failed="" timed_out="" not_run=""
for p in $PARTS; do
  limit=$(limit_of "$p")
  left=$((BUDGET - $(elapsed)))
  if [ "$p" = sweep ] && [ ! -f bench/gpu/gemm_sweep.sh ]; then
    note "sweep: NOT RUN (no bench/gpu/gemm_sweep.sh)"
    continue
  fi
  if [ "$left" -lt 10 ]; then
    note "$p: NOT RUN (${left} s left of the ${BUDGET} s budget)"
    case $p in ops | sweep) ;; *) not_run="$not_run $p" ;; esac
    continue
  fi
  [ "$limit" -le "$left" ] || limit=$left
  note "-- $p: started at +$(elapsed) s, limit $limit s"
  lines=$(wc -l <"$SUMMARY")
  t=$(date +%s)
  run_part "$p" "$limit" "$@"
  secs=$(($(date +%s) - t))
  # (the lines bench/gpu/run.sh added to the summary, on stdout too)
  case $p in gpt2 | llama | candidates) tail -n +"$((lines + 1))" "$SUMMARY" ;; esac
  highlights "$p"
  if [ "$PART_RC" -eq 0 ]; then
    note "$p: ok, $secs s (limit $limit s)"
    ok="$ok $p"
  elif [ -f "$TMPD/$p.timedout" ]; then
    note "$p: TIMED OUT (exit 124): stopped at its limit, $secs s (limit $limit s)"
    timed_out="$timed_out $p"
  elif [ "$PART_RC" -eq 124 ] || [ "$PART_RC" -eq 137 ]; then
    note "$p: TIMED OUT (exit $PART_RC): a run inside it over its own limit (or, without setsid, the part), $secs s (limit $limit s)"
    timed_out="$timed_out $p"
  else
    note "$p: FAILED (exit $PART_RC), $secs s (limit $limit s)"
    failed="$failed $p"
  fi
  if [ "$PART_RC" -ne 0 ]; then
    echo "   the end of $OUT/$p.log:"
    tail -n 15 "$OUT/$p.log" | sed 's/^/   | /'
  fi
done
note "check: $(elapsed) s of the $BUDGET s budget; ok:${ok:- none}; failed:${failed:- none}; timed out:${timed_out:- none}; not run:${not_run:- none}"
echo "== summary ($SUMMARY)"
cat "$SUMMARY"
[ -z "$failed$timed_out$not_run" ]
