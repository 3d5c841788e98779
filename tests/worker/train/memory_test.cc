// The memory a mixed-precision job takes on the cpu backend against the planner (gantry plan,
// gantry submit): GPT-2 124M's shapes (12 layers, 12 heads, 768 wide, 50257 tokens, T 1024,
// micro-batch 1) in bf16, under ZeRO 0 (one rank) and ZeRO 3 (two ranks), trained in a
// process of their own (tests/worker/train/memory_probe.cc). What the process held at its most
// (its resident high-water mark less what it held before the model) is within 10% of what the
// planner predicts for its ranks (params, grads, optimizer, activations and working bytes:
// jobspec/planner.h), and each rank's own account of its buffers is within 1% of the plan.
// A pipeline of many micro-batches keeps, for each micro-batch in flight, only what that
// micro-batch's backward reads (PipelineKeepsPerMicroBatchOnlyWhatItsBackwardReads).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace {

// The probe's JSON for one layout, or an empty object (with the failure recorded).
constexpr const char* kGpt2Small =
    " --layers 12 --heads 12 --embd 768 --vocab 50257 --seq 1024 --micro-batch 1 --steps 2 --precision bf16 ";

nlohmann::json Probe(const std::string& args, const std::string& shape = kGpt2Small) {
  const std::string cmd = absl::StrCat(GANTRY_MEMORY_PROBE, shape, args);
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  if (!p) {
    ADD_FAILURE() << "cannot run " << cmd;
    return nlohmann::json::object();
  }
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = std::fread(buf.data(), 1, buf.size(), p.get())) out.append(buf.data(), n);
  const int rc = pclose(p.release());
  if (rc != 0) {
    ADD_FAILURE() << cmd << " exited with " << rc << ": " << out;
    return nlohmann::json::object();
  }
  return nlohmann::json::parse(out);
}

void ExpectPlanned(const std::string& what, const std::string& args, int dp) {
  const nlohmann::json j = Probe(args);
  if (j.empty()) return;
  const double planned = j["plan"]["total"].get<double>();
  const double measured = j["measured"].get<double>();
  std::printf("%s: measured %.1f MB (resident %.1f MB before the model), planned %d x %.1f MB = %.1f MB: %.3f\n",
              what.c_str(), measured / 1e6, j["baseline_rss"].get<double>() / 1e6, dp, planned / 1e6,
              dp * planned / 1e6, measured / (dp * planned));
  EXPECT_LE(std::fabs(measured / (dp * planned) - 1), 0.10) << what << ": " << j.dump();
  ASSERT_EQ(j["ranks"].size(), static_cast<size_t>(dp));
  for (const auto& r : j["ranks"]) {
    EXPECT_LE(std::fabs(r["peak"].get<double>() / planned - 1), 0.01) << what << ": " << r.dump() << " against "
                                                                         << j["plan"].dump();
  }
}

TEST(MemoryTest, Gpt2SmallInBf16TakesWhatThePlannerPredictsUnderZeroZero) {
  ExpectPlanned("bf16 ZeRO 0, dp 1", "--dp 1 --zero 0", 1);
}

TEST(MemoryTest, Gpt2SmallInBf16TakesWhatThePlannerPredictsUnderZeroThree) {
  ExpectPlanned("bf16 ZeRO 3, dp 2", "--dp 2 --zero 3", 2);
}

