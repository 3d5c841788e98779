// CUDA kernels against their CPU twins on fresh random inputs of several shapes, with the
// outputs poisoned (NaN) first so an unwritten element fails. CTest label `gpu`; run on a
// machine with an NVIDIA GPU by tests/gpu/run.sh (which sets GANTRY_REQUIRE_GPU=1, so a
// missing device is a failure there rather than a skip).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "common/rng.h"
#include "kernels/adamw.h"
#include "kernels/cuda/ops.h"
#include "kernels/gelu.h"
#include "kernels/residual.h"
#include "tests/gpu/gpu_test.h"
#include "tests/test_util.h"

namespace gantry::cuda {
namespace {

using testing::RelErr;

class CudaKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override { GANTRY_SKIP_WITHOUT_GPU(); }
  std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.f) {
    Rng r(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(r.Normal()) * scale;
    return v;
  }
  float* Upload(const std::vector<float>& h) {
    float* d = nullptr;
    EXPECT_EQ(cudaMalloc(&d, h.size() * 4), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ptrs_.push_back(d);
    return d;
  }
  float* Poisoned(size_t n) { return Upload(std::vector<float>(n, NAN)); }
  std::vector<float> Download(const float* d, size_t n) {
    std::vector<float> h(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  void TearDown() override {
    for (float* p : ptrs_) cudaFree(p);
  }
  std::vector<float*> ptrs_;
};

TEST_F(CudaKernelsTest, GeluMatchesCpuTwin) {
  for (size_t n : {size_t{1}, size_t{1000}, size_t{4097}, size_t{1} << 20}) {
    auto x = Random(n, n, 3.f), dout = Random(n, n + 1);
    std::vector<float> out(n), dx(n);
    kernels::gelu_forward(out.data(), x.data(), static_cast<int64_t>(n));
    kernels::gelu_backward(dx.data(), x.data(), dout.data(), static_cast<int64_t>(n));
    float *dX = Upload(x), *dD = Upload(dout), *dO = Poisoned(n), *dG = Poisoned(n);
    ASSERT_TRUE(GeluForward(dO, dX, static_cast<int64_t>(n), nullptr).ok());
    ASSERT_TRUE(GeluBackward(dG, dX, dD, static_cast<int64_t>(n), nullptr).ok());
    EXPECT_LE(RelErr(Download(dO, n), out), 1e-5) << n;
    EXPECT_LE(RelErr(Download(dG, n), dx), 1e-5) << n;
  }
}

TEST_F(CudaKernelsTest, ResidualMatchesCpuTwin) {
  for (size_t n : {size_t{7}, size_t{65536}}) {
    auto a = Random(n, 1), b = Random(n, 2);
    std::vector<float> out(n);
    kernels::residual_forward(out.data(), a.data(), b.data(), static_cast<int64_t>(n));
    float* dO = Poisoned(n);
    ASSERT_TRUE(ResidualForward(dO, Upload(a), Upload(b), static_cast<int64_t>(n), nullptr).ok());
    EXPECT_LE(RelErr(Download(dO, n), out), 1e-6);
  }
}

TEST_F(CudaKernelsTest, AdamWMatchesCpuTwinOverSteps) {
  const size_t n = 100003;
  auto p = Random(n, 5, 0.02f);
  std::vector<float> m(n, 0.f), v(n, 0.f);
  float *dP = Upload(p), *dM = Upload(m), *dV = Upload(v);
  for (int step = 1; step <= 3; ++step) {
    auto g = Random(n, 100 + step, 1e-2f);
    kernels::AdamWParams hp{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step};
    kernels::adamw_update(p.data(), g.data(), m.data(), v.data(), static_cast<int64_t>(n), hp);
    ASSERT_TRUE(AdamWUpdate(dP, Upload(g), dM, dV, static_cast<int64_t>(n), hp, nullptr).ok());
  }
  EXPECT_LE(RelErr(Download(dP, n), p), 1e-5);
  EXPECT_LE(RelErr(Download(dM, n), m), 1e-5);
  EXPECT_LE(RelErr(Download(dV, n), v), 1e-5);
}

TEST_F(CudaKernelsTest, LaunchersRejectBadArguments) {
  EXPECT_FALSE(GeluForward(nullptr, nullptr, -1, nullptr).ok());
  EXPECT_FALSE(AdamWUpdate(nullptr, nullptr, nullptr, nullptr, 10, {1e-3f, 0.9f, 0.95f, 1e-8f, 0.f, 0}, nullptr).ok());
}

}  // namespace
}  // namespace gantry::cuda
