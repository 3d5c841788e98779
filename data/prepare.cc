#include "absl/strings/string_view.h"
#include "data/prepare.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status.h"
#include "data/encode.h"
#include "data/token_file.h"
#include "data/tokenizer.h"
#include "nlohmann/json.hpp"

namespace gantry::data {

namespace fs = std::filesystem;

std::vector<uint16_t> EncodeBytes(absl::string_view text) {
  std::vector<uint16_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::string DecodeBytes(const std::vector<uint16_t>& tokens) {
  std::string out;
  out.reserve(tokens.size());
  for (uint16_t t : tokens) out.push_back(static_cast<char>(t & 0xff));
  return out;
}

std::string TokenText(uint16_t token) {
  return token == kEndOfText ? std::string("\n%\n") : std::string(1, static_cast<char>(token & 0xff));
}

absl::StatusOr<DocumentCut> ParseDocumentCut(absl::string_view name) {
  if (name == "file") return DocumentCut::kFile;
  if (name == "paragraph") return DocumentCut::kParagraph;
  if (name == "line") return DocumentCut::kLine;
  return absl::InvalidArgumentError(absl::StrCat("prepare: --documents ", name, " is not file, paragraph or line"));
}

namespace {

// Text cut into documents at separator lines (`sep`), each trimmed of blank lines around it;
// with every_line, each non-separator line is a document of its own.
template <typename Sep>
std::vector<std::string> CutAt(const std::string& text, Sep&& sep, bool every_line) {
  std::vector<std::string> docs;
  std::string cur;
  size_t pos = 0;
  auto flush = [&]() {
    while (!cur.empty() && cur.back() == '\n') cur.pop_back();
    size_t start = cur.find_first_not_of('\n');
    if (start != std::string::npos) docs.push_back(cur.substr(start));
    cur.clear();
  };
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    const size_t end = nl == std::string::npos ? text.size() : nl;
    absl::string_view line(text.data() + pos, end - pos);
    if (sep(line)) {
      flush();
    } else {
      cur.append(line.data(), line.size());
      cur.push_back('\n');
      if (every_line) flush();
    }
    pos = end + 1;
  }
  flush();
  return docs;
}

bool Blank(absl::string_view line) { return line.find_first_not_of(" \t\r") == absl::string_view::npos; }

bool JsonLinesFile(const std::string& path) {
  const std::string ext = fs::path(path).extension().string();
  return ext == ".jsonl" || ext == ".ndjson";
}

// A JSON Lines file's records' text fields, each a document (empty ones skipped).
absl::StatusOr<std::vector<std::string>> JsonLinesDocuments(const std::string& path, const std::string& text,
                                                            const std::string& field) {
  std::vector<std::string> docs;
  size_t pos = 0;
  for (int64_t line_no = 1; pos < text.size(); ++line_no) {
    size_t nl = text.find('\n', pos);
    const size_t end = nl == std::string::npos ? text.size() : nl;
    const absl::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    if (Blank(line)) continue;
    const nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    const std::string where = absl::StrCat("prepare: ", path, ":", line_no, ": ");
    if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(where, "not a JSON value"));
    if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, "a record is a JSON object, not ", j.type_name()));
    const auto it = j.find(field);
    if (it == j.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "the record has no field \"", field, "\" (--text-field names the one holding the text)"));
    }
    if (!it->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(where, "field \"", field, "\" is ", it->type_name(), ", not a string"));
    }
    std::string doc = it->get<std::string>();
    if (!doc.empty()) docs.push_back(std::move(doc));
  }
  return docs;
}

