#!/usr/bin/env bash
# Bad input to gantry-train: each case must exit with status 2 and print exactly one line on
# stderr that names the field, file or tensor at fault. Usage: bad_input_test.sh GANTRY_TRAIN
set -uo pipefail
BIN="$1"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fail=0; passed=0

# expect_error NAME NEEDLE CMD...: exit 2, one stderr line containing NEEDLE.
expect_error() {
  local name="$1" needle="$2"; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  local lines; lines=$(wc -l <"$TMP/err")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$needle" "$TMP/err"; then
    echo "FAIL $name: rc=$rc lines=$lines want '$needle' in:"; sed 's/^/    /' "$TMP/err"
    fail=$((fail + 1))
  else
    echo "ok   $name: $(cat "$TMP/err")"
    passed=$((passed + 1))
  fi
}

# A tiny valid corpus and spec.
for i in $(seq 1 60); do printf 'line %d of the corpus, some words\n%%\n' "$i"; done >"$TMP/corpus"
"$BIN" prepare --out-dir "$TMP/data" --val-fraction 0.2 "$TMP/corpus" >/dev/null 2>&1 || { echo "prepare failed"; exit 1; }
spec() {  # spec FILE [extra train fields] [data.train path]
  cat >"$1" <<YAML
model: {n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 16}
data: {train: ${3:-$TMP/data/train.bin}, val: $TMP/data/val.bin}
train: {steps: 1, micro_batch: 2, lr: 1.0e-3${2:-}}
YAML
}
spec "$TMP/ok.yaml"
"$BIN" "$TMP/ok.yaml" --save "$TMP/model" --no-progress >/dev/null 2>&1 || { echo "valid spec failed to train"; exit 1; }

spec "$TMP/unknown.yaml" ", lrr: 3"
expect_error "unknown field" "unknown field 'train.lrr'" "$BIN" "$TMP/unknown.yaml"
spec "$TMP/typed.yaml" ", steps: ten"
sed -i 's/steps: 1, //' "$TMP/typed.yaml"
expect_error "ill-typed field" "'train.steps' must be an integer, got 'ten'" "$BIN" "$TMP/typed.yaml"
expect_error "missing spec" "nope.yaml: no such file" "$BIN" "$TMP/nope.yaml"
spec "$TMP/nodata.yaml" "" "$TMP/data/missing.bin"
expect_error "missing data file" "missing.bin: no such file" "$BIN" "$TMP/nodata.yaml"

cp "$TMP/data/train.bin" "$TMP/magic.bin"; printf '\x00\x00\x00\x00' | dd of="$TMP/magic.bin" conv=notrunc status=none
spec "$TMP/magic.yaml" "" "$TMP/magic.bin"
expect_error "bad magic" "magic.bin: bad magic 0" "$BIN" "$TMP/magic.yaml"

head -c 2000 "$TMP/data/train.bin" >"$TMP/trunc.bin"
spec "$TMP/trunc.yaml" "" "$TMP/trunc.bin"
expect_error "truncated body" "trunc.bin: header says" "$BIN" "$TMP/trunc.yaml"
expect_error "export of a missing checkpoint" "nockpt/manifest.json: no such file" "$BIN" export --checkpoint "$TMP/nockpt" --out "$TMP/out"
expect_error "export without --out" "export: --checkpoint DIR and --out OUT are required" "$BIN" export --checkpoint "$TMP/nockpt"
expect_error "export to an unknown dtype" "--dtype is 'fp8': fp32 or bf16" "$BIN" export --checkpoint "$TMP/nockpt" --out "$TMP/out" --dtype fp8
spec "$TMP/prec.yaml" ", precision: fp8"
expect_error "unknown precision" "field 'train.precision' is 'fp8': fp32, bf16 or fp16" "$BIN" "$TMP/prec.yaml"

cp "$TMP/data/train.bin" "$TMP/vocab.bin"; printf '\xff\x7f' | dd of="$TMP/vocab.bin" bs=1 seek=1100 conv=notrunc status=none
spec "$TMP/vocab.yaml" "" "$TMP/vocab.bin"
expect_error "token >= vocab" "token 32767 at position 38 is outside the vocabulary (size 256)" "$BIN" "$TMP/vocab.yaml"

# Safetensors: a tensor of the wrong shape (config claims 32 positions, wpe holds 16).
cp -r "$TMP/model" "$TMP/shape"; sed -i 's/"n_positions": 16/"n_positions": 32/' "$TMP/shape/config.json"
sed 's/seq_len: 16}/seq_len: 16, max_seq_len: 32}/' "$TMP/ok.yaml" >"$TMP/shape.yaml"
expect_error "wrong tensor shape" "tensor 'wpe.weight' has shape [16, 16], expected [32, 16]" "$BIN" "$TMP/shape.yaml" --init-from "$TMP/shape"

