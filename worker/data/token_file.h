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
