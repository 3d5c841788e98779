#include "worker/data/loader.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/rng.h"

namespace gantry::data {

absl::StatusOr<BatchLoader> BatchLoader::Create(const TokenFile* file, int B, int T,
                                                uint64_t seed, bool shuffle) {
  BatchLoader l;
  l.file_ = file;
  l.B_ = B;
  l.T_ = T;
  l.seed_ = seed;
  l.shuffle_ = shuffle;
  const int64_t bt = static_cast<int64_t>(B) * T;
  if (file->size() < static_cast<size_t>(bt + 1)) {
    return absl::InvalidArgumentError(absl::StrCat(file->path(), ": ", file->size(),
                                                   " tokens, fewer than one batch needs (B*T+1 = ",
                                                   bt + 1, ")"));
  }
  l.num_windows_ = static_cast<int64_t>((file->size() - 1) / static_cast<size_t>(bt));
  return l;
}

int64_t BatchLoader::WindowFor(int64_t index) {
  const int64_t epoch = index / num_windows_;
  const int64_t i = index % num_windows_;
  if (!shuffle_) return i;
  if (epoch != perm_epoch_) {
    perm_.resize(static_cast<size_t>(num_windows_));
    std::iota(perm_.begin(), perm_.end(), 0);
    Rng rng(MixSeed(seed_, 0x5348554646ull /* "SHUFF" */, static_cast<uint64_t>(epoch)));
    for (int64_t j = num_windows_ - 1; j > 0; --j) {
      const int64_t r = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(j + 1)));
      std::swap(perm_[static_cast<size_t>(j)], perm_[static_cast<size_t>(r)]);
    }
    perm_epoch_ = epoch;
  }
  return perm_[static_cast<size_t>(i)];
}

void BatchLoader::Fill(int64_t index, int32_t* inputs, int32_t* targets) {
  const int64_t bt = static_cast<int64_t>(B_) * T_;
  const uint16_t* src = file_->data() + WindowFor(index) * bt;
  for (int64_t i = 0; i < bt; ++i) {
    inputs[i] = src[i];
    targets[i] = src[i + 1];
  }
}

}  // namespace gantry::data
