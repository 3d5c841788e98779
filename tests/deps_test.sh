#!/usr/bin/env bash
# The library rules hold on this tree, and the check fails when one is broken: a forbidden
# link (the coordinator linking the trainer, the CLI Gloo; in CMake's link graph, the checkpoint
# format reaching the model, gantry's commands library the sampler's) and a forbidden include
# (the checkpoint format using the model, the job spec using the model, the model the trainer,
# the communicator interface the model, the shard server using RocksDB other than through
# common/rocks.h), a retired name (a folder, a
# library, a type under the namespace it left), an alias of another namespace's type, a
# GANTRY_CUDA_NS file that does not say its namespace, a source file defining in a namespace
# neither its folder's nor listed (a new file, a new nested namespace), a GPU result checked by
# hand (compared with its success value, `!= cudaSuccess`, `ncclSuccess !=`, `case cudaSuccess:`;
# a Status built on `!GpuOk(x)`; the library's error words taken by hand), a test folder that
# mirrors no source folder, a backend op added without the decision record's count, and a
# backend's capability flag beside Backend::Supports, each added to what is checked without
# touching the tree.
set -uo pipefail
BUILD="$1"
SRC="$(cd "$(dirname "$0")/.." && pwd)"
check() { python3 "$SRC/scripts/check_deps.py" --build "$BUILD" --source "$SRC" "$@"; }
fail=0
check || { echo "FAIL: the tree breaks a library rule"; fail=1; }
# A source file that .gitignore hides builds here and is missing from every clone (data/ once
# was: a clean clone failed to configure). Only files outside the build and bundle folders count.
if git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1; then
  hidden="$(git -C "$SRC" ls-files --others --ignored --exclude-standard |
    grep -Ev '^(build[^/]*|\.c?bundle|venv|\.venv|runs|datasets|\.whl|\.gl)/|__pycache__/|\.pyc$|^\.c?bundle\.t[gx]z$' |
    grep -E '(\.(cc|h|cu|cuh|inc|proto|py|sh|yaml|txt|md)|CMakeLists\.txt)$')"
  if [ -n "$hidden" ]; then
    echo "FAIL: .gitignore hides source files a clone would lack:"; echo "$hidden"; fail=1
  fi
fi
# Each breach, and the words its own rule answers with (an injection may trip another rule too:
# appended after a file's last namespace, its text is also in the global namespace).
while IFS='|' read -r expect inject; do
  out="$(check "${inject%% *}" "${inject#* }" </dev/null)"
  rc=$?
  echo "$out"
  if [ $rc -ne 1 ] || ! grep -qF "$expect" <<<"$out"; then
    echo "FAIL: check_deps did not answer \"$expect\" to $inject"
    fail=1
  fi
done <<'EOF'
must not|--inject-link coordinator/gantry-coordinator=worker/libgantry_train.a
must not|--inject-link cli/gantry=/usr/lib/x86_64-linux-gnu/libgloo.so
must not|--inject-link gantry_checkpoint=gantry_model
must not|--inject-link gantry_cli=gantry_cli_model
must not|--inject-include checkpoint/checkpoint.cc=model/gpt.h
must not|--inject-include jobspec/job_spec.cc=model/gpt.h
must not|--inject-include coordinator/cluster.cc=kernels/adamw.h
must not|--inject-include model/gpt.cc=worker/train/trainer.h
must not|--inject-include comm/groups.cc=model/gpt.h
must not|--inject-include shardserver/service.cc=rocksdb/db.h
is retired|--inject-text comm/nccl/nccl_communicator.h=// Process groups (parallel/groups.h)
is retired|--inject-text tests/CMakeLists.txt=target_link_libraries(x_test gantry_parallel_nccl)
no longer holds|--inject-text bench/load/shard_streams.h=// the real client (agent::UploadSources)
no longer holds|--inject-text docs/architecture.md=train::AdamW
an alias keeps|--inject-text optim/adamw.h=using AdamWConfig = kernels::AdamWConfig;
does not say|--inject-text kernels/cuda/new_op.cu=namespace gantry::GANTRY_CUDA_NS {
defines in namespace|--inject-text model/new_layer.h=namespace gantry::train { struct Layer { int n = 0; }; }
defines in namespace|--inject-text coordinator/gc.cc=namespace gantry::coordinator::gc { void Sweep() {} }
defines in namespace|--inject-text data/loose.cc=int Loose() { return 1; }
compared by hand|--inject-text comm/nccl/nccl_communicator.cc=  if (cudaFree(p) != cudaSuccess) return absl::InternalError("x");
compared by hand|--inject-text comm/nccl/nccl_communicator.cc=  if (ncclSuccess != ncclCommAbort(c)) return absl::InternalError("abort");
compared by hand|--inject-text kernels/cuda/gelu.cu=  switch (e) { case cudaSuccess: break; default: return absl::InternalError("x"); }
compared by hand|--inject-text kernels/cuda/gelu.cu=  if (!GpuOk(cudaFree(p))) return absl::InternalError("cudaFree failed");
compared by hand|--inject-text kernels/cuda/gelu.cu=  if (!GpuOk(e)) { LOG(ERROR) << "free"; return absl::Status(absl::StatusCode::kInternal, "x"); }
compared by hand|--inject-text kernels/cuda/gelu.cu=  return absl::InternalError(cudaGetErrorString(e));
capability flag|--inject-text kernels/backend.h=  virtual bool fused_attention() const = 0;
capability flag|--inject-text kernels/cpu/backend.cc=  bool host_addressable() const override { return true; }
pure virtuals|--inject-text kernels/backend.h=  virtual void NewOp(float* out, int n) = 0;
names no source folder|--inject-text tests/optimizer/adamw_test.cc=// AdamW's tests, beside no optimizer/
names no source folder|--inject-text tests/worker/session/session_test.cc=// a session's tests, beside no worker/session/
EOF
[ $fail -eq 0 ] && echo "library_dependencies: the rules hold, and a forbidden link, include, retired name, alias, unsaid namespace, file in a namespace not its folder's, hand check, capability flag, uncounted backend op or test folder beside no source folder fails the check"
exit $fail
