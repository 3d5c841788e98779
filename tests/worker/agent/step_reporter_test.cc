// What a rank tells of its training (worker/agent/step_reporter.h): the step reports it sends
// up the attach stream, with the last evaluation's loss, and the worker's series on /metrics.
#include "worker/agent/step_reporter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

namespace gantry::agent {
namespace {

jobspec::JobSpec Spec() {
  // global batch 8 x T 16 over dp 2: a rank's share of a step is 64 tokens.
  auto s = jobspec::ParseJobSpec(
      "model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 31, seq_len: 16}\n"
      "data: {train: train.bin}\n"
      "train: {steps: 4, micro_batch: 2, global_batch: 8, lr: 1.0e-3}\n"
      "parallel: {dp: 2}\n");
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

v1::Assignment Assign(int rank, int local_rank, int local_world) {
  v1::Assignment a;
  a.set_job_id("j-1");
  a.set_generation(3);
  a.set_rank(rank);
  a.set_world_size(2);
  a.set_local_rank(local_rank);
  a.set_local_world(local_world);
  return a;
}

train::StepReport Report(int64_t step) {
  train::StepReport r;
  r.step = step;
  r.loss = 4.0f - static_cast<float>(step);
  r.lr = 1e-3;
  r.seconds = 0.5;
  r.tokens_per_second = 256;
  r.moe_forwards = 2;
  r.moe_tokens_per_expert = {5, 7};
  r.notes = {"a note"};
  return r;
}

// A series' value on the rendered page; NaN where it is not there.
double Value(const std::string& page, const std::string& series) {
  std::istringstream lines(page);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return NAN;
}

TEST(StepReporterTest, RankZeroSendsEachStepWithTheLastEvaluationAndTheFirstOneAlone) {
  const jobspec::JobSpec spec = Spec();
  const v1::Assignment a = Assign(0, 0, 1);
  metrics::Registry registry;
  std::vector<v1::WorkerMessage> sent;
  StepReporter reporter(a, spec, &registry, 0, [&](const v1::WorkerMessage& m) {
    sent.push_back(m);
    return true;
  });
  reporter.Eval(0, 3.5f);  // before training: a report of its own
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].step().job_id(), "j-1");
  EXPECT_EQ(sent[0].step().generation(), 3);
  EXPECT_EQ(sent[0].step().report().step(), 0);
  EXPECT_TRUE(std::isnan(sent[0].step().report().loss()));
  EXPECT_EQ(sent[0].step().report().val_loss(), 3.5f);
  reporter.Step(Report(1));
  reporter.Eval(2, 2.5f);  // goes out with step 2's report, not alone
  EXPECT_EQ(sent.size(), 2u);
  reporter.Step(Report(2));
  reporter.Step(Report(3));
  ASSERT_EQ(sent.size(), 4u);
  const v1::StepReport& one = sent[1].step().report();
  EXPECT_EQ(one.step(), 1);
  EXPECT_EQ(one.loss(), 3.0f);
  EXPECT_TRUE(std::isnan(one.val_loss())) << "no evaluation since the last report";
  EXPECT_EQ(one.tokens_per_second(), 256);
  EXPECT_EQ(std::vector<int64_t>(one.moe_tokens_per_expert().begin(), one.moe_tokens_per_expert().end()),
            (std::vector<int64_t>{5, 7}));
  ASSERT_EQ(one.notes_size(), 1);
  EXPECT_EQ(one.notes(0), "a note");
  EXPECT_EQ(sent[2].step().report().val_loss(), 2.5f);
  EXPECT_TRUE(std::isnan(sent[3].step().report().val_loss())) << "an evaluation is sent once";
}

TEST(StepReporterTest, OnlyRankZeroSendsAndOnlyLocalRankZeroPublishesTheWorkersSeries) {
  const jobspec::JobSpec spec = Spec();
  std::vector<v1::WorkerMessage> sent;
  auto send = [&](const v1::WorkerMessage& m) {
    sent.push_back(m);
    return true;
  };
  // Rank 1, alone on its worker: it publishes, and sends nothing.
  const v1::Assignment alone = Assign(1, 0, 1);
  metrics::Registry published;
  StepReporter reporter(alone, spec, &published, 1e12, send);
  reporter.Eval(0, 3.5f);
  reporter.Step(Report(1));
  reporter.Step(Report(2));
  EXPECT_TRUE(sent.empty());
  const std::string page = published.Render();
  EXPECT_EQ(Value(page, "gantry_worker_loss"), 2.0) << page;
  EXPECT_EQ(Value(page, "gantry_worker_steps_total"), 2.0) << page;
  EXPECT_EQ(Value(page, "gantry_worker_tokens_per_second"), 128.0) << "64 tokens a step over 0.5 s: " << page;
  EXPECT_GT(Value(page, "gantry_worker_mfu_ratio"), 0.0) << page;
  EXPECT_EQ(Value(page, "gantry_worker_moe_tokens_total{expert=\"1\"}"), 14.0) << page;
  // Ranks 0 and 1 on one worker: rank 0 sends and publishes for both, rank 1 does neither.
  metrics::Registry both;
  StepReporter first(Assign(0, 0, 2), spec, &both, 0, send);
  StepReporter second(Assign(1, 1, 2), spec, &both, 0, send);
  first.Step(Report(1));
  second.Step(Report(1));
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].step().rank(), 0);
  EXPECT_EQ(Value(both.Render(), "gantry_worker_steps_total"), 1.0) << both.Render();
  EXPECT_EQ(Value(both.Render(), "gantry_worker_tokens_per_second"), 256.0) << "the worker's two ranks: " << both.Render();
  EXPECT_TRUE(std::isnan(Value(both.Render(), "gantry_worker_mfu_ratio"))) << "no peak rate, no MFU: " << both.Render();
}

}  // namespace
}  // namespace gantry::agent
