#!/usr/bin/env bash
# `gantry-train prepare` on the data people bring: plain files (a document each by default),
# JSON Lines through a BPE tokenizer (--text-field), a validation set from files of its own
# (--val, repeated or comma-separated), and none (--val-fraction 0). Usage: prepare_test.sh GANTRY_TRAIN
set -uo pipefail
BIN="$1"
FIX="tests/reference/fixtures/tokenizer"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fail=0; passed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
mkdir -p "$TMP/texts" "$TMP/held"
for i in 1 2 3 4; do printf 'Story %d, first paragraph.\n\nIts second paragraph.\n' "$i" >"$TMP/texts/s$i.txt"; done
printf 'A held-out story.\n' >"$TMP/held/h1.txt"
printf 'Another held-out story.\n' >"$TMP/held/h2.txt"

# 1. A document per file: 4 files, 4 documents (the paragraphs stay together).
"$BIN" prepare --val-fraction 0 --out-dir "$TMP/a" "$TMP/texts" >"$TMP/a.log" 2>/dev/null
if grep -q "prepared 4 documents from 4 files: .*train.bin (.* tokens), no validation set" "$TMP/a.log" && [ ! -e "$TMP/a/val.bin" ]; then
  ok "a document per file, no validation set: $(cat "$TMP/a.log")"
else bad "a document per file: $(cat "$TMP/a.log")"; fi
# ... and per paragraph with --documents paragraph.
"$BIN" prepare --val-fraction 0 --documents paragraph --out-dir "$TMP/b" "$TMP/texts" >"$TMP/b.log" 2>/dev/null
grep -q "prepared 8 documents from 4 files" "$TMP/b.log" && ok "--documents paragraph: 8 documents" || bad "--documents paragraph: $(cat "$TMP/b.log")"

# 2. The validation set from files of its own, named twice and comma-separated.
"$BIN" prepare --val "$TMP/held/h1.txt" --val "$TMP/held/h2.txt,$TMP/held/h1.txt" --out-dir "$TMP/c" "$TMP/texts" >"$TMP/c.log" 2>/dev/null
if grep -q "prepared 6 documents from 6 files" "$TMP/c.log" && [ -s "$TMP/c/val.bin" ]; then
  ok "--val: $(cat "$TMP/c.log")"
else bad "--val: $(cat "$TMP/c.log")"; fi

# 3. JSON Lines through a BPE tokenizer, the text in another field; the split 1 in 2.
for i in $(seq 1 6); do printf '{"id": %d, "body": "record %d says hello"}\n' "$i" "$i"; done >"$TMP/records.jsonl"
"$BIN" prepare --tokenizer "$FIX/bpe/tokenizer.json" --text-field body --val-fraction 0.5 --out-dir "$TMP/d" "$TMP/records.jsonl" >"$TMP/d.log" 2>/dev/null
if grep -q "prepared 6 documents from 1 files with .*val [0-9]* tokens in 1 shard" "$TMP/d.log" && [ -s "$TMP/d/val_000000.bin" ]; then
  ok "JSON Lines, --text-field body, BPE: $(cat "$TMP/d.log")"
else bad "JSON Lines through the tokenizer: $(cat "$TMP/d.log")"; fi

echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]
