// optim::AdamW on its own (the cpu backend): torch.optim.AdamW's update against the same update
// in doubles, weight decay only where a tensor takes it, a ZeRO rank's sharded step (compact
// state, flat or compact gradients and parameters) against the whole buffer's, a step cut into
// chunks against one call, the device-side gradient multiplier; and the LossScaler's rules
// (torch.amp.GradScaler's). The optimizer against PyTorch itself, through a model's
// gradients, is tests/model/model_reference_test's.
#include "optim/adamw.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "optim/loss_scale.h"

namespace gantry::optim {
namespace {

// A 2-D tensor that takes decay (4x3), a bias that does not (3), another 2-D tensor (2x4).
std::vector<jobspec::ParamTensor> Tensors() {
  std::vector<jobspec::ParamTensor> t(3);
  t[0].name = "w1", t[0].shape = {4, 3}, t[0].offset = 0, t[0].numel = 12, t[0].decay = true;
  t[1].name = "b1", t[1].shape = {3}, t[1].offset = 12, t[1].numel = 3, t[1].decay = false;
  t[2].name = "w2", t[2].shape = {2, 4}, t[2].offset = 15, t[2].numel = 8, t[2].decay = true;
  return t;
}
constexpr size_t kN = 23;

std::vector<float> Random(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

const kernels::AdamWConfig kConfig{0.9, 0.95, 1e-8, 0.1};

// torch.optim.AdamW's step in doubles, with the hyper-parameters the kernel is given (fp32:
// AdamWConfig::Params): decay first (p *= 1 - lr·wd), then the moments and the bias-corrected
// update. mag: m's sum of the terms' magnitudes, which bounds its rounding where b1·m and
// (1 - b1)·g cancel.
struct Reference {
  std::vector<double> p, m, v, mag;
  explicit Reference(const std::vector<float>& params) : p(params.begin(), params.end()), m(kN), v(kN), mag(kN) {}
  void Step(const std::vector<float>& g, double lr_in, int step) {
    const kernels::AdamWParams hp = kConfig.Params(lr_in, step, true);
    const double b1 = hp.beta1, b2 = hp.beta2, lr = hp.lr, wd = hp.weight_decay, eps = hp.eps;
    for (const auto& t : Tensors()) {
      for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
        if (t.decay) p[i] *= 1 - lr * wd;
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        mag[i] = b1 * mag[i] + (1 - b1) * std::fabs(g[i]);
        v[i] = b2 * v[i] + (1 - b2) * double(g[i]) * g[i];
        const double mhat = m[i] / (1 - std::pow(b1, step));
        const double vhat = v[i] / (1 - std::pow(b2, step));
        p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
      }
    }
  }
};

// Three steps against the doubles: within a few fp32 roundings of each value a step (the
// update's terms are each O(lr)). Weight decay on the bias (or none on a weight) moves an
// element by lr·wd·|p| = 10^-3·|p| a step, about 8,000 times the bound.
TEST(AdamWTest, TheUpdateIsTorchsAndDecaysOnlyTheTensorsThatTakeIt) {
  std::vector<float> params = Random(kN, 1, 1.f);
  Reference ref(params);
  AdamW opt(Tensors(), kN, kConfig);
  const double lr = 1e-2;
  for (int step = 1; step <= 3; ++step) {
    const std::vector<float> g = Random(kN, 10 + step, 0.1f);
    opt.Step(params.data(), g.data(), lr, step);
    ref.Step(g, lr, step);
    const double u = std::numeric_limits<float>::epsilon();
    double worst = 0;
    for (size_t i = 0; i < kN; ++i) {
      const double bound = step * 8 * u * (std::fabs(ref.p[i]) + lr);
      const double e = std::fabs(params[i] - ref.p[i]);
      worst = std::max(worst, e / bound);
      EXPECT_LE(e, bound) << "element " << i << " step " << step;
      EXPECT_LE(std::fabs(opt.m().data()[i] - ref.m[i]), step * 4 * u * ref.mag[i]) << "m of element " << i;
      EXPECT_LE(std::fabs(opt.v().data()[i] - ref.v[i]), step * 4 * u * ref.v[i]) << "v of element " << i;
    }
    if (std::getenv("GANTRY_VERBOSE")) std::printf("step %d: worst parameter error %.3g of its bound\n", step, worst);
  }
}

// A ZeRO rank owns [3, 9) and [13, 20) of the flat buffer, compact at 0 and 6 (the second run
// crosses b1 into w2: two decay settings in one segment). Its step, with gradients flat (ZeRO
// 1) or compact (2), parameters flat or compact (3), gives the bits of the whole buffer's step
// on the owned elements, and leaves the others untouched.
TEST(AdamWTest, AShardedStepIsTheWholeBuffersStepOnTheOwnedElements) {
  const std::vector<ShardSegment> own = {{3, 9, 0}, {13, 20, 6}};
  const size_t local = 13;
  const std::vector<float> p0 = Random(kN, 2, 1.f);
  std::vector<float> whole = p0;
  AdamW full(Tensors(), kN, kConfig);
  std::vector<std::vector<float>> grads;
  for (int step = 1; step <= 2; ++step) {
    grads.push_back(Random(kN, 20 + step, 0.1f));
    full.Step(whole.data(), grads.back().data(), 1e-2, step);
  }
  auto compact = [&](const std::vector<float>& flat) {
    std::vector<float> c(local);
    for (const auto& s : own) {
      for (size_t i = s.flat_begin; i < s.flat_end; ++i) c[s.local + i - s.flat_begin] = flat[i];
    }
    return c;
  };
  for (auto [pindex, gindex] : {std::pair{AdamW::Index::kFlat, AdamW::Index::kFlat},
                                std::pair{AdamW::Index::kFlat, AdamW::Index::kLocal},
                                std::pair{AdamW::Index::kLocal, AdamW::Index::kLocal}}) {
    SCOPED_TRACE(::testing::Message() << "params " << (pindex == AdamW::Index::kFlat ? "flat" : "compact")
                                      << ", grads " << (gindex == AdamW::Index::kFlat ? "flat" : "compact"));
    AdamW shard(Tensors(), own, local, kConfig);
    std::vector<float> p = pindex == AdamW::Index::kFlat ? p0 : compact(p0);
    for (int step = 1; step <= 2; ++step) {
      const std::vector<float> g = gindex == AdamW::Index::kFlat ? grads[step - 1] : compact(grads[step - 1]);
      shard.Step(p.data(), pindex, g.data(), gindex, 1e-2, step);
    }
    for (const auto& s : own) {
      for (size_t i = s.flat_begin; i < s.flat_end; ++i) {
        const size_t l = s.local + i - s.flat_begin;
        EXPECT_EQ(p[pindex == AdamW::Index::kFlat ? i : l], whole[i]) << "element " << i;
        EXPECT_EQ(shard.m().data()[l], full.m().data()[i]) << "m of element " << i;
        EXPECT_EQ(shard.v().data()[l], full.v().data()[i]) << "v of element " << i;
      }
    }
    if (pindex == AdamW::Index::kFlat) {
      for (size_t i : {size_t{0}, size_t{2}, size_t{9}, size_t{12}, size_t{20}, size_t{22}}) {
        EXPECT_EQ(p[i], p0[i]) << "element " << i << " is not the rank's";
      }
    }
  }
}

// The offloaded optimizer steps a shard a chunk at a time ([local_begin, local_end)): chunks
// that tile the buffer, cut inside tensors, give one call's bits; a chunk leaves the rest as
// it was.
TEST(AdamWTest, AStepInChunksIsOneStep) {
  const std::vector<float> p0 = Random(kN, 3, 1.f), g = Random(kN, 4, 0.1f);
  std::vector<float> one = p0, chunked = p0;
  AdamW a(Tensors(), kN, kConfig), b(Tensors(), kN, kConfig);
  a.Step(one.data(), g.data(), 1e-2, 1);
  b.Step(chunked.data(), AdamW::Index::kFlat, g.data(), AdamW::Index::kFlat, 1e-2, 1, 0, 7);
  for (size_t i = 7; i < kN; ++i) EXPECT_EQ(chunked[i], p0[i]) << "element " << i << " is past the chunk";
  b.Step(chunked.data(), AdamW::Index::kFlat, g.data(), AdamW::Index::kFlat, 1e-2, 1, 7, 14);
  b.Step(chunked.data(), AdamW::Index::kFlat, g.data(), AdamW::Index::kFlat, 1e-2, 1, 14, kN);
  EXPECT_EQ(chunked, one);
  for (size_t i = 0; i < kN; ++i) EXPECT_EQ(b.m().data()[i], a.m().data()[i]) << i;
}

// grad_scale (the clip's coefficient, on the device): the step of the gradients multiplied
// first, in fp32, as Backend::Scale multiplies them; the gradients themselves unchanged.
TEST(AdamWTest, TheGradientMultiplierIsAppliedBeforeTheUpdate) {
  const std::vector<float> p0 = Random(kN, 5, 1.f), g = Random(kN, 6, 0.1f);
  const float scale = 0.37f;
  std::vector<float> scaled_g = g;
  for (float& x : scaled_g) x *= scale;
  std::vector<float> want = p0, got = p0;
  AdamW a(Tensors(), kN, kConfig), b(Tensors(), kN, kConfig);
  a.Step(want.data(), scaled_g.data(), 1e-2, 1);
  b.Step(got.data(), AdamW::Index::kFlat, g.data(), AdamW::Index::kFlat, 1e-2, 1, 0, static_cast<size_t>(-1),
         &scale);
  EXPECT_EQ(got, want);
  EXPECT_EQ(g, Random(kN, 6, 0.1f)) << "the gradients are left as they are";
}

// A job spec's train section as the optimizer's hyper-parameters and the working precision.
TEST(AdamWTest, TheTrainSectionGivesTheConfigAndThePrecision) {
  jobspec::TrainSpec t;
  t.beta1 = 0.8, t.beta2 = 0.99, t.eps = 1e-6, t.weight_decay = 0.05;
  const kernels::AdamWConfig c = AdamWOf(t);
  EXPECT_EQ(c.beta1, 0.8);
  EXPECT_EQ(c.beta2, 0.99);
  EXPECT_EQ(c.eps, 1e-6);
  EXPECT_EQ(c.weight_decay, 0.05);
  EXPECT_EQ(c.Params(1e-3, 4, false).weight_decay, 0.f) << "a tensor without decay";
  EXPECT_EQ(c.Params(1e-3, 4, true).weight_decay, 0.05f);
  for (auto [name, p] : {std::pair{"fp32", kernels::Precision::kFp32}, std::pair{"bf16", kernels::Precision::kBf16},
                         std::pair{"fp16", kernels::Precision::kFp16}}) {
    t.precision = name;
    EXPECT_EQ(PrecisionOf(t), p) << name;
  }
}

// GradScaler's rules: an overflow halves the scale, counts a skipped step and restarts the
// run of clean steps; `window` clean steps in a row double it. Disabled (fp32, bf16): scale
// 1 whatever happens, and a checkpoint's state is not taken.
TEST(LossScalerTest, GradScalersRulesAndTheDisabledScaler) {
  LossScaler s(65536, 3);
  EXPECT_TRUE(s.enabled());
  EXPECT_EQ(s.scale(), 65536.f);
  EXPECT_EQ(s.Update(false), 65536);
  EXPECT_EQ(s.Update(false), 65536);
  EXPECT_EQ(s.Update(true), 32768) << "an overflow halves it";
  EXPECT_EQ(s.state().skipped_steps, 1);
  EXPECT_EQ(s.state().growth_tracker, 0) << "and restarts the clean run";
  EXPECT_EQ(s.Update(false), 32768);
  EXPECT_EQ(s.Update(false), 32768);
  EXPECT_EQ(s.Update(false), 65536) << "three clean steps in a row double it";
  EXPECT_EQ(s.state().growth_tracker, 0);
  LossScaleState saved = s.state();
  LossScaler resumed(1024, 3);
  resumed.Restore(saved);
  EXPECT_EQ(resumed.state(), saved);

  LossScaler off;
  EXPECT_FALSE(off.enabled());
  EXPECT_EQ(off.Update(true), 1);
  EXPECT_EQ(off.scale(), 1.f);
  EXPECT_EQ(off.state().skipped_steps, 0);
  off.Restore(saved);
  EXPECT_EQ(off.state(), LossScaleState{}) << "a disabled scaler keeps no state";
}

}  // namespace
}  // namespace gantry::optim
