// Batches the way llm.c's loader does: window w is the B*T+1 tokens starting at w*B*T;
// inputs are its first B*T tokens as B rows of T, targets the same shifted by one.
// The k-th window a run reads is a pure function of (seed, k): with shuffling, each epoch
// is a permutation of the windows drawn from (seed, epoch). So a step's batch follows from
// (seed, step, rank) alone, and a resumed run reads exactly what the uninterrupted one would.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/token_file.h"

namespace gantry::data {

class BatchLoader {
 public:
  static absl::StatusOr<BatchLoader> Create(const TokenFile* file, int B, int T, uint64_t seed,
                                            bool shuffle);

  int64_t num_windows() const { return num_windows_; }
  // Fills inputs (B*T) and targets (B*T) with the index-th window of the stream.
  void Fill(int64_t index, int32_t* inputs, int32_t* targets);
  // The window that the index-th read maps to.
  int64_t WindowFor(int64_t index);

 private:
  const TokenFile* file_ = nullptr;
  int B_ = 0, T_ = 0;
  uint64_t seed_ = 0;
  bool shuffle_ = false;
  int64_t num_windows_ = 0;
  int64_t perm_epoch_ = -1;
  std::vector<int64_t> perm_;
};

}  // namespace gantry::data
