#include "data/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/status.h"
#include "data/pretokenize.h"
#include "data/unicode.h"
#include "nlohmann/json.hpp"

namespace gantry::data {
namespace {

namespace fs = std::filesystem;

// GPT-2's map of the 256 bytes to printable characters, and back.
struct ByteChars {
  uint32_t to_char[256];
  absl::flat_hash_map<uint32_t, uint8_t> to_byte;
  ByteChars() {
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? b : 256 + n++;
      to_byte[to_char[b]] = static_cast<uint8_t>(b);
    }
  }
};
const ByteChars& TheByteChars() {
  static const ByteChars* m = new ByteChars();
  return *m;
}

// A vocabulary entry's bytes: each character mapped back to its byte, or, where one is not a
// byte character (an added token such as "<|endoftext|>" with a space in it), the entry's own
// UTF-8 bytes, as HF's ByteLevel decoder does.
std::string EntryBytes(absl::string_view entry) {
  const ByteChars& m = TheByteChars();
  std::string out;
  size_t len = 0;
  for (size_t i = 0; i < entry.size(); i += len) {
    const uint32_t cp = NextCodePoint(entry, i, &len);
    auto it = m.to_byte.find(cp);
    if (it == m.to_byte.end()) return std::string(entry);
    out.push_back(static_cast<char>(it->second));
  }
  return out;
}

// GPT-2's merges.txt: "a b" a line, ranked by order, after an optional "#version" line.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ReadMergesTxt(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  std::vector<std::pair<std::string, std::string>> merges;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && absl::StartsWith(line, "#version"))) continue;
    const size_t sp = line.find(' ', 1);
    if (sp == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": not a merge (\"a b\")"));
    }
    merges.emplace_back(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)));
  }
  return merges;
}

// Ids at or past this are refused: the model's vocabulary ends there (GPTConfig::Validate),
// and an id sizes the tokenizer's tables, so one read from a file must not be 4 billion.
constexpr uint32_t kMaxTokenId = 1u << 24;

// An id from the file: a non-negative integer below kMaxTokenId. json's get<uint32_t> would
// wrap a negative one and convert a float past 2^32 with undefined behaviour.
absl::StatusOr<uint32_t> TokenId(const nlohmann::json& v, const std::string& where, absl::string_view token) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() >= kMaxTokenId) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": token \"", token, "\" has id ", v.dump(),
                                                   ", not an integer in [0, ", kMaxTokenId, ")"));
  }
  return static_cast<uint32_t>(v.get<uint64_t>());
}

absl::Status Unsupported(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what, " is not supported (gantry runs byte-level BPE ",
                                                 "with GPT-2's or Llama 3's pre-tokenizer; see docs/data.md)"));
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::Bytes() {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->name_ = "bytes";
  t->split_ = Split::kBytes;
  t->eot_ = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    t->bytes_.emplace_back(1, static_cast<char>(b));
    t->byte_id_[b] = b;
    t->by_bytes_[t->bytes_.back()] = b;
  }
  return t;
}

