// Asynchronous checkpoint writes: at a checkpoint the step loop copies the rank's pieces
// (parameters, m, v) into host memory and goes on; a writer thread writes each copy in order
// (what "write" means is the trainer's: stream to the shard servers, or a local directory).
// The copies held at once stay within a byte budget: beyond it the step loop waits for
// earlier writes, and a copy that alone exceeds it is written from the live buffers, now.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "common/buffer.h"
#include "checkpoint/checkpoint.h"

namespace gantry::checkpoint {

class CheckpointWriter {
 public:
  using WriteFn = std::function<absl::Status(int64_t step, const std::vector<CheckpointPiece>& pieces)>;
  CheckpointWriter(double budget_bytes, WriteFn write) : budget_(budget_bytes), write_(std::move(write)) {}
  ~CheckpointWriter();  // writes what is queued, then stops

  // Queues a copy of `live` for step (or writes from it now, when no copy fits the budget).
  // An earlier write's failure is returned here, at the next checkpoint.
  absl::Status Snapshot(int64_t step, const std::vector<CheckpointPiece>& live);
  // Waits for every queued write; the first error.
  absl::Status Flush();

 private:
  struct Copy {
    int64_t step = 0;
    FloatBuffer data;  // params, m, v of every piece, piece after piece
    std::vector<CheckpointPiece> pieces;
  };
  void Loop();

  const double budget_;
  const WriteFn write_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Copy> queue_;
  FloatBuffer spare_;  // the last written copy's buffer, reused by the next
  size_t queued_bytes_ = 0;
  bool busy_ = false, stop_ = false;
  absl::Status status_;
  std::thread thread_;
};

}  // namespace gantry::checkpoint
