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
  if (header[1] != kTokenFileVersion && header[1] != kTokenFileVersionWide) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": unsupported version ", header[1],
                                                   ", expected 1 (uint16 tokens) or 2 (uint32 tokens)"));
  }
  const size_t width = header[1] == kTokenFileVersion ? 2 : 4;
  if (header[2] < 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": negative token count ", header[2]));
  }
  const size_t count = static_cast<size_t>(header[2]);
  const size_t body = bytes.size() - header_bytes;
  if (body != count * width) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": header says ", count, " tokens (", count * width, " bytes) but the body has ", body,
        " bytes", body < count * width ? " (truncated)" : " (trailing bytes)"));
  }
  TokenFile f;
  f.path_ = path;
  f.tokens_.resize(count);
  if (width == 4) {
    std::memcpy(f.tokens_.data(), bytes.data() + header_bytes, count * 4);
  } else {
    const auto* src = reinterpret_cast<const unsigned char*>(bytes.data() + header_bytes);
    for (size_t i = 0; i < count; ++i) f.tokens_[i] = static_cast<uint32_t>(src[2 * i]) | (static_cast<uint32_t>(src[2 * i + 1]) << 8);
  }
  if (vocab_size > 0) {
    for (size_t i = 0; i < count; ++i) {
      if (f.tokens_[i] >= static_cast<uint32_t>(vocab_size)) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": token ", f.tokens_[i],
                                                       " at position ", i,
                                                       " is outside the vocabulary (size ",
                                                       vocab_size, ")"));
      }
    }
  }
  return f;
}

namespace {

absl::Status WriteTokens(const std::string& path, int32_t version, size_t count, const void* body, size_t body_bytes) {
  if (count > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": too many tokens for one file"));
  }
  int32_t header[kTokenFileHeaderInts] = {0};
  header[0] = kTokenFileMagic;
  header[1] = version;
  header[2] = static_cast<int32_t>(count);
  std::string out(reinterpret_cast<const char*>(header), sizeof(header));
  out.append(static_cast<const char*>(body), body_bytes);
  return WriteFileAtomic(path, out);
}

}  // namespace

absl::Status WriteTokenFile(const std::string& path, const std::vector<uint16_t>& tokens) {
  return WriteTokens(path, kTokenFileVersion, tokens.size(), tokens.data(), tokens.size() * 2);
}

absl::Status WriteTokenFile(const std::string& path, const std::vector<uint32_t>& tokens, uint32_t vocab_size) {
  if (vocab_size > 65536) return WriteTokens(path, kTokenFileVersionWide, tokens.size(), tokens.data(), tokens.size() * 4);
  std::vector<uint16_t> narrow(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": token ", tokens[i], " at position ", i,
                                                     " is outside the vocabulary (size ", vocab_size, ")"));
    }
    narrow[i] = static_cast<uint16_t>(tokens[i]);
  }
  return WriteTokenFile(path, narrow);
}

}  // namespace gantry::data