// A file's documents as `options` cut them; nullopt: a binary file, skipped.
absl::StatusOr<std::optional<std::vector<std::string>>> FileDocuments(const std::string& path, const std::string& text,
                                                                      const PrepareOptions& options) {
  if (text.find('\0') != std::string::npos) return std::nullopt;  // binary (an index file, say)
  if (JsonLinesFile(path)) return JsonLinesDocuments(path, text, options.text_field);
  const bool every_line = options.documents == DocumentCut::kLine;
  const bool fortune = text.find("\n%\n") != std::string::npos || text.rfind("%\n", 0) == 0;
  if (fortune) return CutAt(text, [](absl::string_view l) { return l == "%"; }, every_line);
  switch (options.documents) {
    case DocumentCut::kFile:
      return CutAt(text, [](absl::string_view) { return false; }, false);
    case DocumentCut::kParagraph:
      return CutAt(text, Blank, false);
    case DocumentCut::kLine:
      return CutAt(text, Blank, true);
  }
  return std::vector<std::string>{};
}

}  // namespace

namespace {

// The input files: files as given, directories' regular files sorted, each file once.
absl::StatusOr<std::vector<std::string>> InputFiles(const std::vector<std::string>& inputs) {
  std::vector<std::string> files, out;
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> entries;
      for (const auto& e : fs::directory_iterator(in, ec)) {
        if (e.is_regular_file()) entries.push_back(e.path().string());
      }
      std::sort(entries.begin(), entries.end());
      for (auto& e : entries) files.push_back(e);
    } else if (fs::exists(in, ec)) {
      files.push_back(in);
    } else {
      return absl::NotFoundError(absl::StrCat("prepare: input ", in, ": no such file or directory"));
    }
  }
  std::set<std::string> seen;
  for (const std::string& path : files) {
    std::error_code ec;
    const std::string canon = fs::canonical(path, ec).string();
    if (seen.insert(ec ? path : canon).second) out.push_back(path);  // a symlink to a file already read: once
  }
  return out;
}

// Tokens into shards of shard_tokens: <prefix>_000000.bin, ... (the last one shorter).
class ShardWriter {
 public:
  ShardWriter(std::string prefix, int64_t shard_tokens, uint32_t vocab_size)
      : prefix_(std::move(prefix)), shard_tokens_(shard_tokens), vocab_size_(vocab_size) {}
  absl::Status Add(const std::vector<uint32_t>& ids) {
    buf_.insert(buf_.end(), ids.begin(), ids.end());
    total_ += static_cast<int64_t>(ids.size());
    while (static_cast<int64_t>(buf_.size()) >= shard_tokens_) {
      std::vector<uint32_t> rest(buf_.begin() + shard_tokens_, buf_.end());
      buf_.resize(static_cast<size_t>(shard_tokens_));
      RETURN_IF_ERROR(Flush());
      buf_ = std::move(rest);
    }
    return absl::OkStatus();
  }
  absl::Status Finish() { return buf_.empty() ? absl::OkStatus() : Flush(); }
  const std::vector<std::string>& paths() const { return paths_; }
  int64_t total() const { return total_; }

 private:
  absl::Status Flush() {
    char name[32];
    std::snprintf(name, sizeof(name), "_%06zu.bin", paths_.size());
    paths_.push_back(prefix_ + name);
    RETURN_IF_ERROR(WriteTokenFile(paths_.back(), buf_, vocab_size_));
    buf_.clear();
    return absl::OkStatus();
  }
  std::string prefix_;
  int64_t shard_tokens_;
  uint32_t vocab_size_;
  std::vector<uint32_t> buf_;
  std::vector<std::string> paths_;
  int64_t total_ = 0;
};

// The files to read in order, and whether each is a validation input (--val).
struct Source {
  std::string path;
  bool val = false;
};

// Which set a document goes to: a validation input's to val; otherwise every round(1/f)-th
// document (counting all so far) with a split, else train.
struct Router {
  int64_t every = 0;  // 0: no split
  explicit Router(double val_fraction) : every(val_fraction > 0 ? std::max<int64_t>(2, std::llround(1.0 / val_fraction)) : 0) {}
  bool ToVal(bool from_val_input, int64_t document) const {
    return from_val_input || (every > 0 && document % every == every - 1);
  }
};

