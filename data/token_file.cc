#include "data/token_file.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status.h"

namespace gantry::data {

absl::StatusOr<TokenFileLayout> ReadTokenFileHeader(const std::string& path, const unsigned char* data,
                                                    size_t file_bytes) {
  const size_t header_bytes = kTokenFileHeaderInts * sizeof(int32_t);
  if (file_bytes < header_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", file_bytes, " bytes, shorter than the 1024-byte header"));
  }
  int32_t header[3];
  std::memcpy(header, data, sizeof(header));
  if (header[0] != kTokenFileMagic) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": bad magic ", header[0], ", expected ",
                                                   kTokenFileMagic, " (not an llm.c token file)"));
  }
  if (header[1] != kTokenFileVersion && header[1] != kTokenFileVersionWide) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": unsupported version ", header[1],
                                                   ", expected 1 (uint16 tokens) or 2 (uint32 tokens)"));
  }
  if (header[2] < 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": negative token count ", header[2]));
  }
  TokenFileLayout l;
  l.width = header[1] == kTokenFileVersion ? 2 : 4;
  l.tokens = header[2];
  const size_t body = file_bytes - header_bytes, want = static_cast<size_t>(l.tokens) * static_cast<size_t>(l.width);
  if (body != want) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header says ", l.tokens, " tokens (", want,
                                                   " bytes) but the body has ", body, " bytes",
                                                   body < want ? " (truncated)" : " (trailing bytes)"));
  }
  return l;
}

absl::StatusOr<TokenFile> TokenFile::Open(const std::string& path, int vocab_size) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  ASSIGN_OR_RETURN(const TokenFileLayout l, ReadTokenFileHeader(path, data, bytes.size()));
  const size_t count = static_cast<size_t>(l.tokens);
  TokenFile f;
  f.path_ = path;
  f.tokens_.resize(count);
  const unsigned char* body = data + kTokenFileHeaderInts * sizeof(int32_t);
  for (size_t i = 0; i < count; ++i) f.tokens_[i] = TokenAt(body, l.width, static_cast<int64_t>(i));
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
