// The backward's 16-bit gradient casts fused into the ops that make the gradients
// (GPT::set_fused_grad_casts; model::TensorParallel::CastsFused): the GEMMs before each norm write
// its input gradient in 16 bits, and each norm's backward writes the residual gradient's 16-bit
// copy that the next GEMMs read, rather than an fp32 write rounded by a pass after the GEMM and a
// pass converting the residual gradient before each GEMM. Each value is rounded once from the
// same fp32 value either way, so the losses and every gradient are the same bits: GPT-2 and a
// Llama, bf16 and fp16, with and without recomputation, the classifier whole or in blocks of
// rows, a whole model and a two-stage pipeline (whose first stage's residual gradient arrives
// from the next stage: the copy its last backward left must not be taken for it; with the model's
// ForgetDres16 left out, that test fails). On the cpu by construction (one code reads either
// gradient, each row copied into one aligned room first); on the CUDA code path (emulated) at these shapes (at C over 256, LayerNorm's
// one-pass kernel for 16-bit loads may round a multiply-add otherwise: an ulp in dinp,
// tests/kernels/norm_backward_test.cc). The profile shows the two passes gone.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "jobspec/model_layout.h"
#include "kernels/backend.h"
#include "model/gpt.h"
#include "tests/kernels/backend_arena.h"

namespace gantry::model {
namespace {

using kernels::Precision;

// The backend the parameter names: cpu, or the CUDA code path under the emulator.
using GradCastsTest = kernels::BackendParamTest;

std::vector<std::pair<std::string, jobspec::GPTConfig>> Configs() {
  std::vector<std::pair<std::string, jobspec::GPTConfig>> configs;
  configs.emplace_back("gpt2", jobspec::GPTConfig{16, 300, 2, 2, 16});
  jobspec::GPTConfig llama{16, 300, 2, 2, 16};
  llama.arch = jobspec::Arch::kLlama;
  llama.n_kv_head = 1;
  llama.ffn_hidden = 24;
  configs.emplace_back("llama", llama);
  return configs;
}

struct Outcome {
  std::vector<float> losses, grads;
};

TEST_P(GradCastsTest, FusedCastsGiveTheBitsOfTheSeparatePassesOnAWholeModel) {
  const int B = 2, T = 8;
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int i = 0; i < B * T; ++i) in[i] = (37 * i + 3) % 300, tg[i] = (53 * i + 1) % 300;
  for (const auto& [name, c] : Configs()) {
    for (Precision p : {Precision::kBf16, Precision::kFp16}) {
      for (jobspec::Recompute r : {jobspec::Recompute::kNone, jobspec::Recompute::kFull}) {
        for (int rows : {0, 5}) {
          SCOPED_TRACE(::testing::Message() << name << " " << kernels::PrecisionName(p) << " recompute "
                                            << static_cast<int>(r) << " classifier_rows " << rows);
          Outcome runs[2];
          for (int fused = 0; fused < 2; ++fused) {
            GPT m(c, jobspec::ModelShard{}, &be());
            m.InitRandom(5);
            m.set_precision(p);
            m.set_recompute(r);
            m.set_classifier_rows(rows);
            m.set_fused_grad_casts(fused == 1);
            m.set_profiling(true);
            // Two micro-batches, their gradients accumulated.
            for (int step = 0; step < 2; ++step) {
              runs[fused].losses.push_back(m.ForwardBackward(in.data(), tg.data(), B, T, 1.f));
            }
            runs[fused].grads.resize(m.num_params());
            m.ReadGrads(runs[fused].grads.data());
            m.Sync();
            ASSERT_TRUE(m.comm_status().ok()) << m.comm_status();
            // The passes the fused casts replace: each norm's input gradient rounded after its GEMM
            // (dln cast), the residual gradient converted before the GEMMs (dres cast).
            std::set<std::string> ops;
            for (const auto& [op, seconds] : m.op_seconds()) ops.insert(op);
            for (const char* pass : {"dln cast bwd", "dres cast bwd"}) {
              EXPECT_EQ(ops.count(pass), fused == 1 ? 0u : 1u) << pass << (fused == 1 ? " fused" : " separate");
            }
          }
          EXPECT_EQ(runs[1].losses, runs[0].losses);
          ASSERT_EQ(runs[1].grads.size(), runs[0].grads.size());
          EXPECT_EQ(0, std::memcmp(runs[1].grads.data(), runs[0].grads.data(), runs[0].grads.size() * sizeof(float)))
              << "the gradients differ";
        }
      }
    }
  }
}

// A two-stage pipeline by hand, two micro-batches: stage 0's backward takes the residual gradient
// stage 1 sends (a copy into its buffer), so the 16-bit copy its own previous backward wrote last
// is stale; both stages' gradients must be the bits of the separate passes.
TEST_P(GradCastsTest, APipelineStageConvertsTheGradientItReceives) {
  const int B = 2, T = 8;
  kernels::Backend* backend = &be();
  for (const auto& [name, c] : Configs()) {
    SCOPED_TRACE(name);
    std::vector<float> grads[2][2];
    for (int fused = 0; fused < 2; ++fused) {
      std::unique_ptr<GPT> stage[2];
      for (int s = 0; s < 2; ++s) {
        stage[s] = std::make_unique<GPT>(c, jobspec::ShardOf(c, 1, 0, 2, s), backend);
        stage[s]->InitRandom(5);
        stage[s]->set_precision(Precision::kBf16);
        stage[s]->set_fused_grad_casts(fused == 1);
        stage[s]->ReserveActivations(B, T);  // (stage 1's input is written before its first forward)
      }
      for (int micro = 0; micro < 2; ++micro) {
        std::vector<int32_t> in(B * T), tg(B * T);
        for (int i = 0; i < B * T; ++i) in[i] = (37 * i + 3 + micro) % 300, tg[i] = (53 * i + 1 + micro) % 300;
        const size_t bytes = stage[0]->stage_floats(B, T) * sizeof(float);
        stage[0]->ForwardStage(0, in.data(), nullptr, B, T, 1.f);
        backend->Copy(stage[1]->stage_input(0), stage[0]->stage_output(0), bytes);
        stage[1]->ForwardStage(0, nullptr, tg.data(), B, T, 1.f);
        stage[1]->BackwardStage(0, B, T);
        backend->Copy(stage[0]->stage_output_grad(0), stage[1]->stage_input_grad(0), bytes);
        stage[0]->BackwardStage(0, B, T);
      }
      for (int s = 0; s < 2; ++s) {
        stage[s]->Sync();
        ASSERT_TRUE(stage[s]->comm_status().ok()) << stage[s]->comm_status();
        grads[fused][s].resize(stage[s]->num_params());
        stage[s]->ReadGrads(grads[fused][s].data());
      }
    }
    for (int s = 0; s < 2; ++s) {
      ASSERT_EQ(grads[1][s].size(), grads[0][s].size());
      EXPECT_EQ(0, std::memcmp(grads[1][s].data(), grads[0][s].data(), grads[0][s].size() * sizeof(float)))
          << "stage " << s << "'s gradients differ";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, GradCastsTest, ::testing::Values("cpu", "cuda-emulated"),
                         [](const auto& info) { return info.param == "cpu" ? std::string("Cpu") : std::string("CudaEmulated"); });

}  // namespace
}  // namespace gantry::model
