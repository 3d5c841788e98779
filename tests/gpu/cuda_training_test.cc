// Training on the GPU against the CPU: 20 steps of a small GPT with --device cuda give the
// CPU run's losses (fp32 twins: <= 1e-4 relative per step, summation orders differ), and a
// checkpoint written by the GPU run resumes and evaluates on the CPU. CTest label `gpu`.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/gpu/gpu_test.h"
#include "tests/test_util.h"
#include "data/token_file.h"
#include "worker/train/trainer.h"

namespace gantry::train {
namespace {

std::vector<float> HostParams(const model::GPT& m) {
  std::vector<float> p(m.num_params());
  m.ReadParams(p.data());
  return p;
}

class CudaTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GANTRY_SKIP_WITHOUT_GPU();
    const std::vector<uint16_t> toks = testing::PatternedTokens(60000, 7);
    ASSERT_TRUE(data::WriteTokenFile(dir_.File("train.bin"), toks).ok());
    ASSERT_TRUE(data::WriteTokenFile(dir_.File("val.bin"), std::vector<uint16_t>(toks.begin(), toks.begin() + 4000)).ok());
  }
  jobspec::JobSpec Spec(const std::string& ckpt_dir) {
    auto s = jobspec::ParseJobSpec("model: {" + model_ + "}\n"
                          "data: {train: " + dir_.File("train.bin") + ", val: " + dir_.File("val.bin") + ", shuffle: true}\n"
                          "train: {steps: 20, micro_batch: 4, global_batch: 8, lr: 3.0e-3, warmup: 2, min_lr_ratio: 0.1, "
                          "weight_decay: 0.1, grad_clip: 1.0, seed: 17, precision: " + precision_ + "}\n"
                          "eval: {every: 10, batches: 4}\n"
                          "checkpoint: {every: 10, dir: " + ckpt_dir + "}\n");
    EXPECT_TRUE(s.ok()) << s.status();
    return *s;
  }
  std::unique_ptr<Trainer> Run(const std::string& device, const std::string& ckpt_dir, bool resume = false,
                               kernels::AttentionPath attention = kernels::AttentionPath::kFused) {
    TrainOptions o;
    o.device = device;
    o.device_options.attention = attention;
    o.resume = resume;
    o.out = devnull_;
    auto t = Trainer::Create(Spec(ckpt_dir), o);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return nullptr;
    auto s = (*t)->Run();
    EXPECT_TRUE(s.ok()) << s;
    return std::move(*t);
  }
  // Each of the 20 losses of `run` within rel (relative) of `base`'s.
  static void ExpectTracks(const Trainer& run, const Trainer& base, double rel, const std::string& what) {
    ASSERT_EQ(run.reports().size(), 20u) << what;
    for (size_t i = 0; i < 20; ++i) {
      const float b = base.reports()[i].loss;
      EXPECT_LE(std::fabs(run.reports()[i].loss - b), rel * b) << what << ", step " << i + 1;
    }
  }
  void TearDown() override {
    if (devnull_) std::fclose(devnull_);
  }
  testing::TempDir dir_;
  FILE* devnull_ = std::fopen("/dev/null", "w");
  std::string precision_ = "fp32";
  std::string model_ = "n_layer: 2, n_head: 4, n_embd: 64, vocab_size: 97, seq_len: 32";
};

// A GPT with mixture-of-experts layers on the GPU (the MoE ops' kernels, with capacity drops)
// tracks the CPU's 20 losses.
TEST_F(CudaTrainingTest, MoeTracksTheCpu) {
  model_ = "n_layer: 2, n_head: 4, n_embd: 64, vocab_size: 97, seq_len: 32, "
           "moe: {num_experts: 4, top_k: 2, capacity_factor: 1.0, z_loss_coeff: 0.001}";
  auto cpu = Run("cpu", dir_.File("cpu_ckpt"));
  auto gpu = Run("cuda:0", dir_.File("gpu_ckpt"));
  ASSERT_TRUE(cpu && gpu);
  ExpectTracks(*gpu, *cpu, 1e-4, "moe");
  EXPECT_GT(gpu->reports()[0].moe_dropped, 0) << "capacity 1.0 drops some";
}

// A Llama (grouped-query attention, 4 query heads over 2 key/value heads) on the GPU: its ops
// (RMSNorm, RoPE, SwiGLU, the heads' repetition) in fp32 with both attention paths track the
// CPU's 20 losses, and in bf16 within bf16's rounding.
TEST_F(CudaTrainingTest, LlamaTracksTheCpu) {
  model_ = "arch: llama, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 64, ffn_hidden: 160, vocab_size: 97, seq_len: 32";
  auto cpu = Run("cpu", dir_.File("cpu_ckpt"));
  auto fused = Run("cuda:0", dir_.File("fused_ckpt"));
  auto unfused = Run("cuda:0", dir_.File("unfused_ckpt"), false, kernels::AttentionPath::kReference);
  ASSERT_TRUE(cpu && fused && unfused);
  ExpectTracks(*fused, *cpu, 1e-4, "fused");
  ExpectTracks(*unfused, *cpu, 1e-4, "unfused");
  EXPECT_LT(fused->reports().back().loss, 0.8 * fused->reports().front().loss) << "the GPU's Llama learns";
  precision_ = "bf16";
  auto cpu16 = Run("cpu", dir_.File("cpu16_ckpt"));
  auto gpu16 = Run("cuda:0", dir_.File("gpu16_ckpt"));
  ASSERT_TRUE(cpu16 && gpu16);
  ExpectTracks(*gpu16, *cpu16, 0x1p-9, "bf16");
}

