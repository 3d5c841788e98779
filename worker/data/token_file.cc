#include "worker/data/token_file.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status.h"

namespace gantry::data {

absl::StatusOr<TokenFile> TokenFile::Open(const std::string& path, int vocab_size) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  const size_t header_bytes = kTokenFileHeaderInts * sizeof(int32_t);
  if (bytes.size() < header_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", bytes.size(),
                                                   " bytes, shorter than the 1024-byte header"));
  }
  int32_t header[kTokenFileHeaderInts];
  std::memcpy(header, bytes.data(), header_bytes);
  if (header[0] != kTokenFileMagic) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": bad magic ", header[0], ", expected ",
                                                   kTokenFileMagic, " (not an llm.c token file)"));
  }
  if (header[1] != kTokenFileVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": unsupported version ", header[1], ", expected 1 (uint16 tokens)"));
  }
  if (header[2] < 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": negative token count ", header[2]));
  }
  const size_t count = static_cast<size_t>(header[2]);
  const size_t body = bytes.size() - header_bytes;
  if (body != count * 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": header says ", count, " tokens (", count * 2, " bytes) but the body has ", body,
        " bytes", body < count * 2 ? " (truncated)" : " (trailing bytes)"));
  }
  TokenFile f;
  f.path_ = path;
  f.tokens_.resize(count);
  std::memcpy(f.tokens_.data(), bytes.data() + header_bytes, count * 2);
  if (vocab_size > 0) {
    for (size_t i = 0; i < count; ++i) {
      if (f.tokens_[i] >= vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": token ", f.tokens_[i],
                                                       " at position ", i,
                                                       " is outside the vocabulary (size ",
                                                       vocab_size, ")"));
      }
    }
  }
  return f;
}

absl::Status WriteTokenFile(const std::string& path, const std::vector<uint16_t>& tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": too many tokens for one file"));
  }
  int32_t header[kTokenFileHeaderInts] = {0};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  std::string out(reinterpret_cast<const char*>(header), sizeof(header));
  out.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  return WriteFileAtomic(path, out);
}

}  // namespace gantry::data
