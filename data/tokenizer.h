// Tokenizers: the built-in byte tokenizer (one token per byte, 0 = end of text), and byte-level
// BPE as Hugging Face's `tokenizers` runs it, loaded from a tokenizer.json or from GPT-2's
// vocab.json + merges.txt. Encode gives exactly HF's `encode(text, add_special_tokens=False)`
// ids: added (special) tokens split out first, each piece between them cut by the pre-tokenizer
// (GPT-2's or Llama 3's pattern over Unicode classes, data/unicode_classes.inc), its UTF-8 bytes
// mapped to byte tokens, then merged by rank. Decode joins the tokens' bytes, as HF's ByteLevel
// decoder does (invalid UTF-8 becomes U+FFFD).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gantry::data {

// Words already encoded, for one thread: a text's words repeat, and merging is the cost.
class EncodeCache {
 public:
  explicit EncodeCache(size_t max_words = 1 << 18) : max_words_(max_words) {}

 private:
  friend class Tokenizer;
  size_t max_words_;
  absl::flat_hash_map<std::string, std::vector<uint32_t>> words_;
};

class Tokenizer {
 public:
  // What the pre-tokenizer cuts a piece of text into before merging.
  enum class Split {
    kBytes,  // the byte tokenizer: no merging
    kGpt2,   // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
    kLlama3,  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
              // \s*[\r\n]+|\s+(?!\S)|\s+ (a Split before ByteLevel, as Llama 3's tokenizer.json)
    kWhole,   // ByteLevel with use_regex false and nothing before it: the piece whole
  };

  // The byte tokenizer: vocabulary 256, token = byte, byte 0 ends a document.
  static std::unique_ptr<Tokenizer> Bytes();
  // A tokenizer.json, GPT-2's vocab.json (with merges.txt beside it), or a directory holding
  // either. What it cannot run exactly (another model type, a normalizer, a pre-tokenizer
  // pattern it does not know, byte fallback) is an error naming the file and the part.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);

  // "bytes", or the path it was loaded from.
  const std::string& name() const { return name_; }
  // One past the largest id.
  uint32_t vocab_size() const { return static_cast<uint32_t>(bytes_.size()); }
  // The id that ends a document: the byte tokenizer's 0; a loaded one's "<|endoftext|>" or
  // "<|end_of_text|>", or -1 when it has neither (then `prepare --eot` must name one).
  int64_t end_of_text() const { return eot_; }
  // The id of a token given as its text (an added token's content, or a vocabulary entry's
  // bytes); -1 when there is none.
  int64_t Find(absl::string_view token) const;

  // Appends text's ids to out. cache may be null; one cache per thread.
  void Encode(absl::string_view text, std::vector<uint32_t>* out, EncodeCache* cache = nullptr) const;
  std::vector<uint32_t> Encode(absl::string_view text) const {
    std::vector<uint32_t> out;
    Encode(text, &out);
    return out;
  }
  // The text of ids; an id out of range is an error.
  absl::StatusOr<std::string> Decode(absl::Span<const uint32_t> ids) const;
  // One token's bytes (not necessarily valid UTF-8 alone); empty for an id out of range.
  absl::string_view TokenBytes(uint32_t id) const {
    return id < bytes_.size() ? absl::string_view(bytes_[id]) : absl::string_view();
  }
  // How a sampled token is shown: its bytes (the byte tokenizer's end of text: a separator line).
  std::string TokenText(uint32_t id) const;

 private:
  struct Added {
    std::string content;
    uint32_t id = 0;
    bool lstrip = false, rstrip = false, single_word = false;
  };
  struct Merge {
    uint32_t rank = 0, id = 0;
  };

  Tokenizer() = default;
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(const std::string& path);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromVocabMerges(const std::string& vocab_path,
                                                                    const std::string& merges_path);
  // Shared by both loaders once vocabulary and merges are read: the bytes of each token, the
  // byte tokens, the merge table; errors name `where`.
  absl::Status Finish(const std::string& where, const absl::flat_hash_map<std::string, uint32_t>& vocab,
                      const std::vector<std::pair<std::string, std::string>>& merges);

  // A piece of text with no added tokens in it.
  void EncodePiece(absl::string_view piece, std::vector<uint32_t>* out, EncodeCache* cache) const;
  // One pre-tokenized word's bytes, merged.
  void EncodeWord(absl::string_view word, std::vector<uint32_t>* out) const;
  // The next added token in text at or after from: its start, end (with lstrip/rstrip's
  // whitespace) and index in added_; false when there is none.
  bool NextAdded(absl::string_view text, size_t from, size_t* start, size_t* end, size_t* which) const;
  void IndexAdded();  // added_by_byte_ from added_

  std::string name_;
  Split split_ = Split::kBytes;
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;
  int64_t eot_ = -1;
  std::vector<std::string> bytes_;                       // id -> bytes
  absl::flat_hash_map<std::string, uint32_t> by_bytes_;  // bytes -> id (the model's vocabulary)
  uint32_t byte_id_[256] = {};
  absl::flat_hash_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> rank, merged id
  std::vector<Added> added_;
  std::vector<uint32_t> added_by_byte_[256];  // added_ by first byte, longest first
};

// The tokenizer of a model directory: `chosen` when given, else the directory's own
// (tokenizer.json, or vocab.json + merges.txt, as export writes them), else the byte
// tokenizer. One with more tokens than the model's vocabulary is an error.
absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerForModel(const std::string& model_dir, const std::string& chosen,
                                                              int model_vocab);

// The tokenizer at `source` (as Tokenizer::Load takes it) into out_dir as Hugging Face loads
// it beside a model: tokenizer.json copied; GPT-2's vocab.json + merges.txt copied and made
// into a tokenizer.json too (ByteLevel, GPT-2's pattern, "<|endoftext|>" special).
absl::Status ExportTokenizer(const std::string& source, const std::string& out_dir);

}  // namespace gantry::data
