// The llm.c token format: a 256 x int32 header (magic 20240520, version, token count, the
// rest zero) followed by the tokens, little-endian: version 1 uint16 (a vocabulary of at most
// 65536, GPT-2's), version 2 uint32 (larger ones, Llama 3's), as llm.c writes them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gantry::data {

constexpr int32_t kTokenFileMagic = 20240520;
constexpr int32_t kTokenFileVersion = 1;      // uint16 tokens
constexpr int32_t kTokenFileVersionWide = 2;  // uint32 tokens
constexpr size_t kTokenFileHeaderInts = 256;

// A token file's layout, read from its header.
struct TokenFileLayout {
  int64_t tokens = 0;
  int width = 2;  // bytes per id: 2 (version 1) or 4 (version 2)
};
// The header of a token file of file_bytes bytes starting at data (at least the header's 1024
// when file_bytes allows): magic, version, the count, and the body's length against it.
// Errors name path.
absl::StatusOr<TokenFileLayout> ReadTokenFileHeader(const std::string& path, const unsigned char* data,
                                                    size_t file_bytes);
// Id i of a body of ids `width` bytes wide, little-endian.
inline uint32_t TokenAt(const unsigned char* body, int width, int64_t i) {
  const unsigned char* p = body + static_cast<size_t>(i) * static_cast<size_t>(width);
  uint32_t v = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8);
  if (width == 4) v |= (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
  return v;
}

class TokenFile {
 public:
  // Reads and validates the whole file: magic, version, the body's length against the
  // header's count, and (if vocab_size > 0) every token < vocab_size. Errors name the file.
  static absl::StatusOr<TokenFile> Open(const std::string& path, int vocab_size);

  const std::string& path() const { return path_; }
  size_t size() const { return tokens_.size(); }
  const uint32_t* data() const { return tokens_.data(); }

 private:
  std::string path_;
  std::vector<uint32_t> tokens_;
};

absl::Status WriteTokenFile(const std::string& path, const std::vector<uint16_t>& tokens);
// Version 1 when every id fits 16 bits of a vocabulary of vocab_size, else version 2.
absl::Status WriteTokenFile(const std::string& path, const std::vector<uint32_t>& tokens, uint32_t vocab_size);

}  // namespace gantry::data