// bf16 on the GPU (cuBLASLt's 16-bit GEMMs, the kernels templated on the element type, both
// attention paths) against bf16 on the cpu: the same roundings, sums in other orders, so the
// trajectories part as the bf16 layouts do (tests/worker/train/model_parallel_test.cc): within
// half of bf16's unit roundoff, 2^-9 of loss, at every step; and the run learns.
TEST_F(CudaTrainingTest, Bf16TracksTheCpusBf16WithinItsRounding) {
  precision_ = "bf16";
  auto cpu = Run("cpu", dir_.File("cpu_ckpt"));
  auto fused = Run("cuda:0", dir_.File("fused_ckpt"));
  auto unfused = Run("cuda:0", dir_.File("unfused_ckpt"), false, kernels::AttentionPath::kReference);
  ASSERT_TRUE(cpu && fused && unfused);
  ASSERT_EQ(fused->reports().size(), 20u);
  for (size_t i = 0; i < 20; ++i) {
    const float b = cpu->reports()[i].loss;
    EXPECT_LE(std::fabs(fused->reports()[i].loss - b), 0x1p-9) << "fused, step " << i + 1;
    EXPECT_LE(std::fabs(unfused->reports()[i].loss - b), 0x1p-9) << "unfused, step " << i + 1;
  }
  EXPECT_LT(fused->reports().back().loss, 0.8 * fused->reports().front().loss) << "the GPU's bf16 run learns";
}

// The fused attention (the default) and the cuBLAS path over stored probabilities: both
// track the CPU's 20 losses; they differ only in summation order.
TEST_F(CudaTrainingTest, FusedAndUnfusedAttentionBothTrackTheCpu) {
  auto cpu = Run("cpu", dir_.File("cpu_ckpt"));
  auto fused = Run("cuda:0", dir_.File("fused_ckpt"));
  auto unfused = Run("cuda:0", dir_.File("unfused_ckpt"), false, kernels::AttentionPath::kReference);
  ASSERT_TRUE(cpu && fused && unfused);
  ExpectTracks(*fused, *cpu, 1e-4, "fused");
  ExpectTracks(*unfused, *cpu, 1e-4, "unfused");
}

TEST_F(CudaTrainingTest, TwentyStepsTrackTheCpuAndItsCheckpointResumesOnTheCpu) {
  auto cpu = Run("cpu", dir_.File("cpu_ckpt"));
  auto gpu = Run("cuda:0", dir_.File("gpu_ckpt"));
  ASSERT_TRUE(cpu && gpu);
  ASSERT_EQ(cpu->reports().size(), 20u);
  ASSERT_EQ(gpu->reports().size(), 20u);
  for (size_t i = 0; i < 20; ++i) {
    const float a = gpu->reports()[i].loss, b = cpu->reports()[i].loss;
    EXPECT_LE(std::fabs(a - b) / b, 1e-4) << "step " << i + 1 << ": gpu " << a << " cpu " << b;
  }
  EXPECT_LT(gpu->reports().back().loss, 0.8 * gpu->reports().front().loss) << "the GPU run learns";
  ASSERT_EQ(gpu->val_losses().size(), cpu->val_losses().size());
  for (size_t i = 0; i < cpu->val_losses().size(); ++i) {
    EXPECT_LE(std::fabs(gpu->val_losses()[i].second - cpu->val_losses()[i].second) / cpu->val_losses()[i].second, 1e-4);
  }
  // The GPU's step-10 checkpoint resumed on the CPU: steps 11-20 follow the GPU run's.
  std::filesystem::remove_all(dir_.File("gpu_ckpt/step_00000020"));
  auto resumed = Run("cpu", dir_.File("gpu_ckpt"), /*resume=*/true);
  ASSERT_TRUE(resumed);
  ASSERT_EQ(resumed->reports().size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    const float a = resumed->reports()[i].loss, b = gpu->reports()[10 + i].loss;
    EXPECT_LE(std::fabs(a - b) / b, 1e-4) << "step " << 11 + i << ": cpu from the gpu checkpoint " << a << ", gpu " << b;
  }
  // And the GPU's final parameters (read from the device) are the CPU-resumed run's, which
  // evaluates to the GPU's validation loss.
  EXPECT_LE(testing::RelErr(HostParams(resumed->model()), HostParams(gpu->model())), 1e-3);
  ASSERT_FALSE(resumed->val_losses().empty());
  EXPECT_LE(std::fabs(resumed->val_losses().back().second - gpu->val_losses().back().second) /
                gpu->val_losses().back().second,
            1e-4);
}

}  // namespace
}  // namespace gantry::train
