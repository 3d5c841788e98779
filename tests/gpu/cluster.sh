#!/usr/bin/env bash
# The whole cluster on a GPU (issue 36, item 8): a coordinator, a shard server and a
# gantry-worker --device cuda on loopback; a bf16 GPT job submitted with the gantry CLI,
# watched to the end, its checkpoints listed, exported, sampled from. The GPU host has no
# gRPC/RocksDB packages, so the daemons and CLIs travel in the GPU suite's bundle
# (tests/gpu/run.sh bundle puts them under .bundle/build/, the build tree's layout that
# deploy/local/cluster.sh's GANTRY_BIN names), and tests/gpu/check.sh runs this last:
#   bash tests/gpu/cluster.sh bundle       here: the same as tests/gpu/run.sh bundle
#   bash tests/gpu/cluster.sh run [DEVICE] on the GPU host, from the repository root with
#                                          .bundle.txz carried: the job on a worker of DEVICE
#                                          (cuda; cuda-emulated runs the same here, without a
#                                          GPU, against the build tree)
# Each check prints PASS or FAIL; the last line counts them.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT="$PWD"
source tests/gpu/env.sh
B_DIR=.bundle
case "${1:-}" in
  bundle)
    exec bash tests/gpu/run.sh bundle
    ;;
  run)
    DEVICE="${2:-cuda}"
    if [ "$DEVICE" = cuda ]; then
      gpu_bundle_unpack "$B_DIR"
      export GANTRY_BIN="$ROOT/$B_DIR/build"
      gpu_bundle_env "$ROOT/$B_DIR/lib"
    else
      export GANTRY_BIN="${GANTRY_BIN:-$ROOT/build}"
    fi
    BIN="$GANTRY_BIN/cli"
    TMP="$(mktemp -d)"
    pass=0; fail=0
    check() {  # check NAME COMMAND...: PASS or FAIL
      local name="$1"; shift
      if "$@" >>"$TMP/checks.log" 2>&1; then echo "PASS $name"; pass=$((pass + 1)); else echo "FAIL $name"; fail=$((fail + 1)); fi
    }
    # A corpus the host has: this repository's text, a document per paragraph in the fortunes'
    # format (a line of % between them; the GPU host has no fortunes).
    cat README.md docs/*.md | sed 's/^%$/%%/; s/^$/%/' >"$TMP/corpus.txt"
    "$BIN/gantry-train" prepare --out-dir "$TMP/data" "$TMP/corpus.txt" >"$TMP/prepare.log" 2>&1 ||
      { echo "FAIL prepare"; cat "$TMP/prepare.log"; exit 1; }
    # On a GPU a 4 x 256 GPT for 200 steps; on the emulator a 2 x 64 one for 40 (its kernels run
    # on the CPU).
    if [ "$DEVICE" = cuda ]; then SIZE="n_layer: 4, n_head: 4, n_embd: 256"; STEPS=200; B=16; T=128
    else SIZE="n_layer: 2, n_head: 2, n_embd: 64"; STEPS=40; B=4; T=32; fi
    cat >"$TMP/job.yaml" <<YAML
name: gpu-cluster-check
model: {$SIZE, vocab_size: 256, seq_len: $T}
data: {train: $TMP/data/train.bin, val: $TMP/data/val.bin, shuffle: true}
train: {steps: $STEPS, micro_batch: $B, global_batch: $B, lr: 3.0e-3, warmup: 5, min_lr_ratio: 0.1, seed: 7, precision: bf16}
eval: {every: $((STEPS / 2)), batches: 4}
checkpoint: {every: $((STEPS / 2)), dir: $TMP/unused}
resources: {device: $DEVICE}
YAML
    bash deploy/local/cluster.sh start --dir "$TMP/cluster" --workers 1 --shardservers 1 --devices "$DEVICE" \
      >"$TMP/cluster.log" 2>&1 || { echo "FAIL cluster start"; cat "$TMP/cluster.log"; exit 1; }
    trap 'bash deploy/local/cluster.sh stop --dir "$TMP/cluster" >/dev/null 2>&1' EXIT
    source "$TMP/cluster/env"
    check "gantry workers lists the $DEVICE worker" bash -c "'$BIN/gantry' workers | tee /dev/stderr | grep -q '$DEVICE'"
    timeout "${GANTRY_GPU_CLUSTER_TIMEOUT:-600}" "$BIN/gantry" submit "$TMP/job.yaml" --wait >"$TMP/watch.log" 2>&1
    echo "--- the job, watched:"; grep -E "PENDING|RUNNING|placed|step +(1|$((STEPS / 2))|$STEPS)/|committed|SUCCEEDED|FAILED" "$TMP/watch.log" | head -20
    JOB=$(grep -m1 -o 'j-[0-9]*' "$TMP/watch.log")
    check "the job succeeds on the $DEVICE worker" grep -q SUCCEEDED "$TMP/watch.log"
    check "its loss falls" bash -c "awk '/^step/ {for (i = 1; i <= NF; ++i) if (\$i == \"loss\") l[n++] = \$(i + 1)} END {exit !(n >= 2 && l[n - 1] < 0.8 * l[0])}' '$TMP/watch.log'"
    check "its checkpoints are listed (the last at step $STEPS)" bash -c "'$BIN/gantry' checkpoints $JOB | tee /dev/stderr | grep -q '^$STEPS '"
    check "it exports a Hugging Face model" bash -c "'$BIN/gantry' export $JOB -o '$TMP/model' && [ -s '$TMP/model/model.safetensors' ]"
    check "it samples" bash -c "'$BIN/gantry' sample $JOB --prompt 'The GPU' --tokens 64 | tee /dev/stderr | grep -q ."
    echo "$pass passed, $fail failed"
    [ "$fail" -eq 0 ]
    ;;
  *)
    echo "usage: tests/gpu/cluster.sh bundle|run [cuda|cuda-emulated]" >&2; exit 2 ;;
esac
