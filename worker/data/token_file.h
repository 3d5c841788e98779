// The llm.c token format: a 256 x int32 header (magic 20240520, version 1, token count,
// the rest zero) followed by the tokens as little-endian uint16.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gantry::data {

constexpr int32_t kTokenFileMagic = 20240520;
constexpr int32_t kTokenFileVersion = 1;
constexpr size_t kTokenFileHeaderInts = 256;

class TokenFile {
 public:
  // Reads and validates the whole file: magic, version, the body's length against the
  // header's count, and (if vocab_size > 0) every token < vocab_size. Errors name the file.
  static absl::StatusOr<TokenFile> Open(const std::string& path, int vocab_size);

  const std::string& path() const { return path_; }
  size_t size() const { return tokens_.size(); }
  const uint16_t* data() const { return tokens_.data(); }

 private:
  std::string path_;
  std::vector<uint16_t> tokens_;
};

absl::Status WriteTokenFile(const std::string& path, const std::vector<uint16_t>& tokens);

}  // namespace gantry::data