// The sets' sizes, checked: train must hold text, and val too when one was asked for.
absl::Status CheckSets(const PrepareOptions& options, int64_t documents, int64_t train_tokens, int64_t val_tokens) {
  if (train_tokens == 0) return absl::InvalidArgumentError("prepare: the inputs hold no text for the training set");
  if (val_tokens > 0) return absl::OkStatus();
  if (!options.val_inputs.empty()) return absl::InvalidArgumentError("prepare: the --val inputs hold no text");
  if (options.val_fraction > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prepare: ", documents, documents == 1 ? " document is" : " documents are",
        " too few for a validation split of 1 in ", Router(options.val_fraction).every,
        " (one document per ",
        options.documents == DocumentCut::kFile ? "file" : options.documents == DocumentCut::kParagraph ? "paragraph" : "line",
        "): give more files, cut them with --documents paragraph|line, take the validation set from files of its own "
        "with --val, or none with --val-fraction 0"));
  }
  return absl::OkStatus();
}

// The byte tokenizer's output, as before tokenizers: train.bin and val.bin whole (no val.bin
// without a validation set).
absl::StatusOr<PrepareResult> PrepareBytes(const PrepareOptions& options, const std::vector<Source>& files,
                                           const std::function<void(const std::string&)>& progress) {
  const Router router(options.val_fraction);
  std::vector<uint16_t> train, val;
  PrepareResult r;
  r.vocab_size = 256;
  for (const Source& f : files) {
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(f.path));
    ASSIGN_OR_RETURN(const auto docs, FileDocuments(f.path, text, options));
    if (!docs) continue;
    for (const std::string& d : *docs) {
      auto& dst = router.ToVal(f.val, r.documents) ? val : train;
      const auto toks = EncodeBytes(d);
      dst.insert(dst.end(), toks.begin(), toks.end());
      dst.push_back(kEndOfText);
      ++r.documents;
    }
    ++r.files;
    if (progress) progress(absl::StrCat(f.path, ": ", docs->size(), docs->size() == 1 ? " document" : " documents",
                                     f.val ? " (validation)" : ""));
  }
  RETURN_IF_ERROR(CheckSets(options, r.documents, static_cast<int64_t>(train.size()), static_cast<int64_t>(val.size())));
  r.train_path = (fs::path(options.out_dir) / "train.bin").string();
  RETURN_IF_ERROR(WriteTokenFile(r.train_path, train));
  r.train_shards = {r.train_path};
  if (!val.empty()) {
    r.val_path = (fs::path(options.out_dir) / "val.bin").string();
    RETURN_IF_ERROR(WriteTokenFile(r.val_path, val));
    r.val_shards = {r.val_path};
  }
  r.train_tokens = static_cast<int64_t>(train.size());
  r.val_tokens = static_cast<int64_t>(val.size());
  return r;
}

}  // namespace

