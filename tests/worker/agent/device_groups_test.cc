// agent::DeviceGroups: a rank's process groups by the device its model runs on (Gloo for cpu
// and cuda-emulated, NCCL for cuda), their names and keys, and a cuda rank without its GPU.
#include "worker/agent/device_groups.h"

#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gantry::agent {
namespace {

// A cpu or cuda-emulated rank's groups are Gloo, named and keyed by group: two groups of
// the same ranks on one store do not mix, and each counts its completed collectives. A
// cuda rank's are NCCL on its GPU: without one (CI) joining fails, naming the group and
// the device, rather than falling back to something else.
TEST(DeviceGroupsTest, CpuAndEmulatedRanksGetGlooGroupsAndACudaRankNeedsItsGpu) {
  for (auto kind : {kernels::BackendKind::kCpu, kernels::BackendKind::kCudaEmulated}) {
    SCOPED_TRACE(kernels::BackendKindName(kind));
    auto store = std::make_shared<gloo::rendezvous::HashStore>();
    std::vector<absl::Status> out(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        std::vector<comm::Communicator*> made;
        const comm::GroupFactory factory = DeviceGroups(kind, r, store, comm::GlooOptions(), &made);
        auto a = factory("dp/s0/t0", {0, 1}, r);
        auto b = factory("mp/r0", {0, 1}, r);
        if (!a.ok() || !b.ok()) {
          out[static_cast<size_t>(r)] = a.ok() ? b.status() : a.status();
          return;
        }
        float x[2] = {1.f + r, 10.f};
        absl::Status s = (*a)->AllReduceSum(x, 2);
        if (s.ok()) s = (*b)->AllReduceSum(x, 1);
        if (s.ok() && (x[0] != 6.f || x[1] != 20.f)) s = absl::InternalError(absl::StrCat(x[0], " ", x[1]));
        if (s.ok() && (made.size() != 2 || dynamic_cast<comm::GlooCommunicator*>(made[0]) == nullptr)) {
          s = absl::InternalError("not the two Gloo communicators made");
        }
        if (s.ok() && ((*a)->completed() != 1 || (*b)->completed() != 1)) {
          s = absl::InternalError(absl::StrCat("completed ", (*a)->completed(), ", ", (*b)->completed()));
        }
        out[static_cast<size_t>(r)] = s;
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& s : out) EXPECT_TRUE(s.ok()) << s;
  }
  if (kernels::DeviceCount(kernels::BackendKind::kCuda) > 0) {
    GTEST_SKIP() << "a GPU is visible: a cuda rank would join NCCL and wait for its peer "
                    "(tests/gpu/nccl_communicator_test covers NCCL on a GPU)";
  }
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  auto c = DeviceGroups(kernels::BackendKind::kCuda, 0, store, comm::GlooOptions())("dp/s0/t0", {0, 1}, 0);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(c.status())) << c.status();
  EXPECT_EQ(c.status().message().rfind("group dp/s0/t0: ", 0), 0u) << c.status();
}

}  // namespace
}  // namespace gantry::agent
