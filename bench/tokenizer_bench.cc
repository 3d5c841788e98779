// Byte-level BPE encoding speed: the documents of a text file (separated by blank lines,
// "\n\n") encoded each on its own, over N threads, best of R runs. bench/tokenizer_vs_hf.py
// runs it beside Hugging Face tokenizers' encode_batch on the same documents and prints the
// ratio. The last line is JSON for that driver.
//   tokenizer_bench --tokenizer PATH --text FILE [--threads N] [--repeat R] [--cache-words N]
// --cache-words 0: no word cache, every word merged afresh (a text whose words never repeat).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "data/encode.h"
#include "data/tokenizer.h"

namespace gantry {
namespace {

int Main(int argc, char** argv) {
  std::string tokenizer_path, text_path;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency())), repeat = 3;
  int64_t cache_words = int64_t{1} << 18;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    bool ok = true;
    if (a == "--tokenizer") tokenizer_path = argv[i + 1];
    else if (a == "--text") text_path = argv[i + 1];
    else if (a == "--threads") ok = absl::SimpleAtoi(argv[i + 1], &threads) && threads >= 1;
    else if (a == "--repeat") ok = absl::SimpleAtoi(argv[i + 1], &repeat) && repeat >= 1;
    else if (a == "--cache-words") ok = absl::SimpleAtoi(argv[i + 1], &cache_words) && cache_words >= 0;
    else ok = false;
    if (!ok) {
      std::fprintf(stderr, "tokenizer_bench: bad argument %s\n", a.c_str());
      return 2;
    }
  }
  if (tokenizer_path.empty() || text_path.empty()) {
    std::fprintf(stderr, "usage: tokenizer_bench --tokenizer PATH --text FILE [--threads N] [--repeat R] [--cache-words N]\n");
    return 2;
  }
  auto tok = data::Tokenizer::Load(tokenizer_path);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  auto text = ReadFileToString(text_path);
  if (!text.ok()) {
    std::fprintf(stderr, "%s\n", std::string(text.status().message()).c_str());
    return 1;
  }
  const std::vector<absl::string_view> docs = absl::StrSplit(*text, "\n\n");
  double best = 1e30;
  size_t tokens = 0;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<std::vector<uint32_t>> ids =
        data::EncodeDocuments(**tok, docs, threads, nullptr, static_cast<size_t>(cache_words));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    tokens = 0;
    for (const auto& d : ids) tokens += d.size();
    best = std::min(best, s);
  }
  std::printf("gantry byte-level BPE (%s): %zu documents, %zu tokens, best of %d: %.3f s, %.0f tokens/s, %d threads, "
              "word cache %ld\n",
              tokenizer_path.c_str(), docs.size(), tokens, repeat, best, tokens / best, threads, static_cast<long>(cache_words));
  std::printf("{\"impl\": \"gantry\", \"tokens\": %zu, \"seconds\": %.6f, \"tokens_per_s\": %.1f, \"threads\": %d}\n",
              tokens, best, tokens / best, threads);
  return 0;
}

}  // namespace
}  // namespace gantry

int main(int argc, char** argv) { return gantry::Main(argc, argv); }
