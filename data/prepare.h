// Turns a text corpus into train/val token files: with the byte tokenizer (train.bin and
// val.bin), or with a byte-level BPE (data/tokenizer.h) into shards of llm.c's format,
// encoded on every core.
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

// Where one document ends and the next begins (an end-of-text token between them):
//   file       a whole file (the default; the convention of fine-tuning corpora)
//   paragraph  each blank-line separated paragraph
//   line       each non-blank line
// Whatever the cut, a file of fortune format (entries separated by lines holding only "%")
// gives its entries (line: its lines), and a JSON Lines file (.jsonl, .ndjson) its records.
enum class DocumentCut { kFile, kParagraph, kLine };
absl::StatusOr<DocumentCut> ParseDocumentCut(absl::string_view name);

struct PrepareOptions {
  std::vector<std::string> inputs;  // files, or directories (their text files, sorted)
  std::string out_dir;
  // Every round(1/f)-th document of the inputs goes to val; 0: no validation split (no val
  // file), as with val_inputs.
  double val_fraction = 0.05;
  // A validation set from files of its own (then val_fraction must be 0): every document of
  // them goes to val, every document of `inputs` to train.
  std::vector<std::string> val_inputs;
  DocumentCut documents = DocumentCut::kFile;
  std::string text_field = "text";  // JSON Lines: the field holding each record's text
  // A tokenizer.json, vocab.json, or a directory with either (Tokenizer::Load); empty: the
  // byte tokenizer. With one, the output is train_000000.bin, ... and val_000000.bin, ...,
  // and the tokenizer beside them (ExportTokenizer: tokenizer.json, and GPT-2's two files).
  std::string tokenizer;
  int64_t shard_tokens = 100'000'000;  // tokens per shard (llm.c's fineweb shards: 1e8)
  int threads = 0;                     // encoding threads; 0: one per core
  std::string eot;                     // the token that ends a document; empty: the tokenizer's
};

struct PrepareResult {
  int64_t files = 0;
  int64_t documents = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  std::string train_path, val_path;  // the first shard of each (val: empty without a validation set)
  std::vector<std::string> train_shards, val_shards;
  uint32_t vocab_size = 0;
  int token_bytes = 2;  // 2 (version 1 files) or 4 (version 2)
};

// Documents as options.documents cuts them. Binary files are skipped. A JSON Lines record
// that does not parse, or lacks the text field, is an error naming the file and line.
// progress gets a line per file read; bytes, when given, the bytes encoded of the total.
absl::StatusOr<PrepareResult> Prepare(const PrepareOptions& options,
                                      const std::function<void(const std::string&)>& progress,
                                      const std::function<void(int64_t done, int64_t total)>& bytes = nullptr);

}  // namespace gantry::data
