// The classifier in blocks of rows (GPT::set_classifier_rows, train.classifier_rows): the forward
// computes a block's logits, its loss and its gradient, and the classifier's backward, block by
// block, so that the (B·T, V) logits are never whole. Against the classifier over every row at
// once, on the cpu and on the CUDA code path (emulated): the logits ReadLogits gives, the losses
// of training and of evaluation, and every gradient within the bounds of summing in another
// order (each derived below); less activation memory (the room of one block of logits, the
// layers' backward scratch in it).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "jobspec/model_layout.h"
#include "kernels/backend.h"
#include "model/gpt.h"
#include "tests/kernels/backend_arena.h"

namespace gantry::model {
namespace {

using kernels::Precision;

struct Case {
  std::string name;
  jobspec::GPTConfig config;
};

std::vector<Case> Configs(int V) {
  std::vector<Case> cases;
  cases.push_back({"gpt2", jobspec::GPTConfig{16, V, 2, 2, 16}});
  jobspec::GPTConfig llama{16, V, 2, 2, 16};
  llama.arch = jobspec::Arch::kLlama;
  llama.n_kv_head = 1;
  llama.ffn_hidden = 24;
  cases.push_back({"llama", llama});
  jobspec::GPTConfig moe{16, V, 2, 2, 16};
  moe.moe = {4, 2, 1.25, 0.01, 0.001, 1};
  cases.push_back({"moe", moe});
  return cases;
}

// The backend the parameter names: cpu, or the CUDA code path under the emulator.
using ClassifierRowsTest = kernels::BackendParamTest;

// The classifier weight's tensor: GPT-2's tied wte, a Llama's lm_head.
const jobspec::ParamTensor& ClassifierTensor(const GPT& m) {
  return *m.FindTensor(jobspec::ClassifierTensor(m.config()));
}

TEST_P(ClassifierRowsTest, BlocksOfRowsGiveTheLossesAndGradientsOfTheWholeClassifier) {
  const int B = 2, T = 8, V = 600;  // 16 rows: blocks of 5 leave one of 1, blocks of 8 none
  std::vector<int32_t> in[2], tg[2];  // two micro-batches' tokens
  for (int b = 0; b < 2; ++b) {
    in[b].resize(B * T), tg[b].resize(B * T);
    for (int i = 0; i < B * T; ++i) in[b][i] = (37 * i + 3 + 11 * b) % V, tg[b][i] = (53 * i + 1 + 7 * b) % V;
  }
  const int from = 3, count = 5;  // a read of rows [3, 8): a block boundary inside it at 5
  for (const auto& [name, c] : Configs(V)) {
    for (Precision p : {Precision::kFp32, Precision::kBf16}) {
      if (c.moe.num_experts > 0 && p != Precision::kFp32) continue;  // MoE runs in fp32 (the job spec says so)
      for (jobspec::Recompute r : {jobspec::Recompute::kNone, jobspec::Recompute::kFull}) {
        std::vector<float> losses[3], grads[3], logits[3], eval[3], part[3];
        size_t bytes[3] = {0, 0, 0};
        const int rows[3] = {0, 5, 8};
        for (int k = 0; k < 3; ++k) {
          SCOPED_TRACE(::testing::Message() << name << " " << kernels::PrecisionName(p) << " recompute "
                                            << static_cast<int>(r) << " rows " << rows[k]);
          GPT m(c, jobspec::ModelShard{}, &be());
          m.InitRandom(5);
          m.set_precision(p);
          m.set_recompute(r);
          m.set_classifier_rows(rows[k]);
          // Two micro-batches of other tokens: the second's forward writes the block's room over the
          // first's backward scratch (and its dlnf over the first's), its gradients add to the first's.
          for (int b = 0; b < 2; ++b) losses[k].push_back(m.ForwardBackward(in[b].data(), tg[b].data(), B, T, 1.f));
          grads[k].resize(m.num_params());
          m.ReadGrads(grads[k].data());
          bytes[k] = m.activation_bytes();
          EXPECT_EQ(m.activation_layout().classifier_rows, rows[k]);
          eval[k].push_back(m.Forward(in[0].data(), tg[0].data(), B, T));
          EXPECT_TRUE(std::isnan(m.Forward(in[0].data(), nullptr, B, T)));
          logits[k].resize(static_cast<size_t>(B) * T * V);
          m.ReadLogits(logits[k].data(), 0, static_cast<size_t>(B) * T);
          part[k].resize(static_cast<size_t>(count) * V);
          m.ReadLogits(part[k].data(), from, count);
          m.Sync();
          ASSERT_TRUE(m.comm_status().ok()) << m.comm_status();
        }
        SCOPED_TRACE(::testing::Message() << name << " " << kernels::PrecisionName(p) << " recompute "
                                          << static_cast<int>(r));
        GPT shape(c);
        const jobspec::ParamTensor& w = ClassifierTensor(shape);
        const bool fp32 = p == Precision::kFp32;
        const double u = std::ldexp(1.0, -24);
        for (int k = 1; k < 3; ++k) {
          SCOPED_TRACE(::testing::Message() << "rows " << rows[k]);
          EXPECT_LT(bytes[k], bytes[0]);
          // The logits: a block's rows through a GEMM of fewer rows, which may sum each row's C = 16
          // products in another order (OpenBLAS's kernels for the rows left over do; a GPU's may):
          // fp32, two orders within 2·15·u·Σ|terms|, Σ|terms| taken as at most 4 times the largest
          // logit (measured: differences up to 3u of it); bf16, the sums rounded to neighbours at
          // worst, within 2^-7 of the value.
          double largest = 0, dlogit = 0;
          for (float x : logits[0]) largest = std::max(largest, std::fabs(double(x)));
          for (size_t i = 0; i < logits[0].size(); ++i) {
            const double d = std::fabs(double(logits[k][i]) - logits[0][i]);
            dlogit = std::max(dlogit, d);
            ASSERT_LE(d, fp32 ? 120 * u * largest : std::ldexp(std::fabs(double(logits[0][i])), -7)) << "logit " << i;
          }
          // Rows [3, 8) read alone: the same rows of the whole classifier's logits, within that bound.
          for (size_t i = 0; i < part[k].size(); ++i) {
            const double want = logits[0][static_cast<size_t>(from) * V + i];
            ASSERT_LE(std::fabs(part[k][i] - want), fp32 ? 120 * u * largest : std::ldexp(std::fabs(want), -7))
                << "row " << from + static_cast<int>(i) / V << " read alone";
          }
          // A row's loss moves by at most twice its logits' largest move (its log-sum-exp and its
          // target's logit), the mean's rounding by an ulp or two of the loss.
          for (size_t i = 0; i < losses[0].size(); ++i) {
            EXPECT_LE(std::fabs(double(losses[k][i]) - losses[0][i]), 2 * dlogit + 4 * u * std::fabs(losses[0][i]));
          }
          EXPECT_LE(std::fabs(double(eval[k][0]) - eval[0][0]), 2 * dlogit + 4 * u * std::fabs(eval[0][0]));
          // Every gradient but the classifier weight's flows from dlnf, whose rows are each summed
          // from their own V = 600 products, in the GEMM's order for the block: within the layout
          // tests' 1e-5 of each tensor's largest gradient in fp32 (measured: up to 8.3e-7); in bf16
          // within 2^-7 of it, a neighbour of a 16-bit gradient's rounding (measured: the same bits
          // on the cpu, whose 16-bit GEMMs sum each row alike whatever rows they are handed).
          // The classifier weight's: each element the same 32 products (16 rows, two micro-batches)
          // summed in another order. fp32: an order's sum is within 31·u·Σ|terms| of the exact
          // one, two orders within 64·u·Σ|terms|, Σ|terms| taken as at most 16 times the tensor's
          // largest gradient (measured: differences under 4.5e-7 of it; the bound 6.1e-5). bf16:
          // each GEMM's weight gradient is a 16-bit tensor (autocast's), rounded before it is added:
          // the whole classifier's once per micro-batch, the blocks' once per block, each within
          // 2^-9 of its part, the parts taken as at most the largest gradient: 2^-9·(2 + 2·blocks)
          // of it (measured: up to 0.0045; the bound 0.0117 at 2 blocks, 0.0195 at 4).
          const int blocks = (B * T + rows[k] - 1) / rows[k];
          for (const jobspec::ParamTensor& t : shape.tensors()) {
            double scale = 0, worst = 0;
            for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
              scale = std::max(scale, std::fabs(double(grads[0][i])));
              worst = std::max(worst, std::fabs(double(grads[k][i]) - grads[0][i]));
            }
            const bool classifier = t.offset == w.offset;
            const double bound = classifier ? (fp32 ? 64 * u * 16 : (2 + 2 * blocks) * std::ldexp(1.0, -9))
                                            : (fp32 ? 1e-5 : std::ldexp(1.0, -7));
            EXPECT_LE(worst, bound * scale) << t.name << "'s gradient, its largest " << scale;
          }
        }
      }
    }
  }
}

// A ParamHost (what ZeRO implements) that hands out the model's own buffers and counts each unit's
// holds: every call leaves none held, whole classifier or blocks, gathering or not (a gathering
// host's units get their 16-bit weights per acquisition), and no hold goes below zero.
class CountingHost : public ParamHost {
 public:
  CountingHost(GPT* m, bool gathers) : m_(m), gathers_(gathers), holds_(static_cast<size_t>(m->num_units()), 0) {}
  float* AcquireParams(int u) override {
    ++holds_[static_cast<size_t>(u)];
    return m_->params() + m_->unit_begin(u);
  }
  void ReleaseParams(int u) override {
    if (--holds_[static_cast<size_t>(u)] < 0) negative_ = true;
  }
  float* AcquireGrads(int u) override { return m_->grads() + m_->unit_begin(u); }
  void GradsDone(int) override {}
  bool gathers_params() const override { return gathers_; }
  int held() const {
    int n = 0;
    for (int h : holds_) n += h;
    return n;
  }
  bool negative() const { return negative_; }