# A missing tensor: rename ln_f.bias in the header (same length, so offsets stay valid).
cp -r "$TMP/model" "$TMP/missing"; LC_ALL=C sed -i 's/"ln_f\.bias"/"ln_f.xxxx"/' "$TMP/missing/model.safetensors"
expect_error "missing tensor" "missing tensor 'ln_f.bias'" "$BIN" "$TMP/ok.yaml" --init-from "$TMP/missing"

cp -r "$TMP/model" "$TMP/cut"; truncate -s 5000 "$TMP/cut/model.safetensors"
expect_error "truncated safetensors" "model.safetensors: tensor" "$BIN" "$TMP/ok.yaml" --init-from "$TMP/cut"

# --init-from: the model keys come from config.json; those the spec states must agree with it.
sed 's/n_embd: 16/n_embd: 32/' "$TMP/ok.yaml" >"$TMP/other.yaml"
expect_error "spec disagrees with --init-from" "field 'model.n_embd' is 32 but $TMP/model/config.json says 16" \
  "$BIN" "$TMP/other.yaml" --init-from "$TMP/model"
sed 's/^model: .*/model: {seq_len: 32}/' "$TMP/ok.yaml" >"$TMP/long.yaml"
expect_error "seq_len past --init-from's positions" "field 'model.seq_len' 32 exceeds model.max_seq_len 16" \
  "$BIN" "$TMP/long.yaml" --init-from "$TMP/model"
sed 's/^model: .*/model: {seq_len: 8}/' "$TMP/ok.yaml" >"$TMP/short.yaml"
if "$BIN" "$TMP/short.yaml" --init-from "$TMP/model" --no-progress >"$TMP/out" 2>"$TMP/err"; then
  echo "ok   a spec stating seq_len alone trains from --init-from's model"; passed=$((passed + 1))
else
  echo "FAIL a spec stating seq_len alone, --init-from: rc=$?"; sed 's/^/    /' "$TMP/err"; fail=$((fail + 1))
fi
expect_error "spec without a model, no --init-from" "field 'model.n_layer' is required" "$BIN" "$TMP/short.yaml"

expect_error "sample without model" "config.json: no such file" "$BIN" sample --from "$TMP/nothing"
expect_error "unknown flag" "unknown flag --bogus" "$BIN" "$TMP/ok.yaml" --bogus
expect_error "missing tokenizer" "tokenizer $TMP/no-tokenizer.json: no such file" "$BIN" prepare --tokenizer "$TMP/no-tokenizer.json" --out-dir "$TMP/tok" "$TMP/corpus"
printf '{"model": {"type": "Unigram", "vocab": []}}' >"$TMP/unigram.json"
expect_error "tokenizer of another kind" "unigram.json: model type Unigram is not supported" "$BIN" prepare --tokenizer "$TMP/unigram.json" --out-dir "$TMP/tok" "$TMP/corpus"
expect_error "bad shard size" "--shard-tokens must be at least 1" "$BIN" prepare --tokenizer "$TMP/unigram.json" --shard-tokens 0 --out-dir "$TMP/tok" "$TMP/corpus"
expect_error "unknown document cut" "--documents sentence is not file, paragraph or line" "$BIN" prepare --documents sentence --out-dir "$TMP/p" "$TMP/corpus"
printf '{"text": "fine"}\n{"text": 3}\n' >"$TMP/records.jsonl"
expect_error "a record whose text is not a string" "records.jsonl:2: field \"text\" is number, not a string" "$BIN" prepare --val-fraction 0 --out-dir "$TMP/p" "$TMP/records.jsonl"
expect_error "a text field no record has" "records.jsonl:1: the record has no field \"body\"" "$BIN" prepare --text-field body --val-fraction 0 --out-dir "$TMP/p" "$TMP/records.jsonl"
expect_error "two ways to choose the validation set" "--val and --val-fraction both choose the validation set" "$BIN" prepare --val "$TMP/corpus" --val-fraction 0.1 --out-dir "$TMP/p" "$TMP/corpus"
printf 'one plain file, one document\n' >"$TMP/plain.txt"
# (prepare's progress lines, "  FILE: N documents", are not the error: left out here)
expect_error "one document, a split asked for" "1 document is too few for a validation split of 1 in 20" \
  bash -c '"$0" prepare --out-dir "$1" "$2" 2>&1 >/dev/null | grep -v "^  " >&2; exit "${PIPESTATUS[0]}"' "$BIN" "$TMP/p" "$TMP/plain.txt"

echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]
