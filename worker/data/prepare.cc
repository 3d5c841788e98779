#include "absl/strings/string_view.h"
#include "worker/data/prepare.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status.h"
#include "worker/data/token_file.h"

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

absl::StatusOr<PrepareResult> Prepare(const PrepareOptions& options,
                                      const std::function<void(const std::string&)>& progress) {
  if (options.inputs.empty()) return absl::InvalidArgumentError("prepare: no input files");
  if (!(options.val_fraction > 0 && options.val_fraction < 1)) {
    return absl::InvalidArgumentError("prepare: --val-fraction must be in (0, 1)");
  }
  std::vector<std::string> files;
  std::set<std::string> seen;
  for (const std::string& in : options.inputs) {
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
  const int64_t every = std::max<int64_t>(2, std::llround(1.0 / options.val_fraction));
  std::vector<uint16_t> train, val;
  PrepareResult r;
  for (const std::string& path : files) {
    std::error_code ec;
    const std::string canon = fs::canonical(path, ec).string();
    if (!seen.insert(ec ? path : canon).second) continue;  // a symlink to a file already read
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
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("creating ", options.out_dir, ": ", ec.message()));
  r.train_path = (fs::path(options.out_dir) / "train.bin").string();
  r.val_path = (fs::path(options.out_dir) / "val.bin").string();
  RETURN_IF_ERROR(WriteTokenFile(r.train_path, train));
  RETURN_IF_ERROR(WriteTokenFile(r.val_path, val));
  r.train_tokens = static_cast<int64_t>(train.size());
  r.val_tokens = static_cast<int64_t>(val.size());
  return r;
}

}  // namespace gantry::data
