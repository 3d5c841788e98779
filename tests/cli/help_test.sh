#!/usr/bin/env bash
# Each command's --help, generated from its flag definitions (common/command_flags.h), lists
# every flag the command took before the one parser (the lists below, from the hand-written
# loops it replaced), and every flag it lists is one the command accepts. No coordinator is
# needed: --help runs nothing. Usage: help_test.sh gantry|gantry-train BINARY
set -uo pipefail
FRONT="$1" BIN="$2"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fail=0 checked=0
declare -A FLAGS
if [ "$FRONT" = gantry ]; then
  GLOBAL="--coordinator --output"
  FLAGS=(
    [submit]="--wait" [jobs]="--state --limit --all" [describe]="" [cancel]="" [watch]="" [workers]=""
    [checkpoints]="" [export]="--step --out --dtype" [download]="--step --out" [sample]="--step --prompt --tokens"
    [health]="" [whoami]="" [principals]=""
    [plan]="--preset --n-layer --d-model --heads --arch --kv-heads --ffn-hidden --experts --top-k --moe-every
            --capacity-factor --vocab --ep --sequence-parallel --seq-len --params --gpus --gpu-memory --precision
            --fp32-grad-accum --zero --tp --pp --dp --micro-batch --microbatches --recompute --global-batch --device
            --ranks --cluster --layout --top"
  )
else
  GLOBAL=""
  FLAGS=(
    [train]="--init-from --save --resume --print-losses --threads --no-progress --stop-after --device --attention"
    [prepare]="--out-dir --val-fraction --val --documents --text-field --tokenizer --shard-tokens --threads --eot"
    [sample]="--from --prompt --tokens --temperature --top-k --seed --threads --tokenizer"
    [eval]="--from --data --seq-len --batch --batches --threads --logits"
    [export]="--checkpoint --out --dtype --tokenizer"
    [compare]=""
    [calibrate]="--threads --ranks --n-embd --heads --seq-len --rows --repeats --out --device --base --sizes
                 --fp32-sizes --gemm-sweep"
  )
fi

# The command line of COMMAND with more arguments: gantry-train's training is the program's own.
cmdline() { local c="$1"; shift; if [ "$c" = train ]; then echo "$BIN" JOB.yaml "$@"; else echo "$BIN" "$c" "$@"; fi; }

"$BIN" --help >"$TMP/overview" 2>&1 || { echo "FAIL $BIN --help: exit $?"; fail=1; }
for cmd in "${!FLAGS[@]}"; do
  if [ "$cmd" = train ]; then help="$TMP/overview"; else
    help="$TMP/$cmd.help"
    "$BIN" "$cmd" --help >"$help" 2>&1 || { echo "FAIL $cmd --help: exit $?"; sed 's/^/    /' "$help"; fail=1; continue; }
    grep -q "^  $cmd\b" "$TMP/overview" || { echo "FAIL $BIN --help does not list the command $cmd"; fail=1; }
  fi
  grep -q "^usage: $(basename "$BIN")" "$help" || { echo "FAIL $cmd --help has no usage line"; fail=1; }
  for flag in ${FLAGS[$cmd]} $GLOBAL; do
    checked=$((checked + 1))
    grep -qE "^  (-[a-z], )?$flag( |$)" "$help" || { echo "FAIL $cmd --help does not list $flag"; fail=1; }
  done
  # Every flag the help lists is one the command takes: given all at once, each with the value
  # "x", beside --help, none is unknown (a value a flag refuses is no error when help is asked).
  listed=$(grep -oE "^  (-[a-z], )?--[a-z0-9-]+" "$help" | grep -oE -- "--[a-z0-9-]+" | sed 's/$/=x/')
  $(cmdline "$cmd") --help $listed >"$TMP/out" 2>&1; rc=$?
  if [ $rc -ne 0 ] || grep -q "unknown flag" "$TMP/out"; then
    echo "FAIL $cmd --help with every flag it lists: rc=$rc"; sed 's/^/    /' "$TMP/out" | head -5; fail=1
  fi
done
# An unknown flag is refused, naming it and the command, and exit status 2.
$(cmdline sample) --no-such-flag >"$TMP/out" 2>&1; rc=$?
if [ $rc -ne 2 ] || ! grep -q "sample: unknown flag --no-such-flag ($(basename "$BIN") sample --help lists its flags)" "$TMP/out"; then
  echo "FAIL an unknown flag: rc=$rc"; sed 's/^/    /' "$TMP/out"; fail=1
fi
[ $fail -eq 0 ] && echo "help_test $FRONT: ${#FLAGS[@]} commands, $checked flags listed: passed"
exit $fail
