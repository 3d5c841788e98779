#!/usr/bin/env bash
# The library rules hold on this tree, and the check fails when one is broken: a forbidden
# link (the coordinator linking the trainer, the CLI Gloo) and a forbidden include (the job spec
# using the model, the model the trainer, the communicator interface the model, the shard
# server using RocksDB other than through common/rocks.h), each added to
# what is checked without touching the tree.
set -uo pipefail
BUILD="$1"
SRC="$(cd "$(dirname "$0")/.." && pwd)"
check() { python3 "$SRC/scripts/check_deps.py" --build "$BUILD" --source "$SRC" "$@"; }
fail=0
check || { echo "FAIL: the tree breaks a library rule"; fail=1; }
for inject in "--inject-link coordinator/gantry-coordinator=worker/libgantry_train.a" \
              "--inject-link cli/gantry=/usr/lib/x86_64-linux-gnu/libgloo.so" \
              "--inject-include jobspec/job_spec.cc=model/gpt.h" \
              "--inject-include coordinator/cluster.cc=kernels/adamw.h" \
              "--inject-include model/gpt.cc=worker/train/trainer.h" \
              "--inject-include comm/groups.cc=model/gpt.h" \
              "--inject-include shardserver/service.cc=rocksdb/db.h"; do
  out="$(check $inject)"
  rc=$?
  echo "$out"
  if [ $rc -ne 1 ] || ! grep -q "must not" <<<"$out"; then
    echo "FAIL: check_deps passed with $inject"
    fail=1
  fi
done
[ $fail -eq 0 ] && echo "library_dependencies: the rules hold, and a forbidden link or include fails the check"
exit $fail