namespace {

// A tokenizer's files: a tokenizer.json (json), or GPT-2's vocab.json + merges.txt; path is
// either file or a directory holding them (tokenizer.json first). Missing files are errors.
struct TokenizerFiles {
  fs::path json, vocab, merges;
};
absl::StatusOr<TokenizerFiles> FindTokenizerFiles(const std::string& path) {
  std::error_code ec;
  TokenizerFiles f;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) {
    if (fs::exists(p / "tokenizer.json", ec)) {
      f.json = p / "tokenizer.json";
    } else if (fs::exists(p / "vocab.json", ec) && fs::exists(p / "merges.txt", ec)) {
      f.vocab = p / "vocab.json";
      f.merges = p / "merges.txt";
    } else {
      return absl::NotFoundError(absl::StrCat(path, ": holds neither tokenizer.json nor vocab.json + merges.txt"));
    }
    return f;
  }
  if (!fs::exists(p, ec)) return absl::NotFoundError(absl::StrCat("tokenizer ", path, ": no such file or directory"));
  if (p.filename() == "vocab.json") {
    f.vocab = p;
    f.merges = p.parent_path() / "merges.txt";
    if (!fs::exists(f.merges, ec)) return absl::NotFoundError(absl::StrCat(path, ": no merges.txt beside it"));
  } else {
    f.json = p;
  }
  return f;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  ASSIGN_OR_RETURN(const TokenizerFiles f, FindTokenizerFiles(path));
  return f.json.empty() ? FromVocabMerges(f.vocab.string(), f.merges.string()) : FromJson(f.json.string());
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not JSON: ", e.what()));
  }
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->name_ = path;
  try {
    const auto& model = j.at("model");
    const std::string type = model.value("type", std::string("BPE"));
    if (type != "BPE") return Unsupported(path, absl::StrCat("model type ", type));
    if (model.value("byte_fallback", false)) return Unsupported(path, "byte_fallback (a SentencePiece-style BPE)");
    if (!model.value("continuing_subword_prefix", nlohmann::json()).is_null() &&
        !model["continuing_subword_prefix"].get<std::string>().empty()) {
      return Unsupported(path, "continuing_subword_prefix");
    }
    if (!model.value("end_of_word_suffix", nlohmann::json()).is_null() &&
        !model["end_of_word_suffix"].get<std::string>().empty()) {
      return Unsupported(path, "end_of_word_suffix");
    }
    if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() != 0.0) {
      return Unsupported(path, "BPE dropout");
    }
    t->ignore_merges_ = model.value("ignore_merges", false);
    if (j.contains("normalizer") && !j["normalizer"].is_null()) {
      return Unsupported(path, absl::StrCat("normalizer ", j["normalizer"].value("type", std::string("?"))));
    }
    // The pre-tokenizer: ByteLevel (its own GPT-2 pattern, or none), alone or after a Split by
    // GPT-2's pattern.
    const nlohmann::json pre = j.value("pre_tokenizer", nlohmann::json());
    auto byte_level = [&](const nlohmann::json& p, bool after_split) -> absl::Status {
      t->add_prefix_space_ = p.value("add_prefix_space", false);
      const bool regex = p.value("use_regex", true);
      if (after_split && regex) return Unsupported(path, "a Split followed by ByteLevel with use_regex");
      if (!after_split) t->split_ = regex ? Split::kGpt2 : Split::kWhole;
      return absl::OkStatus();
    };
    if (pre.is_null()) {
      return Unsupported(path, "a missing pre_tokenizer (byte-level BPE needs ByteLevel)");
    } else if (pre.value("type", std::string()) == "ByteLevel") {
      RETURN_IF_ERROR(byte_level(pre, false));
    } else if (pre.value("type", std::string()) == "Sequence") {
      const auto& seq = pre.at("pretokenizers");
      if (seq.size() != 2 || seq[0].value("type", std::string()) != "Split" ||
          seq[1].value("type", std::string()) != "ByteLevel") {
        return Unsupported(path, absl::StrCat("the pre-tokenizer sequence ", seq.dump()));
      }
      const auto& split = seq[0];
      const std::string pattern = split.at("pattern").value("Regex", std::string());
      if (pattern != kGpt2Pattern && pattern != kLlama3Pattern) {
        return Unsupported(path, absl::StrCat("the Split pattern ", pattern));
      }
      if (split.value("behavior", std::string()) != "Isolated" || split.value("invert", false)) {
        return Unsupported(path, "a Split that does not isolate its matches");
      }
      t->split_ = pattern == kGpt2Pattern ? Split::kGpt2 : Split::kLlama3;
      RETURN_IF_ERROR(byte_level(seq[1], true));
    } else {
      return Unsupported(path, absl::StrCat("pre_tokenizer ", pre.value("type", std::string("?"))));
    }
    const nlohmann::json dec = j.value("decoder", nlohmann::json());
    if (!dec.is_null() && dec.value("type", std::string()) != "ByteLevel") {
      return Unsupported(path, absl::StrCat("decoder ", dec.value("type", std::string("?"))));
    }
    absl::flat_hash_map<std::string, uint32_t> vocab;
    for (auto it = model.at("vocab").begin(); it != model.at("vocab").end(); ++it) {
      ASSIGN_OR_RETURN(vocab[it.key()], TokenId(it.value(), path, it.key()));
    }
    std::vector<std::pair<std::string, std::string>> merges;
    for (const auto& m : model.at("merges")) {
      if (m.is_array() && m.size() == 2) {
        merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) return absl::InvalidArgumentError(absl::StrCat(path, ": merge \"", s, "\" has no space"));
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else {
        return absl::InvalidArgumentError(absl::StrCat(path, ": a merge is neither \"a b\" nor [a, b]: ", m.dump()));
      }
    }
    RETURN_IF_ERROR(t->Finish(path, vocab, merges));
    for (const auto& a : j.value("added_tokens", nlohmann::json::array())) {
      Added added;
      added.content = a.at("content").get<std::string>();
      ASSIGN_OR_RETURN(added.id, TokenId(a.at("id"), path, added.content));
      added.lstrip = a.value("lstrip", false);
      added.rstrip = a.value("rstrip", false);
      added.single_word = a.value("single_word", false);
      if (added.content.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": an added token is empty"));
      // An id names one token: an added token at an id the vocabulary (or an earlier added
      // token) already gives to another text is refused, or Decode would give back another
      // text than Encode read (found by tests/fuzz/tokenizer_fuzz: "<|endfteoxt|>" at the id
      // of the merge "it").
      std::string bytes = EntryBytes(added.content);
      if (added.id < t->bytes_.size() && !t->bytes_[added.id].empty() && t->bytes_[added.id] != bytes) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": added token \"", added.content, "\" has id ", added.id,
                                                       ", which is already the token \"", t->bytes_[added.id], "\""));
      }
      if (added.id >= t->bytes_.size()) t->bytes_.resize(added.id + 1);
      t->bytes_[added.id] = std::move(bytes);
      t->added_.push_back(std::move(added));
    }
    t->IndexAdded();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": malformed tokenizer: ", e.what()));
  }
  for (const char* eot : {"<|endoftext|>", "<|end_of_text|>"}) {
    if (t->eot_ < 0) t->eot_ = t->Find(eot);
  }
  return t;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromVocabMerges(const std::string& vocab_path,
                                                                      const std::string& merges_path) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->name_ = vocab_path;
  t->split_ = Split::kGpt2;
  ASSIGN_OR_RETURN(std::string vtext, ReadFileToString(vocab_path));
  absl::flat_hash_map<std::string, uint32_t> vocab;
  try {
    const nlohmann::json v = nlohmann::json::parse(vtext);
    for (auto it = v.begin(); it != v.end(); ++it) {
      auto id = TokenId(it.value(), vocab_path, it.key());
      if (!id.ok()) return id.status();
      vocab[it.key()] = *id;
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(vocab_path, ": not a vocabulary (JSON of token: id): ", e.what()));
  }
  ASSIGN_OR_RETURN(const auto merges, ReadMergesTxt(merges_path));
  RETURN_IF_ERROR(t->Finish(vocab_path, vocab, merges));
  // GPT-2's files name no special tokens, but transformers' GPT2Tokenizer makes
  // "<|endoftext|>" one (its bos, eos and unk): split out of text, as tokenizer.json's are.
  if (auto it = vocab.find("<|endoftext|>"); it != vocab.end()) {
    t->added_.push_back(Added{"<|endoftext|>", it->second});
    t->IndexAdded();
    t->eot_ = it->second;
  }
  return t;
}

