#include "absl/strings/string_view.h"
#include "data/prepare.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status.h"
#include "data/encode.h"
#include "data/token_file.h"
#include "data/tokenizer.h"

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

namespace {

std::vector<std::string> SplitDocuments(const std::string& text) {
  std::vector<std::string> docs;
  const bool fortune = text.find("\n%\n") != std::string::npos || text.rfind("%\n", 0) == 0;
  std::string cur;
  size_t pos = 0;
  auto flush = [&]() {
    // trim trailing newlines
    while (!cur.empty() && cur.back() == '\n') cur.pop_back();
    size_t start = cur.find_first_not_of('\n');
    if (start != std::string::npos) docs.push_back(cur.substr(start));
    cur.clear();
  };
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    const size_t end = nl == std::string::npos ? text.size() : nl;
    absl::string_view line(text.data() + pos, end - pos);
    const bool sep = fortune ? line == "%" : line.find_first_not_of(" \t\r") == std::string::npos;
    if (sep) {
      flush();
    } else {
      cur.append(line.data(), line.size());
      cur.push_back('\n');
    }
    pos = end + 1;
  }
  flush();
  return docs;
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

// The byte tokenizer's output, as before tokenizers: train.bin and val.bin whole.
absl::StatusOr<PrepareResult> PrepareBytes(const PrepareOptions& options, const std::vector<std::string>& files,
                                           const std::function<void(const std::string&)>& progress) {
  const int64_t every = std::max<int64_t>(2, std::llround(1.0 / options.val_fraction));
  std::vector<uint16_t> train, val;
  PrepareResult r;
  r.vocab_size = 256;
  for (const std::string& path : files) {
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
    if (text.find('\0') != std::string::npos) continue;  // binary (an index file, say)
    const auto docs = SplitDocuments(text);
    for (const std::string& d : docs) {
      auto& dst = (r.documents % every == every - 1) ? val : train;
      const auto toks = EncodeBytes(d);
      dst.insert(dst.end(), toks.begin(), toks.end());
      dst.push_back(kEndOfText);
      ++r.documents;
    }
    ++r.files;
    if (progress) progress(absl::StrCat(path, ": ", docs.size(), " documents"));
  }
  if (train.empty() || val.empty()) {
    return absl::InvalidArgumentError("prepare: the inputs hold too little text to split");
  }
  r.train_path = (fs::path(options.out_dir) / "train.bin").string();
  r.val_path = (fs::path(options.out_dir) / "val.bin").string();
  RETURN_IF_ERROR(WriteTokenFile(r.train_path, train));
  RETURN_IF_ERROR(WriteTokenFile(r.val_path, val));
  r.train_shards = {r.train_path};
  r.val_shards = {r.val_path};
  r.train_tokens = static_cast<int64_t>(train.size());
  r.val_tokens = static_cast<int64_t>(val.size());
  return r;
}

}  // namespace

absl::StatusOr<PrepareResult> Prepare(const PrepareOptions& options,
                                      const std::function<void(const std::string&)>& progress,
                                      const std::function<void(int64_t, int64_t)>& bytes) {
  if (options.inputs.empty()) return absl::InvalidArgumentError("prepare: no input files");
  if (!(options.val_fraction > 0 && options.val_fraction < 1)) {
    return absl::InvalidArgumentError("prepare: --val-fraction must be in (0, 1)");
  }
  if (options.shard_tokens < 1) return absl::InvalidArgumentError("prepare: --shard-tokens must be at least 1");
  ASSIGN_OR_RETURN(const std::vector<std::string> files, InputFiles(options.inputs));
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
  const int64_t every = std::max<int64_t>(2, std::llround(1.0 / options.val_fraction));
  ShardWriter train((fs::path(options.out_dir) / "train").string(), options.shard_tokens, r.vocab_size);
  ShardWriter val((fs::path(options.out_dir) / "val").string(), options.shard_tokens, r.vocab_size);
  int64_t total_bytes = 0, done_bytes = 0;
  for (const std::string& path : files) total_bytes += static_cast<int64_t>(fs::file_size(path, ec));
  // Files read into batches of about 64 MB of text, each batch's documents encoded on every
  // core, then appended in order: the output is the same at any thread count.
  constexpr size_t kBatchBytes = size_t{64} << 20;
  std::deque<std::string> texts;
  std::vector<absl::string_view> docs;
  size_t batch_bytes = 0;
  auto encode_batch = [&]() -> absl::Status {
    const auto ids = EncodeDocuments(*tok, docs, options.threads, [&](size_t b) {
      if (bytes) bytes(done_bytes + static_cast<int64_t>(b), total_bytes);
    });
    const std::vector<uint32_t> end{static_cast<uint32_t>(eot)};
    for (size_t i = 0; i < ids.size(); ++i) {
      ShardWriter& dst = (r.documents % every == every - 1) ? val : train;
      RETURN_IF_ERROR(dst.Add(ids[i]));
      RETURN_IF_ERROR(dst.Add(end));
      ++r.documents;
    }
    done_bytes += static_cast<int64_t>(batch_bytes);
    texts.clear();
    docs.clear();
    batch_bytes = 0;
    return absl::OkStatus();
  };
  for (const std::string& path : files) {
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
    if (text.find('\0') != std::string::npos) {  // binary (an index file, say)
      done_bytes += static_cast<int64_t>(text.size());
      continue;
    }
    std::vector<std::string> split = SplitDocuments(text);
    for (std::string& d : split) {
      texts.push_back(std::move(d));  // a deque: the views stay valid as it grows
      docs.push_back(texts.back());
    }
    batch_bytes += text.size();
    ++r.files;
    if (progress) progress(absl::StrCat(path, ": ", split.size(), " documents"));
    if (batch_bytes >= kBatchBytes) RETURN_IF_ERROR(encode_batch());
  }
  if (!docs.empty()) RETURN_IF_ERROR(encode_batch());
  if (bytes) bytes(done_bytes, total_bytes);
  if (train.total() == 0 || val.total() == 0) {
    return absl::InvalidArgumentError("prepare: the inputs hold too little text to split");
  }
  RETURN_IF_ERROR(train.Finish());
  RETURN_IF_ERROR(val.Finish());
  r.train_shards = train.paths();
  r.val_shards = val.paths();
  r.train_path = r.train_shards.front();
  r.val_path = r.val_shards.front();
  r.train_tokens = train.total();
  r.val_tokens = val.total();
  // The tokenizer beside the data it made.
  RETURN_IF_ERROR(ExportTokenizer(options.tokenizer, options.out_dir));
  return r;
}

}  // namespace gantry::data