 private:
  GPT* m_;
  bool gathers_;
  std::vector<int> holds_;
  bool negative_ = false;
};

TEST(ClassifierRowsHostTest, EveryCallReleasesWhatItHolds) {
  const int B = 2, T = 8, V = 600;
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int i = 0; i < B * T; ++i) in[i] = (37 * i + 3) % V, tg[i] = (53 * i + 1) % V;
  for (const auto& [name, c] : Configs(V)) {
    if (c.moe.num_experts > 0) continue;
    for (int rows : {0, 5}) {
      for (bool gathers : {false, true}) {
        SCOPED_TRACE(::testing::Message() << name << " rows " << rows << (gathers ? " gathering" : ""));
        GPT m(c);
        m.InitRandom(5);
        m.set_precision(Precision::kBf16);
        m.set_classifier_rows(rows);
        CountingHost host(&m, gathers);
        m.set_param_host(&host);
        std::vector<float> logits(static_cast<size_t>(B) * T * V);
        m.ForwardBackward(in.data(), tg.data(), B, T, 1.f);
        EXPECT_EQ(host.held(), 0) << "after a training micro-batch";
        m.Forward(in.data(), tg.data(), B, T);
        EXPECT_EQ(host.held(), 0) << "after an evaluation";
        m.Forward(in.data(), nullptr, B, T);
        EXPECT_EQ(host.held(), 0) << "after a forward without targets";
        m.ReadLogits(logits.data(), 0, static_cast<size_t>(B) * T);
        EXPECT_EQ(host.held(), 0) << "after ReadLogits";
        EXPECT_FALSE(host.negative());
        m.Sync();
        EXPECT_TRUE(m.comm_status().ok()) << m.comm_status();
        if (rows > 0) {
          // A backward without targets has no gradient to start from in blocks: an error that says
          // so, nothing left held.
          m.ForwardBackward(in.data(), nullptr, B, T, 1.f);
          m.Sync();
          EXPECT_EQ(m.comm_status().code(), absl::StatusCode::kInvalidArgument) << m.comm_status();
          EXPECT_NE(std::string(m.comm_status().message()).find("needs the last stage's targets"), std::string::npos)
              << m.comm_status();
          EXPECT_EQ(host.held(), 0) << "after the refused backward";
          EXPECT_FALSE(host.negative());
        }
      }
    }
  }
}