absl::Status Tokenizer::Finish(const std::string& where, const absl::flat_hash_map<std::string, uint32_t>& vocab,
                               const std::vector<std::pair<std::string, std::string>>& merges) {
  uint32_t n = 0;
  for (const auto& [tok, id] : vocab) n = std::max(n, id + 1);  // ids < kMaxTokenId (TokenId)
  bytes_.assign(n, std::string());
  std::vector<bool> seen(n, false);
  for (const auto& [tok, id] : vocab) {
    if (seen[id]) return absl::InvalidArgumentError(absl::StrCat(where, ": id ", id, " is given twice"));
    seen[id] = true;
    bytes_[id] = EntryBytes(tok);
    by_bytes_[bytes_[id]] = id;
  }
  const ByteChars& m = TheByteChars();
  for (uint32_t b = 0; b < 256; ++b) {
    std::string ch;
    AppendUtf8(m.to_char[b], &ch);
    auto it = vocab.find(ch);
    if (it == vocab.end()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": byte 0x", absl::Hex(b, absl::kZeroPad2), " (\"", ch,
                                                     "\") has no token; byte-level BPE needs all 256"));
    }
    byte_id_[b] = it->second;
  }
  merges_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    auto ia = vocab.find(a), ib = vocab.find(b), iab = vocab.find(a + b);
    if (ia == vocab.end() || ib == vocab.end() || iab == vocab.end()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": merge ", r, " (\"", a, "\" \"", b,
                                                     "\") names a token that is not in the vocabulary"));
    }
    const uint64_t key = (static_cast<uint64_t>(ia->second) << 32) | ib->second;
    merges_.insert_or_assign(key, Merge{static_cast<uint32_t>(r), iab->second});  // a repeat's later rank, as HF
  }
  return absl::OkStatus();
}

