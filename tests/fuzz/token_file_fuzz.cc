// llm.c token files (data/token_file.h) on arbitrary bytes, read the three ways
// Gantry reads them: the header alone (ReadTokenFileHeader, over memory), the whole file
// (TokenFile::Open: read, every id checked against the vocabulary), and as a dataset shard
// (data::Dataset::Open: memory-mapped, then rows read by Fill, shuffled and in order).
//
// The first input byte picks the sequence length and vocabulary (the header is left for the
// rest); the ids read must lie in the vocabulary the reader was given.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include "data/dataset.h"
#include "data/token_file.h"

namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "token_file_fuzz: %s\n", what.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gantry;
  if (size == 0) return 0;
  const int T = 1 + (data[0] & 15);
  // Vocabularies: the byte tokenizer's 256, GPT-2's 50257, Llama 3's 128256 (uint32 ids), none.
  static const uint32_t kVocab[4] = {256, 50257, 128256, 0};
  const uint32_t vocab = kVocab[(data[0] >> 4) & 3];
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);

  (void)data::ReadTokenFileHeader("mem.bin", reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  const std::string path = fuzz::WriteScratch("train.bin", bytes);
  auto file = data::TokenFile::Open(path, static_cast<int>(vocab));
  if (file.ok() && vocab > 0) {
    for (size_t i = 0; i < file->size(); ++i) {
      if (file->data()[i] >= vocab) Fail("TokenFile::Open accepted an id outside the vocabulary");
    }
  }
  auto ds = data::Dataset::Open(path, T, vocab);
  if (!ds.ok()) return 0;
  const int B = 3;
  std::vector<int32_t> in(static_cast<size_t>(B) * T), tg(in.size());
  for (bool shuffle : {false, true}) {
    for (int64_t k : {int64_t{0}, (*ds)->rows() - 1, (*ds)->rows() * 7 + 3}) {
      if (!(*ds)->Fill(k, B, 1337, shuffle, in.data(), tg.data()).ok()) continue;
      for (size_t i = 0; i < in.size(); ++i) {
        if (vocab > 0 && (static_cast<uint32_t>(in[i]) >= vocab || static_cast<uint32_t>(tg[i]) >= vocab)) {
          Fail("Dataset::Fill gave an id outside the vocabulary");
        }
      }
      (*ds)->Prefetch(k, B, 1337, shuffle);
    }
  }
  return 0;
}
