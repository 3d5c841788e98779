// safetensors files (common/safetensors.h) on arbitrary bytes: the header (length, JSON,
// every tensor's dtype, shape and offsets) and then every tensor's body read back the ways
// the loaders read them (ReadF32 with and without the expected shape, ReadI32, ReadF32Slice).
// Half the inputs go through a file on disk (SafetensorsFile::Open(path): positioned reads
// of a local file, as LoadHFWeights and checkpoints on disk), half through memory (FromBytes:
// a ByteSource, as checkpoints streamed from the shard servers).
//
// Beyond "no crash": a tensor the header accepted reads back whole, with as many elements as
// its shape says (the header check is the only guard before a read of that size).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "safetensors_fuzz: %s\n", what.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gantry;
  std::string bytes(reinterpret_cast<const char*>(data), size);
  // The last byte picks the path (the header is at the front, so it stays free to mutate).
  const bool on_disk = size > 0 && (data[size - 1] & 1);
  absl::StatusOr<SafetensorsFile> f = on_disk ? SafetensorsFile::Open(fuzz::WriteScratch("model.safetensors", bytes))
                                              : SafetensorsFile::FromBytes(std::move(bytes), "model.safetensors");
  if (!f.ok()) return 0;
  for (const auto& [name, info] : f->tensors()) {
    const int64_t n = info.numel();
    if (n < 0) Fail("tensor '" + name + "' accepted with a negative element count");
    // Reads of a tensor past a few MB add nothing the small ones do not (and the fuzzer's
    // memory limit would stop them): the header's checks are the same.
    if (n > (int64_t{1} << 22)) continue;
    auto all = f->ReadF32(name);
    if (all.ok() && static_cast<int64_t>(all->size()) != n) Fail("ReadF32 of '" + name + "' has the wrong size");
    (void)f->ReadF32(name, &info.shape);
    const std::vector<int64_t> other = {n + 1};
    (void)f->ReadF32(name, &other);  // a shape mismatch: refused, naming both
    auto ints = f->ReadI32(name);
    if (ints.ok() && static_cast<int64_t>(ints->size()) != n) Fail("ReadI32 of '" + name + "' has the wrong size");
    if (n > 0) {
      std::vector<float> part(static_cast<size_t>(n));
      (void)f->ReadF32Slice(name, static_cast<size_t>(n / 2), static_cast<size_t>(n - n / 2), part.data());
      (void)f->ReadF32Slice(name, static_cast<size_t>(n), 1, part.data());  // beyond: refused
    }
  }
  (void)f->ReadF32("no such tensor");
  return 0;
}
