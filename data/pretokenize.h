// The pre-tokenizers' split of text into words, by hand rather than by a regex engine
// (docs/decisions.md: "Byte-level BPE without a regex engine"): GPT-2's and Llama 3's patterns,
// each alternative tried in order and greedy, as the engine does.
#pragma once

#include <cstddef>

#include "absl/strings/string_view.h"

namespace gantry::data {

// The patterns as tokenizer.json states them (a file with another pattern is refused).
extern const char kGpt2Pattern[];
extern const char kLlama3Pattern[];

// GPT-2's pattern at byte i of s: the length of the word that starts there (> 0).
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t Gpt2Word(absl::string_view s, size_t i);
// Llama 3's pattern at byte i of s: the length of the word that starts there (> 0).
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
size_t Llama3Word(absl::string_view s, size_t i);

}  // namespace gantry::data