absl::StatusOr<PrepareResult> Prepare(const PrepareOptions& options,
                                      const std::function<void(const std::string&)>& progress,
                                      const std::function<void(int64_t, int64_t)>& bytes) {
  if (options.inputs.empty()) return absl::InvalidArgumentError("prepare: no input files");
  if (!(options.val_fraction >= 0 && options.val_fraction < 1)) {
    return absl::InvalidArgumentError("prepare: --val-fraction must be in [0, 1) (0: no validation split)");
  }
  if (!options.val_inputs.empty() && options.val_fraction != 0) {
    return absl::InvalidArgumentError(
        "prepare: --val and --val-fraction both choose the validation set: give one (--val takes it from its own files)");
  }
  if (options.shard_tokens < 1) return absl::InvalidArgumentError("prepare: --shard-tokens must be at least 1");
  std::vector<Source> files;
  ASSIGN_OR_RETURN(const std::vector<std::string> train_files, InputFiles(options.inputs));
  for (const std::string& f : train_files) files.push_back({f, false});
  if (!options.val_inputs.empty()) {
    ASSIGN_OR_RETURN(const std::vector<std::string> val_files, InputFiles(options.val_inputs));
    for (const std::string& f : val_files) files.push_back({f, true});
  }
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("creating ", options.out_dir, ": ", ec.message()));
  if (options.tokenizer.empty()) return PrepareBytes(options, files, progress);

  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, Tokenizer::Load(options.tokenizer));
  int64_t eot = tok->end_of_text();
  if (!options.eot.empty()) {
    eot = tok->Find(options.eot);
    if (eot < 0) return absl::InvalidArgumentError(absl::StrCat("prepare: --eot ", options.eot, " is not a token of ", tok->name()));
  }
  if (eot < 0) {
    return absl::InvalidArgumentError(absl::StrCat("prepare: ", tok->name(),
                                                   " has no <|endoftext|> or <|end_of_text|>: name the token that "
                                                   "ends a document with --eot"));
  }
  PrepareResult r;
  r.vocab_size = tok->vocab_size();
  r.token_bytes = r.vocab_size > 65536 ? 4 : 2;
  const Router router(options.val_fraction);
  ShardWriter train((fs::path(options.out_dir) / "train").string(), options.shard_tokens, r.vocab_size);
  ShardWriter val((fs::path(options.out_dir) / "val").string(), options.shard_tokens, r.vocab_size);
  int64_t total_bytes = 0, done_bytes = 0;
  for (const Source& f : files) total_bytes += static_cast<int64_t>(fs::file_size(f.path, ec));
  // Files read into batches of about 64 MB of text, each batch's documents encoded on every
  // core, then appended in order: the output is the same at any thread count.
  constexpr size_t kBatchBytes = size_t{64} << 20;
  std::deque<std::string> texts;
  std::vector<absl::string_view> docs;
  std::vector<bool> from_val;  // docs[i] came from a --val input
  size_t batch_bytes = 0;
  auto encode_batch = [&]() -> absl::Status {
    const auto ids = EncodeDocuments(*tok, docs, options.threads, [&](size_t b) {
      if (bytes) bytes(done_bytes + static_cast<int64_t>(b), total_bytes);
    });
    const std::vector<uint32_t> end{static_cast<uint32_t>(eot)};
    for (size_t i = 0; i < ids.size(); ++i) {
      ShardWriter& dst = router.ToVal(from_val[i], r.documents) ? val : train;
      RETURN_IF_ERROR(dst.Add(ids[i]));
      RETURN_IF_ERROR(dst.Add(end));
      ++r.documents;
    }
    done_bytes += static_cast<int64_t>(batch_bytes);
    texts.clear();
    docs.clear();
    from_val.clear();
    batch_bytes = 0;
    return absl::OkStatus();
  };
  for (const Source& f : files) {
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(f.path));
    ASSIGN_OR_RETURN(auto split, FileDocuments(f.path, text, options));
    if (!split) {  // binary (an index file, say)
      done_bytes += static_cast<int64_t>(text.size());
      continue;
    }
    for (std::string& d : *split) {
      texts.push_back(std::move(d));  // a deque: the views stay valid as it grows
      docs.push_back(texts.back());
      from_val.push_back(f.val);
    }
    batch_bytes += text.size();
    ++r.files;
    if (progress) progress(absl::StrCat(f.path, ": ", split->size(), split->size() == 1 ? " document" : " documents",
                                     f.val ? " (validation)" : ""));
    if (batch_bytes >= kBatchBytes) RETURN_IF_ERROR(encode_batch());
  }
  if (!docs.empty()) RETURN_IF_ERROR(encode_batch());
  if (bytes) bytes(done_bytes, total_bytes);
  RETURN_IF_ERROR(CheckSets(options, r.documents, train.total(), val.total()));
  RETURN_IF_ERROR(train.Finish());
  RETURN_IF_ERROR(val.Finish());
  r.train_shards = train.paths();
  r.val_shards = val.paths();
  r.train_path = r.train_shards.front();
  if (!r.val_shards.empty()) r.val_path = r.val_shards.front();
  r.train_tokens = train.total();
  r.val_tokens = val.total();
  // The tokenizer beside the data it made.
  RETURN_IF_ERROR(ExportTokenizer(options.tokenizer, options.out_dir));
  return r;
}

}  // namespace gantry::data
