// Turns a text corpus into train/val token files with the byte-level tokenizer.
#pragma once

#include "absl/strings/string_view.h"
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gantry::data {

// The byte-level tokenizer: token = byte value (vocabulary 256). Byte 0 never appears in
// text and separates documents (GPT-2's <|endoftext|> plays that part).
constexpr uint16_t kEndOfText = 0;
std::vector<uint16_t> EncodeBytes(absl::string_view text);
std::string DecodeBytes(const std::vector<uint16_t>& tokens);
// How a sampled token is shown to a person: its byte, and end-of-text as a fortune
// separator line.
std::string TokenText(uint16_t token);

struct PrepareOptions {
  std::vector<std::string> inputs;  // files, or directories (their text files, sorted)
  std::string out_dir;
  double val_fraction = 0.05;  // every round(1/f)-th document goes to val
};

struct PrepareResult {
  int64_t files = 0;
  int64_t documents = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  std::string train_path, val_path;
};

// Documents: in a file of fortune format (entries separated by lines holding only "%"),
// each entry; otherwise each paragraph (blank-line separated). Binary files are skipped.
absl::StatusOr<PrepareResult> Prepare(const PrepareOptions& options,
                                      const std::function<void(const std::string&)>& progress);

}  // namespace gantry::data
