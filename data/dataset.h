// A dataset: the token shards that a glob names (llm.c's format, data/token_file.h),
// memory-mapped, read as rows of T+1 tokens. Row r of a shard is its tokens [r*T, r*T+T+1):
// inputs the first T, targets the last T. Rows do not cross shards.
//
// The k-th row read is a pure function of (seed, k): epoch k / rows(), and within it a
// permutation of all the shards' rows drawn from (seed, epoch) (a keyed bijection: nothing is
// stored, any k is computed directly). A micro-batch is B consecutive reads, so a step reads
// the same rows whatever its layout (dp, micro-batch, accumulation), ranks read disjoint rows,
// and a run that resumes at read k continues the uninterrupted run's sequence. Unshuffled, the
// reads are the rows in order: llm.c's loader's batches, for any B.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gantry::data {

class Dataset {
 public:
  // pattern: a file or a glob ("data/train_*.bin"), its matches sorted. Every shard's header
  // and length are checked at once; ids against vocab_size (> 0) too when the whole dataset
  // is at most kEagerCheckTokens, else each row as it is read. Errors name the shard.
  static absl::StatusOr<std::unique_ptr<Dataset>> Open(const std::string& pattern, int T, uint32_t vocab_size);
  static constexpr int64_t kEagerCheckTokens = int64_t{1} << 28;
  ~Dataset();

  const std::string& pattern() const { return pattern_; }
  int seq_len() const { return T_; }
  size_t num_shards() const { return shards_.size(); }
  const std::string& shard_path(size_t i) const { return shards_[i].path; }
  int64_t tokens() const;
  // Rows of T+1 tokens in all shards.
  int64_t rows() const { return row_start_.back(); }

  // The row that read k maps to (global row index: shards in order).
  int64_t RowFor(int64_t k, uint64_t seed, bool shuffle) const;
  // Reads k .. k+B-1 into inputs (B*T) and targets (B*T).
  absl::Status Fill(int64_t k, int B, uint64_t seed, bool shuffle, int32_t* inputs, int32_t* targets) const;
  // Asks the kernel to read the pages of reads k .. k+B-1 now (madvise WILLNEED), so that a
  // later Fill of them finds them in memory: the disk reads overlap the step.
  void Prefetch(int64_t k, int B, uint64_t seed, bool shuffle) const;

 private:
  struct Shard {
    std::string path;
    const unsigned char* map = nullptr;  // the whole file
    size_t map_bytes = 0;
    int64_t tokens = 0;
    int width = 2;  // bytes per id
    uint32_t Token(int64_t i) const;
  };
  Dataset() = default;
  absl::Status CheckIds(const Shard& s, int64_t begin, int64_t end) const;
  // The shard of global row `row`, and the row's first token in it.
  const Shard& Locate(int64_t row, int64_t* first) const;

  std::string pattern_;
  int T_ = 0;
  uint32_t vocab_ = 0;
  bool lazy_check_ = false;
  std::vector<Shard> shards_;
  std::vector<int64_t> row_start_{0};  // shard i's rows are [row_start_[i], row_start_[i+1])
};

}  // namespace gantry::data