int64_t Tokenizer::Find(absl::string_view token) const {
  for (const Added& a : added_) {
    if (a.content == token) return a.id;
  }
  auto it = by_bytes_.find(EntryBytes(token));
  return it == by_bytes_.end() ? int64_t{-1} : static_cast<int64_t>(it->second);
}

bool Tokenizer::NextAdded(absl::string_view text, size_t from, size_t* start, size_t* end, size_t* which) const {
  // Leftmost, then longest, as HF's added vocabulary matches: at each byte that begins some
  // added token, its candidates longest first (added_by_byte_).
  const Chars chars{text};
  size_t len = 0;
  auto char_before = [&](size_t at) {  // the start of the character that ends at `at`
    size_t k = at - 1;
    while (k > 0 && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) --k;
    return k;
  };
  auto word_char = [&](size_t k) {
    const CharClass cl = chars.At(k, &len);
    return cl == kLetter || cl == kNumber || text[k] == '_';
  };
  for (size_t at = from; at < text.size(); ++at) {
    const auto& cands = added_by_byte_[static_cast<unsigned char>(text[at])];
    for (uint32_t i : cands) {
      const Added& a = added_[i];
      if (text.compare(at, a.content.size(), a.content) != 0) continue;
      const size_t after = at + a.content.size();
      if (a.single_word && ((at > 0 && word_char(char_before(at))) || (after < text.size() && word_char(after)))) {
        continue;
      }
      size_t s = at, e = after;
      if (a.lstrip) {
        while (s > from && chars.At(char_before(s), &len) == kSpace) s = char_before(s);
      }
      if (a.rstrip) {
        while (e < text.size() && chars.At(e, &len) == kSpace) e += len;
      }
      *start = s;
      *end = e;
      *which = i;
      return true;
    }
  }
  return false;
}

void Tokenizer::Encode(absl::string_view text, std::vector<uint32_t>* out, EncodeCache* cache) const {
  if (split_ == Split::kBytes) {
    for (unsigned char c : text) out->push_back(c);
    return;
  }
  size_t from = 0, start = 0, end = 0, which = 0;
  while (from < text.size() && NextAdded(text, from, &start, &end, &which)) {
    if (start > from) EncodePiece(text.substr(from, start - from), out, cache);
    out->push_back(added_[which].id);
    from = end;
  }
  if (from < text.size()) EncodePiece(text.substr(from), out, cache);
}

