// The memory a mixed-precision job takes on the cpu backend against the planner (gantry plan,
// gantry submit): GPT-2 124M's shapes (12 layers, 12 heads, 768 wide, 50257 tokens, T 1024,
// micro-batch 1) in bf16, under ZeRO 0 (one rank) and ZeRO 3 (two ranks), trained in a
// process of their own (tests/worker/train/memory_probe.cc). What the process held at its most
// (its resident high-water mark less what it held before the model) is within 10% of what the
// planner predicts for its ranks (params, grads, optimizer, activations and working bytes:
// jobspec/planner.h), and each rank's own account of its buffers is within 1% of the plan.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace {

// The probe's JSON for one layout, or an empty object (with the failure recorded).
nlohmann::json Probe(const std::string& args) {
  const std::string cmd = absl::StrCat(GANTRY_MEMORY_PROBE,
                                       " --layers 12 --heads 12 --embd 768 --vocab 50257 --seq 1024 --micro-batch 1"
                                       " --steps 2 --precision bf16 ",
                                       args);
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

}  // namespace
