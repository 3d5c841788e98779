// Helpers of the kernel tests that run an op on several backends by name (residual_norm_test,
// norm_backward_test): tensors placed at chosen alignments, bitwise comparison, and a fixture
// whose parameter names the backend ("cpu", or a kind ParseBackendKind takes).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"

// The backend under test besides cpu (the cuda_ builds of these tests set cuda).
#ifndef GANTRY_TEST_BACKEND
#define GANTRY_TEST_BACKEND "cuda-emulated"
#endif

namespace gantry::kernels {

// Tensors of one backend in a single allocation, each placed `shift` floats past a 64-byte
// boundary (shift 1: no row of any C is 16-byte aligned, so the kernels take the scalar path).
class Arena {
 public:
  Arena(Backend& be, size_t bytes) : be_(be), bytes_(bytes) {
    base_ = static_cast<char*>(be_.Allocate(bytes_));
    EXPECT_NE(base_, nullptr);
  }
  ~Arena() { be_.Free(base_); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // A tensor holding `host`'s bytes.
  template <typename T>
  T* Put(const std::vector<T>& host, int shift) {
    char* p = Place(host.size() * sizeof(T), shift);
    be_.CopyToDevice(p, host.data(), host.size() * sizeof(T));
    return reinterpret_cast<T*>(p);
  }
  // n elements of 0xff bytes: NaN as fp32, bf16 and fp16.
  template <typename T>
  T* Poisoned(size_t n, int shift) {
    std::vector<T> h(n);
    std::memset(h.data(), 0xff, n * sizeof(T));
    return Put(h, shift);
  }
  template <typename T>
  std::vector<T> Get(const T* p, size_t n) {
    std::vector<T> h(n);
    be_.CopyToHost(h.data(), p, n * sizeof(T));
    return h;
  }

 private:
  char* Place(size_t bytes, int shift) {
    used_ = (used_ + 63) / 64 * 64 + static_cast<size_t>(shift) * sizeof(float);
    char* p = base_ + used_;
    used_ += bytes;
    EXPECT_LE(used_, bytes_);
    return p;
  }
  Backend& be_;
  size_t bytes_;
  size_t used_ = 0;
  char* base_ = nullptr;
};

inline bool SameBits(const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }
template <typename T>
bool SameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && SameBits(a.data(), b.data(), a.size() * sizeof(T));
}

// The backend the parameter names (cuda where there is no GPU: skipped, unless
// GANTRY_REQUIRE_GPU is set).
class BackendParamTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cpu") {
      be_ = &CpuBackend();
      return;
    }
    auto kind = ParseBackendKind(GetParam());
    ASSERT_TRUE(kind.ok()) << kind.status();
    auto be = CreateBackend(*kind, 0);
    if (!be.ok() && *kind == BackendKind::kCuda) {
      if (std::getenv("GANTRY_REQUIRE_GPU")) FAIL() << "GANTRY_REQUIRE_GPU is set but: " << be.status();
      GTEST_SKIP() << "no cuda backend here (run tests/gpu/run.sh on a GPU host): " << be.status();
    }
    ASSERT_TRUE(be.ok()) << be.status();
    owned_ = std::move(*be);
    be_ = owned_.get();
  }
  Backend& be() { return *be_; }

 private:
  std::unique_ptr<Backend> owned_;
  Backend* be_ = nullptr;
};

// The instantiation's test names: the backend's, '-' as '_'.
inline std::string BackendParamName(const ::testing::TestParamInfo<std::string>& i) {
  std::string s = i.param;
  for (char& c : s) c = c == '-' ? '_' : c;
  return s;
}

}  // namespace gantry::kernels
