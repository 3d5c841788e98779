#pragma once

#include "absl/strings/string_view.h"
#include <memory>
#include <string>
#include <vector>
#include <string_view>

#include "absl/status/statusor.h"

namespace gantry {

// Where a file's bytes come from: a local file, memory, or a remote store (a shard server's
// checkpoint part); ReadAt of bytes beyond size() is an error.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual size_t size() const = 0;
  virtual absl::Status ReadAt(size_t offset, size_t n, void* dst) const = 0;
};

// Bytes held in memory as a ByteSource.
class StringSource final : public ByteSource {
 public:
  explicit StringSource(std::string bytes) : bytes_(std::move(bytes)) {}
  size_t size() const override { return bytes_.size(); }
  absl::Status ReadAt(size_t offset, size_t n, void* dst) const override;
  const std::string& bytes() const { return bytes_; }

 private:
  const std::string bytes_;
};

// A file made of runs of memory it does not own (a header string it keeps, then the data
// where it lies): streamed without assembling it. The runs must outlive the source.
class SegmentsSource final : public ByteSource {
 public:
  SegmentsSource(std::string head, std::vector<absl::string_view> runs);
  size_t size() const override { return size_; }
  absl::Status ReadAt(size_t offset, size_t n, void* dst) const override;

 private:
  const std::string head_;
  std::vector<absl::string_view> runs_;  // head_ first
  std::vector<size_t> starts_;           // each run's offset in the file
  size_t size_ = 0;
};

// A local file as a ByteSource (positioned reads).
absl::StatusOr<std::shared_ptr<const ByteSource>> OpenFileSource(const std::string& path);

absl::StatusOr<std::string> ReadFileToString(const std::string& path);
// Writes to PATH.tmp.<pid>, fsyncs, then renames over PATH: a reader sees the old file or
// the whole new one.
absl::Status WriteFileAtomic(const std::string& path, absl::string_view contents);
// The same with the contents in pieces, written in order (no copy into one buffer).
absl::Status WriteFileAtomic(const std::string& path, const std::vector<absl::string_view>& pieces);

}  // namespace gantry
