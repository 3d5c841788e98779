// The NCCL communicator on a GPU, world size 1 (one GPU host): every collective runs
// through NCCL on device buffers and gives the group-of-one result, with sequence numbers.
// CTest label `gpu`; tests/gpu/run.sh runs it with GANTRY_REQUIRE_GPU=1.
#include "worker/parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "tests/gpu/gpu_test.h"

namespace gantry::parallel {
namespace {

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override { GANTRY_SKIP_WITHOUT_GPU(); }
  void TearDown() override {
    for (float* p : ptrs_) cudaFree(p);
  }
  float* Device(const std::vector<float>& h) {
    float* d = nullptr;
    EXPECT_EQ(cudaMalloc(&d, h.size() * 4), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ptrs_.push_back(d);
    return d;
  }
  std::vector<float> Host(const float* d, size_t n) {
    std::vector<float> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  std::vector<float*> ptrs_;
};

TEST_F(NcclCommunicatorTest, WorldSizeOneRunsEveryCollectiveThroughNccl) {
  auto c = NcclCommunicator::Create(0, 1, std::make_shared<gloo::rendezvous::HashStore>(), {});
  ASSERT_TRUE(c.ok()) << c.status();
  NcclCommunicator& comm = **c;
  const size_t n = (1 << 20) + 3;  // 4 MB and a ragged tail
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = std::sin(static_cast<float>(i)) * 3.f;
  float* x = Device(h);
  ASSERT_TRUE(comm.AllReduceSum(x, n).ok());
  EXPECT_EQ(Host(x, n), h) << "a sum over one rank is the input";
  float* y = Device(std::vector<float>(n, NAN));  // poisoned: an unwritten element fails
  ASSERT_TRUE(comm.ReduceScatterSum(x, y, n).ok());
  EXPECT_EQ(Host(y, n), h);
  float* z = Device(std::vector<float>(n, NAN));
  ASSERT_TRUE(comm.AllGather(x, z, n).ok());
  EXPECT_EQ(Host(z, n), h);
  ASSERT_TRUE(comm.Broadcast(x, n, 0).ok());
  EXPECT_EQ(Host(x, n), h);
  ASSERT_TRUE(comm.Barrier().ok());
  EXPECT_EQ(comm.seq(), 5u);
  const absl::Status bad = comm.Broadcast(x, n, 1);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
}

// Abort (a restart of the job): the next collective aborts the NCCL communicator and fails as
// ABORTED at once, without the failure grace; the group stays failed.
TEST_F(NcclCommunicatorTest, AbortFailsTheNextCollectiveAtOnce) {
  NcclOptions o;
  o.timeout = std::chrono::milliseconds(60000);  // a wait of the timeout would show
  auto c = NcclCommunicator::Create(0, 1, std::make_shared<gloo::rendezvous::HashStore>(), o);
  ASSERT_TRUE(c.ok()) << c.status();
  float* x = Device(std::vector<float>(1024, 1.f));
  ASSERT_TRUE((*c)->AllReduceSum(x, 1024).ok());
  (*c)->Abort();
  const auto t0 = std::chrono::steady_clock::now();
  const absl::Status s = (*c)->AllReduceSum(x, 1024);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_LT(secs, 5.0) << "no wait for the timeout or the grace";
  EXPECT_EQ((*c)->Barrier().code(), absl::StatusCode::kFailedPrecondition) << "the group stays failed";
}

}  // namespace
}  // namespace gantry::parallel
