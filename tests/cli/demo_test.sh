#!/usr/bin/env bash
# The bundled demo job end to end on the fortunes corpus: val loss from ~5.5 (ln 256) to
# below 2.0; the saved model samples text and evaluates. Usage: demo_test.sh GANTRY_TRAIN
set -euo pipefail
BIN="$1"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
if [ ! -d /usr/share/games/fortunes ]; then
  echo "FAIL: the fortunes corpus is missing: run scripts/setup.sh (Debian package fortunes)"; exit 1
fi
"$BIN" prepare --out-dir "$TMP/data" /usr/share/games/fortunes 2>/dev/null
sed -e "s|datasets/fortunes/|$TMP/data/|g" -e "s|runs/demo/checkpoints|$TMP/ckpt|" configs/demo.yaml >"$TMP/demo.yaml"
start=$(date +%s)
"$BIN" "$TMP/demo.yaml" --save "$TMP/model" --no-progress | tee "$TMP/log" | grep -E '^(val|job|checkpoint)'
secs=$(( $(date +%s) - start ))
first=$(grep '^val loss' "$TMP/log" | head -1 | awk '{print $3}')
last=$(grep '^val loss' "$TMP/log" | tail -1 | awk '{print $3}')
echo "val loss $first -> $last in ${secs}s"
awk -v f="$first" 'BEGIN { exit !(f > 5.3 && f < 5.7) }' || { echo "FAIL: initial val loss $first is not ~ln 256"; exit 1; }
awk -v l="$last" 'BEGIN { exit !(l < 2.0) }' || { echo "FAIL: final val loss $last is not below 2.0"; exit 1; }
ls "$TMP/ckpt" | grep -q step_ || { echo "FAIL: no checkpoint written"; exit 1; }
out=$("$BIN" sample --from "$TMP/model" --prompt "The " --tokens 80 --seed 3)
echo "sample: $out"
[ "${#out}" -ge 60 ] || { echo "FAIL: sample too short"; exit 1; }
"$BIN" eval --from "$TMP/model" --data "$TMP/data/val.bin" --seq-len 64 --batch 4 --batches 2
echo "1 passed, 0 failed"