// A pipeline of two stages and 16 micro-batches a step, GPipe (every micro-batch in flight at
// once) and 1F1B (stage s keeps pp - s), in fp32 with full recomputation, on the cpu backend
// and on cuda-emulated (rank r on emulated device r). What a micro-batch's backward reads is
// the stage's input and each of its layers' inputs (full recomputation), and on the last stage
// also its last layer's output, the final norm's output and statistics (LayerNorm's mean and
// rstd), the logits (dlogits by then) and the per-token losses: per micro-batch, in floats,
//   first stage  L·BT·C                               (L the stage's layers, BT = B·T)
//   last stage   (L + 2)·BT·C + 2·BT + BT·V + BT
// (every size here a multiple of 16 floats: no alignment padding). The one-step scratch and
// the recomputation's block are the stage's, once. So the planned activations of a stage grow
// from one micro-batch in flight to its `slots` by exactly (slots - 1) times that. (Before the
// stage's scratch was laid out once, each micro-batch had a whole copy of it: the growth was
// (slots - 1) times the whole buffer, here 6 to 32 times more.) Each rank's own account of its
// activations is the plan's, and what the runs held follows the plan: the GPipe run's
// resident high-water mark (cpu) or each emulated device's bytes at the end of the run
// (cuda-emulated) exceed the 1F1B run's by the planned difference within 5% (a difference: what
// neither plan counts cancels, the runtime's buffers, the tokens, the cuBLAS workspace; the
// rest is the pages of the data and of small allocations, well under 5% of the 24-31 MB).
TEST(MemoryTest, PipelineKeepsPerMicroBatchOnlyWhatItsBackwardReads) {
  const int layers = 4, C = 128, V = 256, T = 512, B = 1, m = 16;
  const std::string shape = absl::StrCat(" --layers ", layers, " --heads 4 --embd ", C, " --vocab ", V, " --seq ", T,
                                         " --micro-batch ", B, " --steps 1 --precision fp32 ");
  const double BT = B * T;
  for (const std::string device : {"cpu", "cuda-emulated"}) {
    std::map<std::string, nlohmann::json> runs;
    for (const std::string schedule : {"gpipe", "1f1b"}) {
      const std::string what = absl::StrCat(device, " ", schedule, " pp 2, ", m, " micro-batches");
      const nlohmann::json j =
          Probe(absl::StrCat("--dp 1 --zero 0 --pp 2 --recompute full --microbatches ", m, " --schedule ", schedule,
                             " --device ", device),
                shape);
      if (j.empty()) continue;
      ASSERT_EQ(j["stages"].size(), 2u) << what;
      ASSERT_EQ(j["ranks"].size(), 2u) << what;
      for (size_t s = 0; s < 2; ++s) {
        const nlohmann::json& st = j["stages"][s];
        const double L = st["layers"].get<double>();
        const double kept = s == 0 ? L * BT * C : (L + 2) * BT * C + 2 * BT + BT * V + BT;
        const int slots = st["slots"].get<int>();
        EXPECT_EQ(slots, schedule == "gpipe" ? m : 2 - static_cast<int>(s)) << what;
        const double grew = st["activations"].get<double>() - st["activations_one"].get<double>();
        std::printf("%s, stage %zu: %d micro-batches in flight, activations %.2f MB (one: %.2f MB): %.3f MB more "
                    "a micro-batch, %.3f MB read by its backward\n",
                    what.c_str(), s, slots, st["activations"].get<double>() / 1e6,
                    st["activations_one"].get<double>() / 1e6, slots > 1 ? grew / (slots - 1) / 1e6 : 0.0,
                    4 * kept / 1e6);
        EXPECT_EQ(grew, (slots - 1) * 4 * kept) << what << " stage " << s;
        EXPECT_EQ(j["ranks"][s]["activations"].get<double>(), st["activations"].get<double>())
            << what << " stage " << s;
      }
      runs[schedule] = j;
    }
    if (runs.size() != 2) continue;
    const nlohmann::json &gpipe = runs["gpipe"], &one_f_one_b = runs["1f1b"];
    auto planned_more = [&](size_t s) {
      return gpipe["stages"][s]["total"].get<double>() - one_f_one_b["stages"][s]["total"].get<double>();
    };
    if (device == "cpu") {  // every rank a thread of one process: their sum
      const double held = gpipe["measured"].get<double>() - one_f_one_b["measured"].get<double>();
      const double planned = planned_more(0) + planned_more(1);
      std::printf("%s: GPipe's run held %.2f MB more than 1F1B's (resident high-water mark), planned %.2f MB: %.3f\n",
                  device.c_str(), held / 1e6, planned / 1e6, held / planned);
      EXPECT_LE(std::fabs(held / planned - 1), 0.05) << device;
      continue;
    }
    for (size_t s = 0; s < 2; ++s) {
      const double held =
          gpipe["ranks"][s]["device_bytes"].get<double>() - one_f_one_b["ranks"][s]["device_bytes"].get<double>();
      std::printf("%s, stage %zu: GPipe's device held %.2f MB more than 1F1B's, planned %.2f MB: %.3f\n",
                  device.c_str(), s, held / 1e6, planned_more(s) / 1e6, held / planned_more(s));
      EXPECT_LE(std::fabs(held / planned_more(s) - 1), 0.05) << device << " stage " << s;
    }
  }
}

}  // namespace
