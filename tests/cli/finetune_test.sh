#!/usr/bin/env bash
# The README's "fine-tune a Hugging Face model on your own text", end to end, on what the
# tests build themselves, for a GPT-2 and for a Llama: a base model (small, with the fixture
# BPE's 1000-token vocabulary, saved as a Hugging Face directory with the tokenizer beside it)
# in place of a download; text prepared with that directory's tokenizer; training --init-from
# it (the Llama's job spec states no model shape: config.json gives it); export; sample. With transformers importable (PYTHON, default python3), the export is loaded and
# its logits compared with gantry's (tests/reference/check_hf_export.py); without, the
# reason is printed. Usage: finetune_test.sh GANTRY_TRAIN
set -euo pipefail
BIN="$1"
PY="${PYTHON:-python3}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
FIX=tests/reference/fixtures/tokenizer
fail() { echo "FAIL: $*"; exit 1; }

walkthrough() {  # NAME BASE_MODEL FINETUNE_MODEL
  NAME="$1" BASE_MODEL="$2" FINETUNE_MODEL="$3"
  echo "== $NAME"
  rm -rf "$TMP/base-data" "$TMP/my-texts" "$TMP/data"
  # The base model: a few steps on the fixture corpus, saved with --save, tokenizer beside it.
  "$BIN" prepare --tokenizer "$FIX/bpe/tokenizer.json" --out-dir "$TMP/base-data" --shard-tokens 8000 --documents paragraph "$FIX/corpus.txt" >/dev/null 2>&1
  cat >"$TMP/base.yaml" <<YAML
model: {$BASE_MODEL}
data: {train: "$TMP/base-data/train_*.bin", shuffle: true, tokenizer: $FIX/bpe/tokenizer.json}
train: {steps: 5, micro_batch: 4, global_batch: 4, lr: 3.0e-3, seed: 1}
YAML
  "$BIN" "$TMP/base.yaml" --save "$TMP/$NAME" --no-progress >/dev/null
  cp "$FIX/bpe/tokenizer.json" "$TMP/$NAME/"

  # 1. "Your own text": paragraphs the corpus does not hold verbatim.
  mkdir -p "$TMP/my-texts"
  for i in $(seq 1 120); do
    printf 'Entry %d: the shard servers keep state for worker %d, and don'"'"'t lose it.\nIt'"'"'s line two of %d.\n\n' "$i" "$((i % 7))" "$i"
  done >"$TMP/my-texts/notes.txt"
  # 2. Prepare with the model directory's tokenizer.
  "$BIN" prepare --tokenizer "$TMP/$NAME" --out-dir "$TMP/data/mytext" --shard-tokens 2000 --documents paragraph "$TMP/my-texts/" \
    | tee "$TMP/prepare.log"
  grep -q "vocabulary 1000, uint16 ids" "$TMP/prepare.log" || fail "prepare did not use the model's tokenizer"
  ls "$TMP/data/mytext" | grep -q '^train_000001.bin$' || fail "no second train shard"
  # 3. Train from the model's weights, the data a glob of shards.
  cat >"$TMP/finetune.yaml" <<YAML
model: {$FINETUNE_MODEL}
data: {train: "$TMP/data/mytext/train_*.bin", val: "$TMP/data/mytext/val_*.bin", shuffle: true, tokenizer: $TMP/$NAME}
train: {steps: 20, micro_batch: 4, global_batch: 8, lr: 1.0e-3, warmup: 2, min_lr_ratio: 0.1, seed: 1}
eval: {every: 10, batches: 2}
checkpoint: {every: 20, dir: $TMP/runs/$NAME}
YAML
  "$BIN" "$TMP/finetune.yaml" --init-from "$TMP/$NAME" --no-progress | tee "$TMP/train.log" | grep -E '^(val|job)' || true
  first=$(grep '^val loss' "$TMP/train.log" | head -1 | awk '{print $3}')
  last=$(grep '^val loss' "$TMP/train.log" | tail -1 | awk '{print $3}')
  echo "val loss $first -> $last"
  awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f) }' || fail "val loss did not fall ($first -> $last)"
  # 4. Export (the job's tokenizer goes beside the model) and sample with it.
  "$BIN" export --checkpoint "$TMP/runs/$NAME/step_00000020" --out "$TMP/mytext-$NAME"
  cmp -s "$TMP/mytext-$NAME/tokenizer.json" "$FIX/bpe/tokenizer.json" || fail "the export's tokenizer.json is not the job's"
  out=$("$BIN" sample --from "$TMP/mytext-$NAME" --prompt "Entry 3: the" --tokens 12 --seed 2)
  echo "sample: $out"
  case "$out" in "Entry 3: the"?*) ;; *) fail "the sample does not continue the prompt" ;; esac
  # 5. Load it with transformers, where there is one: its logits on the first val row against
  # gantry-train eval's, and its tokenizer's ids against the prepared shard's.
  if "$PY" -c "import transformers, torch" 2>/dev/null; then
    "$BIN" eval --from "$TMP/mytext-$NAME" --data "$TMP/data/mytext/val_*.bin" --seq-len 32 --batch 1 --batches 1 \
      --logits "$TMP/logits.bin" >/dev/null
    "$PY" - "$TMP" "$NAME" <<'PY' || fail "transformers does not load the export as gantry runs it"
import sys, numpy as np, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
tmp, name = sys.argv[1], sys.argv[2]
model = AutoModelForCausalLM.from_pretrained(f"{tmp}/mytext-{name}").eval()
tok = AutoTokenizer.from_pretrained(f"{tmp}/mytext-{name}")
raw = open(f"{tmp}/data/mytext/val_000000.bin", "rb").read()
ids = np.frombuffer(raw[1024:], dtype=np.uint16).astype(np.int64)
with torch.no_grad():
    logits = model(torch.tensor(ids[None, :32])).logits[0].numpy()
ours = np.fromfile(f"{tmp}/logits.bin", dtype=np.float32).reshape(32, -1)
err = np.abs(ours - logits).max() / np.abs(logits).max()
print(f"transformers ({type(model).__name__}): logits within {err:.2e} of gantry's")
assert err <= 1e-4, err
text = "Entry 7: the shard servers keep state for worker 0, and don't lose it."
assert tok.decode(tok.encode(text)) == text
doc = tok.decode(ids[: list(ids).index(tok.convert_tokens_to_ids("<|endoftext|>"))])
assert tok.encode(doc) == list(ids[: len(tok.encode(doc))]), "the shard's ids are not the tokenizer's"
print("transformers: AutoTokenizer gives the prepared shard's ids")
PY
  else
    echo "not checked: loading the export with transformers ($PY has no transformers/torch; CI installs no PyTorch)"
  fi
}

walkthrough gpt2 "n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 1000, seq_len: 32" \
  "n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 1000, seq_len: 32"
walkthrough llama "arch: llama, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 32, ffn_hidden: 88, vocab_size: 1000, seq_len: 32, max_seq_len: 64, rope_theta: 500000.0" \
  "seq_len: 32"
echo "2 passed, 0 failed"
