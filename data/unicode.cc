#include "data/unicode.h"

#include <algorithm>

namespace gantry::data {
namespace {

struct CodeRange {
  uint32_t lo, hi;
};
#include "data/unicode_classes.inc"

template <size_t N>
bool InRanges(const CodeRange (&r)[N], uint32_t cp) {
  const CodeRange* it = std::upper_bound(r, r + N, cp, [](uint32_t c, const CodeRange& x) { return c < x.lo; });
  return it != r && cp <= (it - 1)->hi;
}

// ASCII's classes, looked up; the rest by binary search of the generated ranges.
struct AsciiClasses {
  CharClass c[128];
  AsciiClasses() {
    for (uint32_t i = 0; i < 128; ++i) {
      c[i] = InRanges(kSpaceRanges, i) ? kSpace : InRanges(kLetterRanges, i) ? kLetter
                                               : InRanges(kNumberRanges, i) ? kNumber : kOther;
    }
  }
};
const AsciiClasses kAscii;

}  // namespace

CharClass ClassOf(uint32_t cp) {
  if (cp < 128) return kAscii.c[cp];
  if (InRanges(kLetterRanges, cp)) return kLetter;
  if (InRanges(kNumberRanges, cp)) return kNumber;
  if (InRanges(kSpaceRanges, cp)) return kSpace;
  return kOther;
}

// The code point at s[i] and its length in bytes. A byte that starts no valid UTF-8 sequence
// is one "character" of its own, of no class (the text came from a file; HF takes only str).
uint32_t NextCodePoint(absl::string_view s, size_t i, size_t* len) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  *len = 1;
  if (c < 0x80) return c;
  int n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
  if (n == 0 || i + n > s.size()) return 0xFFFFFFFF;
  uint32_t cp = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (int k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0xFFFFFFFF;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not valid.
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0xFFFFFFFF;
  }
  *len = static_cast<size_t>(n);
  return cp;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Invalid UTF-8 replaced by U+FFFD, one per maximal invalid prefix, as Rust's
// String::from_utf8_lossy (which HF's decoder ends with) does.
std::string Utf8Lossy(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    if (NextCodePoint(s, i, &len) != 0xFFFFFFFF) {
      out.append(s.data() + i, len);
      i += len;
      continue;
    }
    // The longest prefix of a valid sequence that starts here, dropped as one U+FFFD.
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned char c = b(i);
    const int n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 1;
    size_t k = 1;
    while (static_cast<int>(k) < n && i + k < s.size()) {
      const unsigned char d = b(i + k);
      unsigned char lo = 0x80, hi = 0xBF;  // the second byte's narrower ranges
      if (k == 1 && c == 0xE0) lo = 0xA0;
      if (k == 1 && c == 0xED) hi = 0x9F;
      if (k == 1 && c == 0xF0) lo = 0x90;
      if (k == 1 && c == 0xF4) hi = 0x8F;
      if (d < lo || d > hi) break;
      ++k;
    }
    out.append("\xEF\xBF\xBD");
    i += k;
  }
  return out;
}

}  // namespace gantry::data
