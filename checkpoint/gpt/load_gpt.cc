#include "checkpoint/gpt/load_gpt.h"

#include "common/status.h"

namespace gantry::checkpoint {

absl::StatusOr<CheckpointState> LoadCheckpoint(CheckpointSource& source, model::GPT& model, float* m, float* v,
                                               const std::vector<optim::ShardSegment>* own) {
  // Parameters straight into the model where the host addresses its memory, else into a
  // host copy written to the device once every piece is read (m and v: the caller's).
  std::vector<float> staged;
  if (!model.backend().Supports(kernels::Capability::kHostAddressable)) staged.resize(model.num_params());
  model.MarkParamsChanged();
  ASSIGN_OR_RETURN(CheckpointState s, ReadCheckpoint(source, model.config(), model.tensors(),
                                                     staged.empty() ? model.params() : staged.data(), m, v, own));
  if (!staged.empty()) {
    model.WriteParams(staged.data());
    RETURN_IF_ERROR(model.backend().Synchronize());
  }
  return s;
}

absl::StatusOr<CheckpointState> LoadCheckpoint(const std::string& path, model::GPT& model, float* m, float* v,
                                               const std::vector<optim::ShardSegment>* own) {
  return LoadCheckpoint(*DirectorySource(path), model, m, v, own);
}

}  // namespace gantry::checkpoint
