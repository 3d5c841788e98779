// Layouts on real GPUs: every rank a thread of this process on its own GPU (cuda:rank), its
// groups NCCL communicators (agent::DeviceGroups, as the worker builds them), the model
// and ZeroEngine on the cuda backend. Each layout gives the one-process cpu losses (fp32
// twins: <= 1e-4 relative per step, as tests/gpu/cuda_training_test.cc: summation orders
// differ). NCCL refuses two ranks on one device, so a layout needing more GPUs than the
// machine has prints that reason and skips. CTest label `gpu`.
#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "tests/gpu/gpu_test.h"
#include "tests/test_util.h"
#include "data/token_file.h"
#include "worker/agent/device_groups.h"
#include "worker/train/trainer.h"

namespace gantry::train {
namespace {

struct Layout {
  int dp, tp, pp, zero;
  const char* recompute;
};

class NcclTrainingTest : public ::testing::TestWithParam<Layout> {
 protected:
  void SetUp() override {
    GANTRY_SKIP_WITHOUT_GPU();
    ASSERT_TRUE(data::WriteTokenFile(dir_.File("train.bin"), testing::PatternedTokens(40000, 9)).ok());
  }
  jobspec::JobSpec Spec(const Layout& l, const std::string& device) {
    auto s = jobspec::ParseJobSpec(absl::StrCat(
        "model: {n_layer: 4, n_head: 4, n_embd: 64, vocab_size: 97, seq_len: 32}\n"
        "data: {train: ", dir_.File("train.bin"), ", shuffle: true}\n"
        "train: {steps: 20, micro_batch: 2, global_batch: 8, lr: 3.0e-3, warmup: 2, min_lr_ratio: 0.1, "
        "weight_decay: 0.1, grad_clip: 1.0, seed: 5, recompute: ", l.recompute, "}\n"
        "resources: {device: ", device, "}\n"
        "parallel: {dp: ", l.dp, ", tp: ", l.tp, ", pp: ", l.pp, ", zero_stage: ", l.zero, "}\n"));
    EXPECT_TRUE(s.ok()) << s.status();
    return *s;
  }
  // Rank 0's losses; every rank must report the same.
  std::vector<float> Run(const Layout& l, bool cuda) {
    const int world = l.dp * l.tp * l.pp;
    const jobspec::JobSpec spec = Spec(l, cuda ? "cuda" : "cpu");
    auto store = std::make_shared<gloo::rendezvous::HashStore>();
    std::vector<std::vector<float>> losses(static_cast<size_t>(world));
    std::vector<absl::Status> status(static_cast<size_t>(world));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        TrainOptions o;
        o.device = cuda ? absl::StrCat("cuda:", r) : "cpu";
        FILE* null = std::fopen("/dev/null", "w");
        o.out = null;
        const kernels::BackendKind kind = cuda ? kernels::BackendKind::kCuda : kernels::BackendKind::kCpu;
        auto groups = comm::MakeGroups(r, {l.dp, l.tp, l.pp}, agent::DeviceGroups(kind, r, store, {}));
        if (groups.ok()) {
          o.groups = groups->get();
          auto t = Trainer::Create(spec, o);
          status[r] = t.ok() ? (*t)->Run() : t.status();
          if (t.ok()) {
            for (const auto& rep : (*t)->reports()) losses[r].push_back(rep.loss);
          }
        } else {
          status[r] = groups.status();
        }
        std::fclose(null);
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
      EXPECT_EQ(losses[r], losses[0]) << "rank " << r << " reports rank 0's loss";
    }
    return losses[0];
  }
  testing::TempDir dir_;
};

TEST_P(NcclTrainingTest, TheLayoutOnOneGpuPerRankGivesTheCpuLosses) {
  const Layout l = GetParam();
  const int world = l.dp * l.tp * l.pp;
  const int gpus = kernels::DeviceCount(kernels::BackendKind::kCuda);
  if (gpus < world) {
    GTEST_SKIP() << "dp " << l.dp << " tp " << l.tp << " pp " << l.pp << " needs " << world
                 << " GPUs, one per rank (NCCL refuses two ranks on one device); this machine has " << gpus;
  }
  const std::vector<float> one = Run({1, 1, 1, 0, l.recompute}, /*cuda=*/false);
  const std::vector<float> many = Run(l, /*cuda=*/true);
  ASSERT_EQ(one.size(), 20u);
  ASSERT_EQ(many.size(), 20u);
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_LE(std::fabs(many[i] - one[i]) / one[i], 1e-4) << "step " << i + 1 << ": cuda " << many[i] << ", cpu " << one[i];
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, NcclTrainingTest,
    ::testing::Values(Layout{2, 1, 1, 0, "none"}, Layout{2, 1, 1, 1, "none"}, Layout{2, 1, 1, 2, "none"},
                      Layout{2, 1, 1, 3, "none"}, Layout{1, 2, 1, 0, "none"}, Layout{1, 1, 2, 0, "none"},
                      Layout{2, 2, 2, 1, "none"}, Layout{2, 2, 2, 1, "full"}),
    [](const ::testing::TestParamInfo<Layout>& i) {
      const Layout& l = i.param;
      return absl::StrCat("dp", l.dp, "tp", l.tp, "pp", l.pp, "zero", l.zero, "recompute", l.recompute);
    });

}  // namespace
}  // namespace gantry::train
