// Parameter-server mode's side on a rank (optimizer.placement: shardserver): AdamW runs on the
// shard servers, each over its range of the flat buffer. The engine (zero.h) reduces and clips
// the gradients as its ZeRO stage does; this class pushes the rank's own pieces to the servers
// (the push completing a range runs AdamW there before it answers), reads the new parameters
// back after a barrier, every staleness + 1 steps, and reads the servers' m and v for a
// checkpoint. The rank holds no optimizer state, only a resumed state waiting to be sent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "common/buffer.h"
#include "model/gpt.h"

namespace gantry::train {

// The shard servers' optimizer, as a rank calls it (worker/agent/param_client.h implements it
// over the data port; tests in process).
class RemoteOptimizer {
 public:
  virtual ~RemoteOptimizer() = default;
  // Sets the servers' ranges up with these parameters (whole flat buffer) and, on a resume,
  // AdamW's m and v (null: zeros) and the steps already applied. Rank 0 calls it once.
  virtual absl::Status Init(const float* params, const float* m, const float* v, int64_t step) = 0;
  // The reduced, clipped gradient of flat elements [begin, end), for the 1-based step.
  virtual absl::Status Push(int step, double lr, const float* grads, size_t begin, size_t end) = 0;
  // The whole parameter buffer as the servers hold it now.
  virtual absl::Status Pull(float* params) = 0;
  // AdamW's m and v of flat elements [begin, end), for a checkpoint.
  virtual absl::Status ReadState(size_t begin, size_t end, float* m, float* v) = 0;
};

class RemoteParams {
 public:
  // staleness: how many steps behind the servers the parameters may be; barrier: the DP
  // group's (collective).
  RemoteParams(RemoteOptimizer* remote, model::GPT* model, int rank, int staleness,
               std::function<absl::Status()> barrier)
      : remote_(remote), model_(model), rank_(rank), staleness_(std::max(0, staleness)), barrier_(std::move(barrier)) {}

  // The optimizer state of the whole flat buffer, from a checkpoint, for Start to send.
  void KeepState(const float* m, const float* v);
  // Rank 0 sets the servers up with the model's parameters (and the kept state, at
  // start_step); then every rank waits for it (collective).
  absl::Status Start(int64_t start_step);
  // Brings the parameters up to the servers' (collective); a no-op when they are current.
  absl::Status Sync();
  // One step's push of the rank's pieces of the reduced gradient (each scaled by coef
  // first), then a pull when the parameters would fall more than `staleness` steps behind.
  struct GradPiece {
    float* grads;  // the piece's gradients, in the model's backend's memory
    size_t flat_begin, flat_end;
  };
  absl::Status PushAndPull(const std::vector<GradPiece>& pieces, float coef, double lr, int step);
  // A checkpoint's pieces for these flat ranges: the parameters as the servers hold them, m
  // and v read from the servers (valid until the next call). The parameters may be device
  // pointers; the caller stages them to the host.
  absl::StatusOr<std::vector<checkpoint::CheckpointPiece>> Pieces(const std::vector<std::pair<size_t, size_t>>& ranges);

 private:
  RemoteOptimizer* remote_;
  model::GPT* model_;
  const int rank_, staleness_;
  std::function<absl::Status()> barrier_;
  int64_t pulled_step_ = 0, pushed_step_ = 0;  // the servers' step the parameters are at, and the last pushed
  FloatBuffer m_, v_;  // resumed state to send, or a checkpoint's pieces
};

}  // namespace gantry::train
