// agent::AssignedSpec: the one place a rank reads its assignment's spec. The spec arrives as its
// user submitted it; the placement's layout (the Assignment's typed fields) and this
// placement's checkpoint directory are applied there, and nowhere else.
#include "worker/agent/assignment.h"

#include <gtest/gtest.h>

#include <string>

namespace gantry::agent {
namespace {

// An elastic job, dp 1 to 4 of a global batch of 8, as a user writes it.
constexpr char kElastic[] =
    "name: e\nmodel: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8}\ndata: {train: /d/train.bin}\n"
    "train: {steps: 10, micro_batch: 2, global_batch: 8, lr: 1.0e-3}\n"
    "parallel: {dp: 4}\nelastic: {min_dp: 1, max_dp: 4}\ncheckpoint: {every: 5, dir: ignored}\n";

v1::Assignment Assigned(const std::string& yaml, int dp, int world) {
  v1::Assignment a;
  a.set_job_id("j-000007");
  a.set_generation(3);
  a.set_spec_yaml(yaml);
  a.set_world_size(world);
  v1::Layout* l = a.mutable_layout();
  l->set_dp(dp), l->set_tp(1), l->set_pp(1), l->set_cp(1), l->set_virtual_stages(1);
  l->set_micro_batch(2);
  l->set_recompute("none");
  return a;
}

TEST(AssignedSpecTest, AppliesThePlacementsLayoutAndCheckpointDirectory) {
  auto spec = AssignedSpec(Assigned(kElastic, 2, 2), "/work");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->parallel.dp, 2) << "the placement's dp, not the spec's 4";
  EXPECT_EQ(spec->grad_accum(), 2);
  EXPECT_EQ(spec->train.global_batch, 8);
  EXPECT_EQ(spec->checkpoint.dir, "/work/j-000007/gen3/checkpoints");
  EXPECT_EQ(spec->checkpoint.every, 5) << "the rest is the user's";
  EXPECT_EQ(spec->name, "e");
}

TEST(AssignedSpecTest, ResolvesParallelAutoToThePlannersChoice) {
  v1::Assignment a = Assigned(
      "model: {n_layer: 4, n_head: 4, n_embd: 32, vocab_size: 256, seq_len: 16}\ndata: {train: t.bin}\n"
      "train: {steps: 10, global_batch: 8, lr: 1.0e-3}\nparallel: auto\n",
      1, 4);
  v1::Layout* l = a.mutable_layout();
  l->set_tp(2), l->set_pp(2), l->set_zero_stage(1), l->set_micro_batch(4), l->set_recompute("full");
  auto spec = AssignedSpec(a, "/w");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->auto_layout());
  EXPECT_EQ(spec->world_size(), 4);
  EXPECT_EQ(spec->parallel.tp, 2);
  EXPECT_EQ(spec->parallel.pp, 2);
  EXPECT_EQ(spec->parallel.zero_stage, 1);
  EXPECT_EQ(spec->train.micro_batch, 4);
  EXPECT_EQ(spec->train.recompute, "full");
  EXPECT_EQ(spec->grad_accum(), 2);
}

TEST(AssignedSpecTest, RefusesWhatDoesNotFitNamingTheField) {
  auto error = [](const v1::Assignment& a) {
    auto s = AssignedSpec(a, "/w");
    EXPECT_FALSE(s.ok());
    if (!s.ok()) EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
    return s.ok() ? std::string() : std::string(s.status().message());
  };
  EXPECT_NE(error(Assigned(kElastic, 3, 3)).find("job j-000007 generation 3: the placement's layout: job spec: field "
                                                  "'parallel.dp' is 3 in the placement's layout, not one of the "
                                                  "elastic job's dp choices (1, 2, 4)"),
            std::string::npos);
  EXPECT_NE(error(Assigned(kElastic, 2, 4)).find("the placement's layout has 2 ranks (dp x cp x tp x pp), the "
                                                  "assignment's world_size 4"),
            std::string::npos);
  v1::Assignment bare = Assigned(kElastic, 1, 1);
  bare.clear_layout();
  EXPECT_NE(error(bare).find("the assignment has no layout"), std::string::npos);
  EXPECT_NE(error(Assigned(std::string(kElastic) + "train2: {}\n", 1, 1)).find("unknown field 'train2'"),
            std::string::npos);
}

}  // namespace
}  // namespace gantry::agent
