#include "data/pretokenize.h"

#include "absl/strings/match.h"
#include "data/unicode.h"

namespace gantry::data {

const char kGpt2Pattern[] = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char kLlama3Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GPT-2's pattern at byte i of s: the length of the word that starts there (> 0).
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// The alternatives are tried in order, each greedy, as the regex engine does.
size_t Gpt2Word(absl::string_view s, size_t i) {
  const Chars chars{s};
  if (s[i] == '\'' && i + 1 < s.size()) {
    const absl::string_view rest = s.substr(i + 1);
    for (absl::string_view c : {"s", "t", "re", "ve", "m", "ll", "d"}) {
      if (absl::StartsWith(rest, c)) return 1 + c.size();
    }
  }
  size_t len = 0;
  // ` ?X+` for X = letters, numbers, or neither nor space.
  size_t j = i;
  if (s[j] == ' ' && j + 1 < s.size()) ++j;
  const CharClass first = chars.At(j, &len);
  if (j > i && first == kSpace) j = i;  // the optional space, then a space: no ` ?X+` here
  const CharClass want = j > i ? first : chars.At(i, &len);
  if (want != kSpace) {
    size_t k = j;
    while (k < s.size()) {
      const CharClass c = chars.At(k, &len);
      if (c != want) break;
      k += len;
    }
    return k - i;
  }
  // \s+(?!\S) then \s+: a run of spaces; one that a non-space follows gives back its last
  // character to that word (unless that leaves nothing).
  size_t k = i, last = i;
  while (k < s.size()) {
    if (chars.At(k, &len) != kSpace) break;
    last = k;
    k += len;
  }
  if (k < s.size() && last > i) return last - i;
  return k - i;
}

// Llama 3's pattern at byte i of s: the length of the word that starts there (> 0).
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
size_t Llama3Word(absl::string_view s, size_t i) {
  const Chars chars{s};
  size_t len = 0, len0 = 0;
  auto newline = [&](size_t k) { return s[k] == '\r' || s[k] == '\n'; };
  if (s[i] == '\'' && i + 1 < s.size()) {  // the contractions, in any case (U+017F folds to s)
    size_t k = i + 1;
    auto fold = [&](size_t at, size_t* n) -> char {
      *n = 1;
      if (at >= s.size()) return 0;
      if (static_cast<unsigned char>(s[at]) == 0xC5 && at + 1 < s.size() && static_cast<unsigned char>(s[at + 1]) == 0xBF) {
        *n = 2;
        return 's';
      }
      const char c = s[at];
      return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    };
    size_t n1 = 0, n2 = 0;
    const char a = fold(k, &n1), b = fold(k + n1, &n2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 1 + n1;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 1 + n1 + n2;
  }
  const CharClass c0 = chars.At(i, &len0);
  auto run = [&](size_t k, CharClass want, size_t most) {
    size_t n = 0;
    while (k < s.size() && n < most && chars.At(k, &len) == want) k += len, ++n;
    return k;
  };
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c0 != kLetter && c0 != kNumber && !newline(i) && i + len0 < s.size() && chars.At(i + len0, &len) == kLetter) {
    return run(i + len0, kLetter, SIZE_MAX) - i;
  }
  if (c0 == kLetter) return run(i, kLetter, SIZE_MAX) - i;
  if (c0 == kNumber) return run(i, kNumber, 3) - i;  // \p{N}{1,3}
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  size_t j = i;
  if (s[i] == ' ' && i + 1 < s.size() && chars.At(i + 1, &len) == kOther) j = i + 1;
  if (chars.At(j, &len) == kOther) {
    size_t k = run(j, kOther, SIZE_MAX);
    while (k < s.size() && newline(k)) ++k;
    return k - i;
  }
  // c0 is a space. \s*[\r\n]+: the run up to its last newline; else as GPT-2's.
  size_t k = i, last = i, after_newline = 0;
  while (k < s.size()) {
    if (chars.At(k, &len) != kSpace) break;
    if (newline(k)) after_newline = k + 1;
    last = k;
    k += len;
  }
  if (after_newline > 0) return after_newline - i;
  if (k < s.size() && last > i) return last - i;
  return k - i;
}

}  // namespace gantry::data