void Tokenizer::EncodePiece(absl::string_view piece, std::vector<uint32_t>* out, EncodeCache* cache) const {
  std::string prefixed;
  if (add_prefix_space_ && piece[0] != ' ') {
    prefixed = absl::StrCat(" ", piece);
    piece = prefixed;
  }
  auto word = [&](absl::string_view w) {
    if (cache == nullptr) return EncodeWord(w, out);
    auto it = cache->words_.find(w);
    if (it != cache->words_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
    const size_t at = out->size();
    EncodeWord(w, out);
    if (cache->words_.size() >= cache->max_words_) cache->words_.clear();
    cache->words_.emplace(std::string(w), std::vector<uint32_t>(out->begin() + static_cast<std::ptrdiff_t>(at), out->end()));
  };
  if (split_ == Split::kWhole) return word(piece);
  for (size_t i = 0; i < piece.size();) {
    const size_t n = split_ == Split::kLlama3 ? Llama3Word(piece, i) : Gpt2Word(piece, i);
    word(piece.substr(i, n));
    i += n;
  }
}

void Tokenizer::EncodeWord(absl::string_view word, std::vector<uint32_t>* out) const {
  if (word.size() == 1) {
    out->push_back(byte_id_[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (ignore_merges_) {
    auto it = by_bytes_.find(word);
    if (it != by_bytes_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  // Symbols in a linked list; candidate merges in a queue by (rank, position), each checked
  // against the symbols when it comes up (a merge beside it may have changed them).
  struct Sym {
    uint32_t id;
    int prev, next;
    bool live;
  };
  std::vector<Sym> sym(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    sym[i] = {byte_id_[static_cast<unsigned char>(word[i])], static_cast<int>(i) - 1,
              i + 1 < word.size() ? static_cast<int>(i + 1) : -1, true};
  }
  struct Cand {
    uint32_t rank;
    int pos;
    uint32_t left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> q;
  auto consider = [&](int pos) {
    if (pos < 0 || sym[pos].next < 0) return;
    const uint32_t l = sym[pos].id, r = sym[sym[pos].next].id;
    auto it = merges_.find((static_cast<uint64_t>(l) << 32) | r);
    if (it != merges_.end()) q.push({it->second.rank, pos, l, r});
  };
  for (int i = 0; i + 1 < static_cast<int>(word.size()); ++i) consider(i);
  while (!q.empty()) {
    const Cand c = q.top();
    q.pop();
    Sym& s = sym[c.pos];
    if (!s.live || s.next < 0 || s.id != c.left || sym[s.next].id != c.right) continue;
    const int gone = s.next;
    s.id = merges_.find((static_cast<uint64_t>(c.left) << 32) | c.right)->second.id;
    sym[gone].live = false;
    s.next = sym[gone].next;
    if (s.next >= 0) sym[s.next].prev = c.pos;
    consider(s.prev);
    consider(c.pos);
  }
  for (int i = 0; i >= 0; i = sym[i].next) out->push_back(sym[i].id);
}

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const uint32_t> ids) const {
  std::string raw;
  for (uint32_t id : ids) {
    if (id >= bytes_.size()) {
      return absl::OutOfRangeError(absl::StrCat("token ", id, " is not in ", name_, "'s vocabulary of ", bytes_.size()));
    }
    raw += bytes_[id];
  }
  return split_ == Split::kBytes ? raw : Utf8Lossy(raw);
}

std::string Tokenizer::TokenText(uint32_t id) const {
  if (split_ == Split::kBytes && id == 0) return "\n%\n";
  return std::string(TokenBytes(id));
}

void Tokenizer::IndexAdded() {
  for (auto& v : added_by_byte_) v.clear();
  for (uint32_t i = 0; i < added_.size(); ++i) {
    added_by_byte_[static_cast<unsigned char>(added_[i].content[0])].push_back(i);
  }
  for (auto& v : added_by_byte_) {
    std::stable_sort(v.begin(), v.end(),
                     [&](uint32_t a, uint32_t b) { return added_[a].content.size() > added_[b].content.size(); });
  }
}

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerForModel(const std::string& model_dir, const std::string& chosen,
                                                              int model_vocab) {
  std::error_code ec;
  const fs::path dir(model_dir);
  std::unique_ptr<Tokenizer> t;
  if (!chosen.empty()) {
    ASSIGN_OR_RETURN(t, Tokenizer::Load(chosen));
  } else if (fs::exists(dir / "tokenizer.json", ec) || fs::exists(dir / "vocab.json", ec)) {
    ASSIGN_OR_RETURN(t, Tokenizer::Load(model_dir));
  } else {
    t = Tokenizer::Bytes();
  }
  if (t->vocab_size() > static_cast<uint32_t>(model_vocab)) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer ", t->name(), " has ", t->vocab_size(),
                                                   " tokens, more than the model's vocabulary of ", model_vocab,
                                                   t->name() == "bytes" ? " (the model directory holds no tokenizer.json: "
                                                                          "name the one it was trained with, --tokenizer)"
                                                                        : ""));
  }
  return t;
}

absl::Status ExportTokenizer(const std::string& source, const std::string& out_dir) {
  ASSIGN_OR_RETURN(const TokenizerFiles files, FindTokenizerFiles(source));
  const fs::path &json = files.json, &vocab = files.vocab, &merges = files.merges;
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  auto copy = [&](const fs::path& from) -> absl::Status {
    fs::copy_file(from, fs::path(out_dir) / from.filename(), fs::copy_options::overwrite_existing, ec);
    if (ec) return absl::UnavailableError(absl::StrCat("copying ", from.string(), " to ", out_dir, ": ", ec.message()));
    return absl::OkStatus();
  };
  if (!json.empty()) {
    if (json.filename() == "tokenizer.json") return copy(json);
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(json.string()));
    return WriteFileAtomic((fs::path(out_dir) / "tokenizer.json").string(), text);
  }
  RETURN_IF_ERROR(copy(vocab));
  RETURN_IF_ERROR(copy(merges));
  ASSIGN_OR_RETURN(std::string vtext, ReadFileToString(vocab.string()));
  nlohmann::ordered_json model = {{"type", "BPE"},          {"dropout", nullptr},       {"unk_token", nullptr},
                                  {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                                  {"fuse_unk", false},      {"byte_fallback", false},   {"ignore_merges", false}};
  nlohmann::ordered_json v;
  try {
    v = nlohmann::ordered_json::parse(vtext);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(vocab.string(), ": not JSON: ", e.what()));
  }
  nlohmann::ordered_json pairs = nlohmann::ordered_json::array();
  ASSIGN_OR_RETURN(const auto merge_list, ReadMergesTxt(merges.string()));
  for (const auto& [a, b] : merge_list) pairs.push_back({a, b});
  model["vocab"] = v;
  model["merges"] = pairs;
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  if (v.contains("<|endoftext|>")) {
    added.push_back({{"id", v["<|endoftext|>"]}, {"content", "<|endoftext|>"}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  const nlohmann::ordered_json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  const nlohmann::ordered_json j = {{"version", "1.0"},       {"truncation", nullptr},    {"padding", nullptr},
                                    {"added_tokens", added},  {"normalizer", nullptr},    {"pre_tokenizer", byte_level},
                                    {"post_processor", nullptr}, {"decoder", byte_level}, {"model", model}};
  return WriteFileAtomic((fs::path(out_dir) / "tokenizer.json").string(), j.dump(2) + "\n");
}

}  // namespace gantry::data
