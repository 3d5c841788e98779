// The NCCL communicator on a GPU, world size 1 (one GPU host): every collective runs
// through NCCL on device buffers and gives the group-of-one result, with sequence numbers.
// The all-to-alls also between GPUs, one rank (a thread) per GPU, where there are several.
// CTest label `gpu`; tests/gpu/run.sh runs it with GANTRY_REQUIRE_GPU=1.
#include "comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

#include "tests/alltoall_util.h"
#include "tests/gpu/gpu_test.h"

namespace gantry::comm {
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
    // The copy runs on the legacy stream, which orders no non-blocking stream: landed first.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ptrs_.push_back(d);
    return d;
  }
  std::vector<float> Host(const float* d, size_t n) {
    std::vector<float> h(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
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

// The bf16 sums (ncclBfloat16) on world size 1: device buffers come back bit for bit (NaN
// poisoning shows an unwritten element), the reduce-scatter also in place (out = in + rank·n,
// which NCCL allows), a small host buffer through the staging; each takes a sequence number.
TEST_F(NcclCommunicatorTest, Bf16SumsRunThroughNcclOnDeviceAndHostBuffers) {
  auto c = NcclCommunicator::Create(0, 1, std::make_shared<gloo::rendezvous::HashStore>(), {});
  ASSERT_TRUE(c.ok()) << c.status();
  NcclCommunicator& comm = **c;
  const size_t n = (1 << 20) + 5;  // an odd count of 2-byte elements
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = static_cast<uint16_t>(0x3c00u + (i * 2654435761u) % 0x0800u);  // finite bf16
  uint16_t* x = nullptr;
  uint16_t* y = nullptr;
  ASSERT_EQ(cudaMalloc(&x, n * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&y, n * 2), cudaSuccess);
  ptrs_.push_back(reinterpret_cast<float*>(x));
  ptrs_.push_back(reinterpret_cast<float*>(y));
  ASSERT_EQ(cudaMemcpy(x, h.data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(y, 0xff, n * 2), cudaSuccess);  // NaN
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto host = [&](const uint16_t* d) {
    std::vector<uint16_t> out(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(out.data(), d, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  };
  ASSERT_TRUE(comm.AllReduceSumBf16(x, n).ok());
  EXPECT_EQ(host(x), h) << "a sum over one rank is the input";
  ASSERT_TRUE(comm.ReduceScatterSumBf16(x, y, n).ok());
  EXPECT_EQ(host(y), h);
  ASSERT_TRUE(comm.ReduceScatterSumBf16(x, x, n).ok()) << "in place";
  EXPECT_EQ(host(x), h);
  std::vector<uint16_t> small(h.begin(), h.begin() + 1001);
  ASSERT_TRUE(comm.AllReduceSumBf16(small.data(), small.size()).ok());
  EXPECT_EQ(small, std::vector<uint16_t>(h.begin(), h.begin() + 1001));
  EXPECT_EQ(comm.seq(), 4u);
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

// World size 1: the all-to-alls are a send to and a receive from this rank in one NCCL group
// (device buffers, poisoned with NaN; a small host buffer through the staging); count
// vectors that are not one per rank are INVALID_ARGUMENT naming them and take no sequence
// number; after Abort the next fails as ABORTED.
TEST_F(NcclCommunicatorTest, WorldSizeOneAllToAllsRunThroughNccl) {
  auto c = NcclCommunicator::Create(0, 1, std::make_shared<gloo::rendezvous::HashStore>(), {});
  ASSERT_TRUE(c.ok()) << c.status();
  NcclCommunicator& comm = **c;
  const size_t n = (1 << 20) + 3;
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = testing::Routed(0, 0, i % 1000000);
  float* x = Device(h);
  float* y = Device(std::vector<float>(n, NAN));
  ASSERT_TRUE(comm.AllToAll(x, y, n).ok());
  EXPECT_EQ(Host(y, n), h);
  float* z = Device(std::vector<float>(n, NAN));
  ASSERT_TRUE(comm.AllToAllV(x, {n}, z, {n}).ok());
  EXPECT_EQ(Host(z, n), h);
  ASSERT_TRUE(comm.AllToAllV(x, {0}, z, {0}).ok()) << "nothing to move";
  std::vector<float> small(h.begin(), h.begin() + 1001), got(1001, NAN);
  ASSERT_TRUE(comm.AllToAll(small.data(), got.data(), small.size()).ok());
  EXPECT_EQ(got, small);
  EXPECT_EQ(comm.seq(), 4u);
  const absl::Status bad = comm.AllToAllV(x, {n, 0}, z, {n});
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  EXPECT_NE(bad.message().find("send_counts has 2 entries"), absl::string_view::npos) << bad;
  EXPECT_EQ(comm.seq(), 4u);
  comm.Abort();
  const absl::Status aborted = comm.AllToAll(x, y, n);
  EXPECT_EQ(aborted.code(), absl::StatusCode::kAborted) << aborted;
  EXPECT_NE(aborted.message().find("all_to_all #5 on rank 0"), absl::string_view::npos) << aborted;
}

// Runs body(comm, rank) on `size` ranks at once, rank r a thread on cuda:r with an NCCL
// communicator of the group; each rank's error ("" for none).
std::vector<std::string> OnGpus(int size, const std::function<std::string(NcclCommunicator&, int)>& body) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<std::string> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      NcclOptions o;
      o.device = r;
      auto c = NcclCommunicator::Create(r, size, store, o);
      errors[static_cast<size_t>(r)] = c.ok() ? body(**c, r) : std::string(c.status().message());
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Between GPUs, one rank per GPU (NCCL refuses two ranks on one device), up to 4: AllToAll
// and AllToAllV with uneven and zero counts deliver every (sender, receiver, index) exactly.
TEST_F(NcclCommunicatorTest, AllToAllsBetweenGpusDeliverEveryChunkExactly) {
  int gpus = 0;
  ASSERT_EQ(cudaGetDeviceCount(&gpus), cudaSuccess);
  if (gpus < 2) {
    GTEST_SKIP() << "an all-to-all between ranks needs 2 GPUs, one per rank (NCCL refuses two ranks on one "
                    "device); this machine has "
                 << gpus;
  }
  const int size = std::min(gpus, 4);
  const size_t n = (1 << 18) + 7;
  const std::vector<testing::RoutedCounts> counts = {
      [n](int, int) { return n; },                                                  // AllToAll
      [](int from, int to) { return static_cast<size_t>((from + 2 * to) % 3) * 4099; },  // zeros between
      [](int from, int to) { return from == 0 || to == 0 ? size_t{0} : static_cast<size_t>(5 * from + to); },
  };
  const std::vector<std::string> errors = OnGpus(size, [&](NcclCommunicator& c, int r) {
    std::string err;
    for (size_t k = 0; k < counts.size() && err.empty(); ++k) {
      const std::vector<float> in = testing::RoutedInput(r, size, counts[k]);
      std::vector<size_t> send, recv;
      testing::RoutedCountsOf(r, size, counts[k], &send, &recv);
      size_t out_n = 0;
      for (size_t v : recv) out_n += v;
      float *din = nullptr, *dout = nullptr;
      std::vector<float> out(out_n, NAN);
      // (Create bound this thread to cuda:r.) The copies run on the legacy stream, which
      // orders no non-blocking stream: synchronized, so they landed first.
      if (cudaMalloc(&din, in.size() * 4 + 4) != cudaSuccess || cudaMalloc(&dout, out_n * 4 + 4) != cudaSuccess ||
          cudaMemcpy(din, in.data(), in.size() * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
          cudaMemcpy(dout, out.data(), out_n * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
          cudaDeviceSynchronize() != cudaSuccess) {
        err = "cuda allocation or copy failed";
      } else {
        const absl::Status s = k == 0 ? c.AllToAll(din, dout, n) : c.AllToAllV(din, send, dout, recv);
        if (!s.ok()) {
          err = absl::StrCat("pattern ", k, ": ", s.message());
        } else if (cudaMemcpy(out.data(), dout, out_n * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
          err = "copying the result back failed";
        } else if (std::string bad = testing::CheckRouted(out, r, size, counts[k]); !bad.empty()) {
          err = absl::StrCat("pattern ", k, ": ", bad);
        }
      }
      cudaFree(din);
      cudaFree(dout);
    }
    return err;
  });
  for (int r = 0; r < size; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r << " of " << size;
}

// SendRecv, a ring step (context parallelism's K/V exchange): on world size 1 there is no
// other rank, INVALID_ARGUMENT before a sequence number is taken; between GPUs, one rank per
// GPU up to 4, two steps carry each rank's values to rank + 1 and on to rank + 2, exactly,
// one sequence number a step (one NCCL group of the send and the receive).
TEST_F(NcclCommunicatorTest, SendRecvShiftsARingOfGpus) {
  {
    auto c = NcclCommunicator::Create(0, 1, std::make_shared<gloo::rendezvous::HashStore>(), {});
    ASSERT_TRUE(c.ok()) << c.status();
    float* x = Device(std::vector<float>(8, 1.f));
    const absl::Status alone = (*c)->SendRecv(x, 4, 0, x + 4, 4, 0);
    EXPECT_EQ(alone.code(), absl::StatusCode::kInvalidArgument) << alone;
    EXPECT_NE(alone.message().find("to rank 0 is not another rank"), absl::string_view::npos) << alone;
    EXPECT_EQ((*c)->seq(), 0u);
  }
  int gpus = 0;
  ASSERT_EQ(cudaGetDeviceCount(&gpus), cudaSuccess);
  if (gpus < 2) {
    GTEST_SKIP() << "a ring between ranks needs 2 GPUs, one per rank (NCCL refuses two ranks on one device); "
                    "this machine has "
                 << gpus << " (the group of one's refusal above ran)";
  }
  const int size = std::min(gpus, 4);
  const size_t n = (1 << 18) + 7;
  auto value = [](int rank, size_t i) { return static_cast<float>(rank * 1000003 + static_cast<int>(i % 4099)); };
  const std::vector<std::string> errors = OnGpus(size, [&](NcclCommunicator& c, int r) -> std::string {
    std::vector<float> a(n), b(n, NAN);
    for (size_t i = 0; i < n; ++i) a[i] = value(r, i);
    float *da = nullptr, *db = nullptr;
    std::string err;
    // (Create bound this thread to cuda:r.) Synchronized copies on the legacy stream: landed.
    if (cudaMalloc(&da, n * 4) != cudaSuccess || cudaMalloc(&db, n * 4) != cudaSuccess ||
        cudaMemcpy(da, a.data(), n * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(db, b.data(), n * 4, cudaMemcpyHostToDevice) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
      err = "cuda allocation or copy failed";
    } else {
      const int right = (r + 1) % size, left = (r + size - 1) % size, two_left = (r + 2 * size - 2) % size;
      absl::Status s = c.SendRecv(da, n, right, db, n, left);
      if (s.ok()) s = c.SendRecv(db, n, right, da, n, left);
      if (!s.ok()) {
        err = std::string(s.message());
      } else if (cudaMemcpy(a.data(), da, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess ||
                 cudaMemcpy(b.data(), db, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
        err = "copying the result back failed";
      } else if (c.seq() != 2) {
        err = absl::StrCat("seq ", c.seq(), " after two steps");
      } else {
        for (size_t i = 0; i < n && err.empty(); ++i) {
          if (b[i] != value(left, i) || a[i] != value(two_left, i)) {
            err = absl::StrCat("element ", i, ": ", b[i], ", ", a[i], " after two steps");
          }
        }
      }
    }
    cudaFree(da);
    cudaFree(db);
    return err;
  });
  for (int r = 0; r < size; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r << " of " << size;
}

}  // namespace
}  // namespace gantry::comm
