#include "data/dataset.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/rng.h"
#include "common/status.h"
#include "data/token_file.h"

namespace gantry::data {
namespace {

// A keyed bijection of [0, n): a 4-round Feistel network on the smallest even number of bits
// that covers n, walked until it lands inside (fewer than 4 steps expected).
int64_t Permute(int64_t x, int64_t n, uint64_t key) {
  int half = 1;
  while ((int64_t{1} << (2 * half)) < n) ++half;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  uint64_t v = static_cast<uint64_t>(x);
  do {
    uint64_t l = v >> half, r = v & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = MixSeed(key, round, r) & mask;
      const uint64_t next = l ^ f;
      l = r;
      r = next;
    }
    v = (l << half) | r;
  } while (v >= static_cast<uint64_t>(n));
  return static_cast<int64_t>(v);
}

}  // namespace

uint32_t Dataset::Shard::Token(int64_t i) const { return TokenAt(map + kTokenFileHeaderInts * 4, width, i); }

Dataset::~Dataset() {
  for (Shard& s : shards_) {
    if (s.map != nullptr) munmap(const_cast<unsigned char*>(s.map), s.map_bytes);
  }
}

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::Open(const std::string& pattern, int T, uint32_t vocab_size) {
  if (T < 1) return absl::InvalidArgumentError(absl::StrCat(pattern, ": sequence length ", T));
  std::unique_ptr<Dataset> d(new Dataset());
  d->pattern_ = pattern;
  d->T_ = T;
  d->vocab_ = vocab_size;
  std::vector<std::string> paths;
  glob_t g;
  const int rc = glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  if (rc == GLOB_NOMATCH || paths.empty()) {
    return absl::NotFoundError(absl::StrCat(pattern, ": no such file (nor shards matching it)"));
  }
  if (rc != 0) return absl::UnavailableError(absl::StrCat(pattern, ": the glob could not be read"));
  std::sort(paths.begin(), paths.end());
  int64_t total = 0;
  for (const std::string& path : paths) {
    Shard s;
    s.path = path;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
    struct stat st;
    if (fstat(fd, &st) != 0) {
      close(fd);
      return absl::UnavailableError(absl::StrCat(path, ": ", std::strerror(errno)));
    }
    s.map_bytes = static_cast<size_t>(st.st_size);
    void* m = s.map_bytes > 0 ? mmap(nullptr, s.map_bytes, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
    close(fd);
    if (m == MAP_FAILED) return absl::UnavailableError(absl::StrCat(path, ": mmap: ", std::strerror(errno)));
    s.map = static_cast<const unsigned char*>(m);
    d->shards_.push_back(s);  // unmapped by ~Dataset from here on, whatever follows
    Shard& back = d->shards_.back();
    ASSIGN_OR_RETURN(const TokenFileLayout l, ReadTokenFileHeader(path, back.map, back.map_bytes));
    back.tokens = l.tokens;
    back.width = l.width;
    total += back.tokens;
    const int64_t rows = back.tokens > T ? (back.tokens - 1) / T : 0;
    d->row_start_.push_back(d->row_start_.back() + rows);
  }
  if (d->rows() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(pattern, ": ", total, " tokens in ", paths.size(),
                                                   " shard(s), no shard with a whole row (T+1 = ", T + 1, " tokens)"));
  }
  d->lazy_check_ = vocab_size > 0 && total > kEagerCheckTokens;
  if (vocab_size > 0 && !d->lazy_check_) {
    for (const Shard& s : d->shards_) {
      if (absl::Status st = d->CheckIds(s, 0, s.tokens); !st.ok()) return st;
    }
  }
  return d;
}

int64_t Dataset::tokens() const {
  int64_t n = 0;
  for (const Shard& s : shards_) n += s.tokens;
  return n;
}

absl::Status Dataset::CheckIds(const Shard& s, int64_t begin, int64_t end) const {
  for (int64_t i = begin; i < end; ++i) {
    if (const uint32_t t = s.Token(i); t >= vocab_) {
      return absl::InvalidArgumentError(absl::StrCat(s.path, ": token ", t, " at position ", i,
                                                     " is outside the vocabulary (size ", vocab_, ")"));
    }
  }
  return absl::OkStatus();
}

int64_t Dataset::RowFor(int64_t k, uint64_t seed, bool shuffle) const {
  const int64_t n = rows(), epoch = k / n, i = k % n;
  if (!shuffle) return i;
  return Permute(i, n, MixSeed(seed, 0x524f5753ull /* "ROWS" */, static_cast<uint64_t>(epoch)));
}

const Dataset::Shard& Dataset::Locate(int64_t row, int64_t* first) const {
  const size_t si = static_cast<size_t>(std::upper_bound(row_start_.begin(), row_start_.end(), row) - row_start_.begin() - 1);
  *first = (row - row_start_[si]) * T_;
  return shards_[si];
}

void Dataset::Prefetch(int64_t k, int B, uint64_t seed, bool shuffle) const {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (int b = 0; b < B; ++b) {
    int64_t first = 0;
    const Shard& s = Locate(RowFor(k + b, seed, shuffle), &first);
    const size_t begin = kTokenFileHeaderInts * 4 + static_cast<size_t>(first) * static_cast<size_t>(s.width);
    const size_t end = begin + static_cast<size_t>(T_ + 1) * static_cast<size_t>(s.width);
    const size_t aligned = begin / page * page;
    madvise(const_cast<unsigned char*>(s.map) + aligned, end - aligned, MADV_WILLNEED);  // advice: failure is harmless
  }
}

absl::Status Dataset::Fill(int64_t k, int B, uint64_t seed, bool shuffle, int32_t* inputs, int32_t* targets) const {
  for (int b = 0; b < B; ++b) {
    int64_t first = 0;
    const Shard& s = Locate(RowFor(k + b, seed, shuffle), &first);
    if (lazy_check_) {
      if (absl::Status st = CheckIds(s, first, first + T_ + 1); !st.ok()) return st;
    }
    int32_t* in = inputs + static_cast<size_t>(b) * T_;
    int32_t* tg = targets + static_cast<size_t>(b) * T_;
    uint32_t prev = s.Token(first);
    for (int t = 0; t < T_; ++t) {
      const uint32_t next = s.Token(first + t + 1);
      in[t] = static_cast<int32_t>(prev);
      tg[t] = static_cast<int32_t>(next);
      prev = next;
    }
  }
  return absl::OkStatus();
}

}  // namespace gantry::data
