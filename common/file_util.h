#pragma once

#include "absl/strings/string_view.h"
#include <string>
#include <vector>
#include <string_view>

#include "absl/status/statusor.h"

namespace gantry {

absl::StatusOr<std::string> ReadFileToString(const std::string& path);
// Writes to PATH.tmp.<pid>, fsyncs, then renames over PATH: a reader sees the old file or
// the whole new one.
absl::Status WriteFileAtomic(const std::string& path, absl::string_view contents);
// The same with the contents in pieces, written in order (no copy into one buffer).
absl::Status WriteFileAtomic(const std::string& path, const std::vector<absl::string_view>& pieces);

}  // namespace gantry