// The layout: one block's logits in the stage's region, the layers' backward scratch over them,
// dlnf kept with the micro-batch; the bytes saved are the whole logits' less the block's room.
TEST(ClassifierRowsLayoutTest, OneBlocksLogitsInTheStagesRegionAndDlnfKept) {
  const jobspec::GPTConfig c{64, 1000, 2, 2, 32};
  const int B = 4, T = 32;
  jobspec::LayoutOptions whole, blocks;
  whole.half = blocks.half = true;
  blocks.classifier_rows = 16;
  const jobspec::ActivationLayout a = jobspec::LayoutActivations(c, jobspec::ModelShard{}, B, T, whole);
  const jobspec::ActivationLayout b = jobspec::LayoutActivations(c, jobspec::ModelShard{}, B, T, blocks);
  EXPECT_EQ(a.classifier_rows, 0);
  EXPECT_EQ(b.classifier_rows, 16);
  EXPECT_LT(b.logits, b.shared);  // the stage's region
  EXPECT_GE(b.dlnf, b.shared);    // one micro-batch's
  EXPECT_GE(a.logits, a.shared);
  EXPECT_LT(a.dlnf, a.shared);
  EXPECT_TRUE(b.backward_scratch_in_logits);
  for (size_t at : {b.dres, b.dres16, b.dqkv, b.datty, b.dfch}) EXPECT_GE(at, b.logits);
  // The whole logits (B·T·V 16-bit values) against the block's room, which here holds the
  // scratch (larger than 16 rows of logits): dres (fp32) + dres16 + dqkv + datty + dfch (16-bit),
  // (1 + 0.5 + 1.5 + 0.5 + 2) B·T·C floats, and datt (the probabilities, B·NH·T·T floats).
  const size_t BT = static_cast<size_t>(B) * T;
  const size_t scratch = BT * 32 * 11 / 2 + static_cast<size_t>(B) * 2 * T * T;
  EXPECT_NEAR(static_cast<double>(a.total - b.total), static_cast<double>(BT * 1000 / 2 - scratch), 16 * 16.0);
  // A block at least B·T rows is the whole classifier.
  blocks.classifier_rows = static_cast<int>(BT);
  EXPECT_EQ(jobspec::LayoutActivations(c, jobspec::ModelShard{}, B, T, blocks).total, a.total);
  // Stages without the classifier lay nothing out for it.
  blocks.classifier_rows = 16;
  const jobspec::ModelShard first = jobspec::ShardOf(c, 1, 0, 2, 0);
  EXPECT_EQ(jobspec::LayoutActivations(c, first, B, T, blocks).total,
            jobspec::LayoutActivations(c, first, B, T, whole).total);
}

INSTANTIATE_TEST_SUITE_P(Backends, ClassifierRowsTest, ::testing::Values("cpu", "cuda-emulated"),
                         [](const auto& info) { return info.param == "cpu" ? std::string("Cpu") : std::string("CudaEmulated"); });

}  // namespace
}  // namespace gantry::model
