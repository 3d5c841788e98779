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

// A local file as a ByteSource (positioned reads).
absl::StatusOr<std::shared_ptr<const ByteSource>> OpenFileSource(const std::string& path);

absl::StatusOr<std::string> ReadFileToString(const std::string& path);
// Writes to PATH.tmp.<pid>, fsyncs, then renames over PATH: a reader sees the old file or
// the whole new one.
absl::Status WriteFileAtomic(const std::string& path, absl::string_view contents);
// The same with the contents in pieces, written in order (no copy into one buffer).
absl::Status WriteFileAtomic(const std::string& path, const std::vector<absl::string_view>& pieces);

}  // namespace gantry
