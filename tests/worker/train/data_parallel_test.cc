// Over 700 lines: ZeRO stages 0-3 with bf16 reduction, offload and parameter-server mode, one
// case a combination that could break alone.
// Data parallelism with ZeRO stages 0-3 gives one process's training: DP ranks as threads
// of this process, joined by the Gloo communicator over loopback TCP, against gantry-train's
// loop in one process with the same global batch and seed. (tests/integration/cluster_test.sh
// runs the same matrix with worker processes.)
#include <gloo/rendezvous/hash_store.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "common/file_util.h"
#include "common/metrics.h"
#include "kernels/threads.h"
#include "shardserver/param_service.h"
#include "shardserver/service.h"
#include "tests/test_util.h"
#include "worker/agent/param_client.h"
#include "checkpoint/remote/shard_source.h"
#include "data/token_file.h"
#include "comm/gloo/gloo_communicator.h"
#include "absl/strings/str_cat.h"
#include "jobspec/planner.h"
#include "worker/train/trainer.h"

namespace gantry::train {
namespace {

// Passes every collective on to a communicator, counting the bytes of the buffers handed to
// its sums (all-reduce: the buffer; reduce-scatter: the whole input), fp32 and bf16 apart.
class CountingCommunicator final : public comm::Communicator {
 public:
  explicit CountingCommunicator(comm::Communicator* c) : c_(c) {}
  int rank() const override { return c_->rank(); }
  int size() const override { return c_->size(); }
  uint64_t seq() const override { return c_->seq(); }
  uint64_t completed() const override { return c_->completed(); }
  absl::Status AllReduceSum(float* data, size_t n) override {
    f32_bytes += n * sizeof(float);
    return c_->AllReduceSum(data, n);
  }
  absl::Status ReduceScatterSum(const float* in, float* out, size_t n) override {
    f32_bytes += n * static_cast<size_t>(size()) * sizeof(float);
    return c_->ReduceScatterSum(in, out, n);
  }
  absl::Status AllReduceSumBf16(uint16_t* data, size_t n) override {
    bf16_bytes += n * sizeof(uint16_t);
    return c_->AllReduceSumBf16(data, n);
  }
  absl::Status ReduceScatterSumBf16(const uint16_t* in, uint16_t* out, size_t n) override {
    bf16_bytes += n * static_cast<size_t>(size()) * sizeof(uint16_t);
    return c_->ReduceScatterSumBf16(in, out, n);
  }
  absl::Status AllGather(const float* in, float* out, size_t n) override { return c_->AllGather(in, out, n); }
  absl::Status AllToAll(const float* in, float* out, size_t n) override { return c_->AllToAll(in, out, n); }
  absl::Status AllToAllV(const float* in, const std::vector<size_t>& send_counts, float* out,
                         const std::vector<size_t>& recv_counts) override {
    return c_->AllToAllV(in, send_counts, out, recv_counts);
  }
  absl::Status Broadcast(float* data, size_t n, int root) override { return c_->Broadcast(data, n, root); }
  absl::Status Send(const float* data, size_t n, int peer) override { return c_->Send(data, n, peer); }
  absl::Status Recv(float* data, size_t n, int peer) override { return c_->Recv(data, n, peer); }
  absl::Status Barrier() override { return c_->Barrier(); }
  void Abort() override { c_->Abort(); }
  // Written by the communication thread, read after the run.
  std::atomic<size_t> f32_bytes{0}, bf16_bytes{0};

 private:
  comm::Communicator* c_;
};

class DataParallelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::vector<uint16_t> toks = testing::PatternedTokens(40000, 9);
    ASSERT_TRUE(data::WriteTokenFile(dir_.File("train.bin"), toks).ok());
  }
  jobspec::JobSpec Spec(int dp, int zero = 0, const std::string& extra = "") {
    auto s = jobspec::ParseJobSpec("model: {n_layer: 2, n_head: 2, n_embd: " + std::to_string(n_embd_) + ", vocab_size: 31, seq_len: 16}\n"
                          "data: {train: " + dir_.File("train.bin") + ", shuffle: true}\n"
                          "train: {steps: " + std::to_string(steps_) + ", micro_batch: 2, global_batch: 8, lr: 1.0e-2, warmup: 2, "
                          "min_lr_ratio: 0.1, weight_decay: 0.1, grad_clip: 1.0, seed: 3" + train_extra_ + "}\n"
                          "parallel: {dp: " + std::to_string(dp) + ", zero_stage: " + std::to_string(zero) +
                          ", bucket_mb: " + bucket_mb_ + parallel_extra_ + "}\n" + extra);
    EXPECT_TRUE(s.ok()) << s.status();
    return *s;
  }
  struct Result {
    std::vector<float> losses, params;
    std::vector<MemoryAccount> memory;  // by rank
    std::vector<StepReport> reports;    // rank 0's
    size_t f32_sum_bytes = 0, bf16_sum_bytes = 0;  // rank 0's, handed to the DP group's sums
  };
  Result Run(int dp, int zero = 0, const std::string& extra = "", int64_t stop_after = 0, bool resume = false) {
    std::vector<Result> results(static_cast<size_t>(dp));
    std::vector<absl::Status> status(static_cast<size_t>(dp));
    auto store = std::make_shared<gloo::rendezvous::HashStore>();
    std::vector<std::thread> threads;
    for (int r = 0; r < dp; ++r) {
      threads.emplace_back([&, r] {
        kernels::ConfigureThreads(1);
        std::unique_ptr<comm::GlooCommunicator> comm;
        TrainOptions o;
        o.stop_after = stop_after;
        o.resume = resume;
        o.worker.checkpoint_cuts = cuts_;
        std::unique_ptr<checkpoint::CheckpointSource> source;
        if (source_factory_) {
          source = source_factory_();
          o.worker.resume_source = source.get();
        }
        FILE* null = std::fopen("/dev/null", "w");
        o.out = null;
        std::unique_ptr<RemoteOptimizer> remote;
        if (remote_factory_) {
          remote = remote_factory_();
          o.worker.remote_optimizer = remote.get();
        }
        std::unique_ptr<CountingCommunicator> counting;
        std::unique_ptr<comm::Groups> groups;
        if (dp > 1 && make_groups_) {
          auto g = comm::MakeGroups(r, {dp}, comm::GlooGroups(store, {}));
          if (!g.ok()) {
            status[r] = g.status();
            return;
          }
          groups = std::move(*g);
        } else if (dp > 1) {
          auto c = comm::GlooCommunicator::Create(r, dp, store, {});
          if (!c.ok()) {
            status[r] = c.status();
            return;
          }
          comm = std::move(*c);
          counting = std::make_unique<CountingCommunicator>(comm.get());
        }
        // The groups of a data-parallel job over the one (counted) communicator.
        if (groups == nullptr) groups = comm::DataParallelGroups(counting.get());
        o.groups = groups.get();
        auto t = Trainer::Create(Spec(dp, zero, extra), o);
        status[r] = t.ok() ? (*t)->Run() : t.status();
        if (t.ok()) {
          for (const auto& rep : (*t)->reports()) results[r].losses.push_back(rep.loss);
          results[r].reports = (*t)->reports();
          results[r].params.assign((*t)->model().params(), (*t)->model().params() + (*t)->model().num_params());
          results[r].memory.push_back((*t)->memory());
        }
        if (counting) {  // (Run waited for every collective it queued)
          results[r].f32_sum_bytes = counting->f32_bytes;
          results[r].bf16_sum_bytes = counting->bf16_bytes;
        }
        if (source_read_) source_read_(r, source.get());
        std::fclose(null);
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& s : status) EXPECT_TRUE(s.ok()) << s;
    for (int r = 1; r < dp; ++r) {  // every rank holds the same model
      EXPECT_EQ(results[0].params, results[r].params) << "rank " << r;
      // ...and took the same loss-scaling decisions (fp16)
      EXPECT_EQ(results[0].reports.size(), results[r].reports.size()) << "rank " << r;
      for (size_t i = 0; i < std::min(results[0].reports.size(), results[r].reports.size()); ++i) {
        EXPECT_EQ(results[0].reports[i].skipped, results[r].reports[i].skipped) << "rank " << r << " step " << i + 1;
        EXPECT_EQ(results[0].reports[i].loss_scale, results[r].reports[i].loss_scale) << "rank " << r << " step " << i + 1;
      }
      if (!results[r].memory.empty()) results[0].memory.push_back(results[r].memory[0]);
    }
    return results[0];
  }
  // Serves svc on a loopback port 0; its address, or "" if it did not start.
  static std::string Serve(grpc::Service* svc, std::vector<std::unique_ptr<grpc::Server>>& servers) {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(svc);
    servers.push_back(b.BuildAndStart());
    return port > 0 ? "127.0.0.1:" + std::to_string(port) : std::string();
  }
  void ExpectSameTraining(const Result& many, const Result& one, const std::string& what) {
    ASSERT_EQ(many.losses.size(), one.losses.size()) << what;
    for (size_t i = 0; i < one.losses.size(); ++i) {
      EXPECT_LE(std::fabs(many.losses[i] - one.losses[i]) / one.losses[i], 1e-5)
          << what << " step " << i + 1 << ": " << many.losses[i] << " vs " << one.losses[i];
    }
    EXPECT_LE(testing::RelErr(many.params, one.params), 1e-5) << what;
  }
  int n_embd_ = 16;
  int steps_ = 20;
  std::function<std::unique_ptr<RemoteOptimizer>()> remote_factory_;  // parameter-server mode
  std::vector<size_t> cuts_;                                           // checkpoint slices
  bool make_groups_ = false;  // the ranks' groups from MakeGroups (a world group apart), not DataParallelGroups
  std::function<std::unique_ptr<checkpoint::CheckpointSource>()> source_factory_;  // resume from it, per rank
  std::function<void(int rank, checkpoint::CheckpointSource*)> source_read_;       // after the rank's run
  std::string bucket_mb_ = "25";
  std::string train_extra_;     // more of the train section, as ", key: value"
  std::string parallel_extra_;  // more of the parallel section, as ", key: value"
  testing::TempDir dir_;
};

TEST_F(DataParallelTest, DpTwoAndFourGiveOneProcessLossesAndParameters) {
  const Result one = Run(1);
  ASSERT_EQ(one.losses.size(), 20u);
  for (int dp : {2, 4}) {
    const Result many = Run(dp);
    ASSERT_EQ(many.losses.size(), 20u) << "dp " << dp;
    for (size_t i = 0; i < 20; ++i) {
      EXPECT_LE(std::fabs(many.losses[i] - one.losses[i]) / one.losses[i], 1e-5)
          << "dp " << dp << " step " << i + 1 << ": " << many.losses[i] << " vs " << one.losses[i];
    }
    EXPECT_LE(testing::RelErr(many.params, one.params), 1e-5) << "dp " << dp;
    if (std::getenv("GANTRY_VERBOSE")) {
      for (const auto& t : jobspec::ParameterLayout(Spec(1).model)) {
        double m = 0;
        for (size_t i = t.offset; i < t.offset + t.numel; ++i) m = std::max(m, double(std::fabs(many.params[i] - one.params[i])));
        std::printf("dp %d %-26s max abs diff %.3g\n", dp, t.name.c_str(), m);
      }
    }
  }
}

// A rank is handed its groups one way, whoever made them: MakeGroups' of a data-parallel
// layout (dp and world apart) train as DataParallelGroups' over one communicator, bit for bit.
// Groups whose layout is not the spec's, or none where the spec has several ranks, are refused
// with what each says.
TEST_F(DataParallelTest, TheRanksGroupsAreTheSpecsLayoutWhoeverMadeThem) {
  steps_ = 4;
  const Result one_group = Run(2);
  make_groups_ = true;
  const Result made = Run(2);
  ASSERT_EQ(made.losses.size(), 4u);
  EXPECT_EQ(made.losses, one_group.losses);
  EXPECT_EQ(made.params, one_group.params);
  TrainOptions o;
  FILE* null = std::fopen("/dev/null", "w");
  o.out = null;
  auto alone = Trainer::Create(Spec(2), o);
  EXPECT_TRUE(absl::IsInvalidArgument(alone.status())) << alone.status();
  EXPECT_NE(alone.status().message().find("parallel.dp is 2 but 1 rank runs this job"), std::string::npos)
      << alone.status();
  comm::Groups two;  // a layout alone: it is checked before any group is used
  two.layout.dp = 2;
  o.groups = &two;
  auto other = Trainer::Create(Spec(4), o);
  EXPECT_TRUE(absl::IsInvalidArgument(other.status())) << other.status();
  EXPECT_NE(other.status().message().find("the job spec has dp 4 x cp 1 x tp 1 x pp 1 (ep 1) but this rank's groups are "
                                          "dp 2 x cp 1 x tp 1 x pp 1 (ep 1)"),
            std::string::npos)
      << other.status();
  o.groups = nullptr;
  parallel_extra_ = ", tp: 2";
  auto sharded = Trainer::Create(Spec(1), o);
  EXPECT_TRUE(absl::IsFailedPrecondition(sharded.status())) << sharded.status();
  EXPECT_NE(sharded.status().message().find("runs 2 ranks: submit the job to a cluster"), std::string::npos)
      << sharded.status();
  std::fclose(null);
}

// DP in {1, 2, 4} x ZeRO in {0, 1, 2, 3}, global batch 8 = micro 2 x accum x dp (accum 4, 2,
// 1): 20 steps give one process's losses and final parameters. With 4 KB buckets each
// reduction holds about one layer, so several are in flight during backward.
TEST_F(DataParallelTest, EveryDpAndZeroStageGivesOneProcessLossesAndParameters) {
  const Result one = Run(1);
  ASSERT_EQ(one.losses.size(), 20u);
  for (int zero : {0, 1, 2, 3}) {
    for (int dp : {1, 2, 4}) {
      for (const char* bucket : {"25", "0.004"}) {
        const std::string what = absl::StrCat("dp ", dp, " zero ", zero, " bucket_mb ", bucket);
        bucket_mb_ = bucket;
        ExpectSameTraining(Run(dp, zero), one, what);
      }
    }
  }
}

// train.grad_reduce_dtype bf16: dp 2 and 4 under ZeRO 0-3, in bf16 mixed precision, against
// the same runs reducing in fp32. Step 1's loss is the same bit for bit (it is computed before
// any reduction is used). After it the runs part by the rounding of the reduction alone:
// each gradient that reaches AdamW differs from the fp32-reduced one by the rounding of each
// rank's bucket to bf16 and by the dp - 1 additions in bf16, each at most bf16's unit
// roundoff u = 2^-8 (8 significant bits) of the values it rounds. That is the same kind and
// size of perturbation as precision bf16 itself makes, at many more points (every GEMM
// input, output and weight gradient), so the bound is the one those runs keep to
// (tests/worker/train/mixed_precision_test.cc, kLossTol): half of u, 2^-9 of the loss. It is loose
// enough for AdamW, whose update g/sqrt(v) turns a rounding that changes the sign of a
// cancelling sum into a whole update of size lr (measured here: at most 2.2e-4 of the loss,
// dp 4 ZeRO 3; the trajectories part further with more layers and steps: model_parallel_test's
// 4-layer fp32 model reaches 1.8e-3 by its step 13, so the bound is of this run's size, not of
// every run's). AdamW and the clip forgive a gradient off by a constant factor (a missed 1/dp
// moved the losses by only 2.5e-3), so step 1's gradient norm is held too: the parameters are
// still the same there, and each reduced gradient is off by at most about dp u of the mean of
// the ranks' |g| (the ranks' values rounded: u of that mean; then dp - 1 additions, each u of
// a partial sum; gamma_dp = dp u / (1 - dp u) with the higher orders), so the norm by at most
// gamma_dp times the norm of that mean, which is the mean's norm where the ranks' gradients
// agree in sign. kNormTol = 2^-5 (gamma_4 = 2^-6, and
// a factor 2 for the ranks' gradients that cancel) (measured: 3.5e-4; a missed 1/dp: 1,
// i.e. 100%). The runs must not be identical (the bf16 path ran), and every rank holds the
// same parameters bit for bit (Run checks it: an all-reduce that left ranks with different
// bits, or a rank left out of a sum, would show there).
TEST_F(DataParallelTest, Bf16GradientReductionTrainsAsFp32ReductionWithinItsRounding) {
  constexpr double kLossTol = 0x1p-9;  // relative to the loss, see above
  constexpr double kNormTol = 0x1p-5;  // step 1's gradient norm, relative, see above
  bucket_mb_ = "0.004";  // several buckets in flight, short last pieces
  for (int dp : {2, 4}) {
    for (int zero : {0, 1, 2, 3}) {
      SCOPED_TRACE(absl::StrCat("dp ", dp, " zero ", zero));
      train_extra_ = ", precision: bf16";
      const Result fp32 = Run(dp, zero);
      train_extra_ = ", precision: bf16, grad_reduce_dtype: bf16";
      const Result bf16 = Run(dp, zero);
      train_extra_.clear();
      ASSERT_EQ(fp32.losses.size(), 20u);
      ASSERT_EQ(bf16.losses.size(), 20u);
      EXPECT_EQ(bf16.losses[0], fp32.losses[0]) << "step 1's loss comes before any reduction is used";
      ASSERT_FALSE(fp32.reports.empty());
      ASSERT_FALSE(bf16.reports.empty());
      const double norm = fp32.reports[0].grad_norm;
      EXPECT_LE(std::fabs(bf16.reports[0].grad_norm - norm), kNormTol * norm)
          << "step 1's gradient norm: " << bf16.reports[0].grad_norm << " vs " << norm;
      double worst = 0;
      for (size_t i = 0; i < 20; ++i) {
        const double rel = std::fabs(bf16.losses[i] - fp32.losses[i]) / fp32.losses[i];
        worst = std::max(worst, rel);
        EXPECT_LE(rel, kLossTol) << "step " << i + 1 << ": " << bf16.losses[i] << " vs " << fp32.losses[i];
      }
      EXPECT_NE(bf16.losses, fp32.losses) << "the bf16 reduction rounds: some loss must differ";
      EXPECT_NE(bf16.params, fp32.params);
      EXPECT_GT(bf16.bf16_sum_bytes, 0u);
      EXPECT_LT(fp32.losses.back(), 0.8 * fp32.losses.front()) << "it trains";
      if (std::getenv("GANTRY_VERBOSE")) {
        std::printf("dp %d zero %d: largest relative loss difference %.3g, step 1's norm %.3g\n", dp, zero, worst,
                    bf16.reports[0].grad_norm / norm - 1);
      }
    }
  }
}

// The bytes handed to the DP group's sums halve: what the fp32 reduction hands over is twice
// what the bf16 one does, and what is left in fp32 is each step's sum of (norm, loss).
// ZeRO 0 hands every gradient over once a step.
TEST_F(DataParallelTest, Bf16GradientReductionHandsHalfTheBytesToTheCommunicator) {
  steps_ = 3;
  const size_t n = model::GPT(Spec(1).model).num_params();
  for (int zero : {0, 1, 2, 3}) {
    SCOPED_TRACE(absl::StrCat("zero ", zero));
    const Result fp32 = Run(2, zero);
    train_extra_ = ", grad_reduce_dtype: bf16";
    const Result bf16 = Run(2, zero);
    train_extra_.clear();
    EXPECT_EQ(fp32.bf16_sum_bytes, 0u);
    EXPECT_GT(bf16.bf16_sum_bytes, 0u);
    EXPECT_EQ(bf16.f32_sum_bytes, 3 * 2 * sizeof(float)) << "left in fp32: the (norm, loss) sum of each step";
    EXPECT_EQ(fp32.f32_sum_bytes, bf16.f32_sum_bytes + 2 * bf16.bf16_sum_bytes);
    if (zero == 0) {
      EXPECT_EQ(bf16.bf16_sum_bytes, 3 * n * sizeof(uint16_t));
    }
  }
}

// ZeRO 3's bf16 staging is what the planner adds for it (jobspec/planner.cc, WorkingBytes): one
// buffer of each unit size (a layer, the embedding, the head), each its unit padded to dp
// pieces, in 2 bytes. dp 4 with one micro-batch a step, so that the fp32 run's pool holds
// no accumulation pieces (which the bf16 path does not take) to blur the difference.
TEST_F(DataParallelTest, Bf16GradientReductionStagingIsWhatThePlannerCounts) {
  steps_ = 2;
  const Result fp32 = Run(4, 3);
  train_extra_ = ", grad_reduce_dtype: bf16";
  const Result bf16 = Run(4, 3);
  const double planned = jobspec::MakePlan(jobspec::PlanOfSpec(Spec(4, 3)))->working;
  train_extra_.clear();
  const double planned_fp32 = jobspec::MakePlan(jobspec::PlanOfSpec(Spec(4, 3)))->working;
  ASSERT_EQ(bf16.memory.size(), 4u);
  ASSERT_EQ(fp32.memory.size(), 4u);
  EXPECT_GT(planned, planned_fp32);
  for (size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(static_cast<double>(bf16.memory[r].working) - static_cast<double>(fp32.memory[r].working),
              planned - planned_fp32)
        << "rank " << r;
  }
}

// For DP=4, parameter + gradient + optimizer-state bytes per rank are those the ZeRO formula
// gives for the stage, within 5%: 0: 4P, 1: 2P + 2P/4, 2: P + 3P/4, 3: 4P/4 (P = fp32 bytes
// of the parameters).
TEST_F(DataParallelTest, DpFourHoldsWhatTheZeroFormulaPredicts) {
  n_embd_ = 64;
  steps_ = 2;
  bucket_mb_ = "0.05";
  const size_t n = model::GPT(Spec(1).model).num_params();
  const double P = static_cast<double>(n) * 4;
  const double want[] = {4 * P, 2 * P + 2 * P / 4, P + 3 * P / 4, P};
  for (int zero : {0, 1, 2, 3}) {
    const Result r = Run(4, zero);
    ASSERT_EQ(r.memory.size(), 4u) << "zero " << zero;
    for (size_t rank = 0; rank < 4; ++rank) {
      const MemoryAccount& m = r.memory[rank];
      EXPECT_EQ(m.predicted, static_cast<size_t>(want[zero])) << "zero " << zero;
      EXPECT_LE(std::fabs(static_cast<double>(m.model_state()) / want[zero] - 1), 0.05)
          << "zero " << zero << " rank " << rank << ": params " << m.params << " grads " << m.grads << " optimizer "
          << m.optimizer << " vs " << want[zero];
      EXPECT_GE(m.peak, m.model_state() + m.activations) << "zero " << zero;
      // The planner (gantry plan, gantry submit) predicts the same from the spec alone.
      const jobspec::Plan plan = *jobspec::MakePlan(jobspec::PlanOfSpec(Spec(4, zero)));
      EXPECT_LE(std::fabs(plan.model_state() / static_cast<double>(m.model_state()) - 1), 0.10) << "zero " << zero;
      EXPECT_LE(std::fabs(plan.activations / static_cast<double>(m.activations) - 1), 0.10) << "zero " << zero;
    }
  }
}

// fp16 loss scaling at dp 2: a scale of 2^40 overflows every gradient (the logits' gradient
// alone is about 2^40 / 64 per token, beyond fp16's 65504), so each rank's step is skipped on
// both ranks, the scale halves each step, and the parameters stay the initial ones bit for
// bit, under every ZeRO stage (whose pieces are never updated, gathered or not).
TEST_F(DataParallelTest, AnFp16OverflowSkipsTheStepOnEveryRankAndHalvesTheScale) {
  steps_ = 3;
  train_extra_ = ", precision: fp16, loss_scale: 1099511627776";
  std::vector<float> initial;
  {
    TrainOptions o;
    FILE* null = std::fopen("/dev/null", "w");
    o.out = null;
    auto t = Trainer::Create(Spec(1), o);
    ASSERT_TRUE(t.ok()) << t.status();
    initial.assign((*t)->model().params(), (*t)->model().params() + (*t)->model().num_params());
    std::fclose(null);
  }
  for (int zero : {0, 1, 3}) {
    SCOPED_TRACE(absl::StrCat("zero ", zero));
    const Result r = Run(2, zero);
    ASSERT_EQ(r.reports.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(r.reports[i].skipped) << "step " << i + 1;
      EXPECT_EQ(r.reports[i].loss_scale, std::ldexp(1.0, 40 - static_cast<int>(i))) << "step " << i + 1;
      EXPECT_EQ(r.reports[i].skipped_steps, static_cast<int64_t>(i + 1));
      EXPECT_TRUE(std::isfinite(r.reports[i].loss)) << "the loss is the unscaled forward's";
    }
    EXPECT_EQ(r.params, initial) << "skipped steps leave the parameters bit for bit";
  }
}

// The loss scaler's state is in the checkpoint: an fp16 run whose scale backs off from 2^30
// and then grows every 3 clean steps, stopped at step 10 and resumed, gives the uninterrupted
// run's losses, scales and parameters bit for bit (restarting from the spec's 2^30 would skip
// steps again).
TEST_F(DataParallelTest, AnFp16CheckpointKeepsTheLossScale) {
  train_extra_ = ", precision: fp16, loss_scale: 1073741824, loss_scale_window: 3";
  const std::string ckpt = "checkpoint: {every: 10, dir: " + dir_.File("ckpt") + "}\n";
  const Result full = Run(2, 1, ckpt);
  ASSERT_EQ(full.reports.size(), 20u);
  EXPECT_TRUE(full.reports[0].skipped) << "2^30 overflows";
  EXPECT_FALSE(full.reports[19].skipped);
  EXPECT_GT(full.reports[9].skipped_steps, 0);
  std::filesystem::remove_all(dir_.File("ckpt"));
  ASSERT_EQ(Run(2, 1, ckpt, /*stop_after=*/10).losses.size(), 10u);
  const Result resumed = Run(2, 1, ckpt, 0, /*resume=*/true);
  ASSERT_EQ(resumed.reports.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(resumed.losses[i], full.losses[10 + i]) << "step " << 11 + i;
    EXPECT_EQ(resumed.reports[i].loss_scale, full.reports[10 + i].loss_scale) << "step " << 11 + i;
    EXPECT_EQ(resumed.reports[i].skipped_steps, full.reports[10 + i].skipped_steps) << "step " << 11 + i;
  }
  EXPECT_EQ(resumed.params, full.params);
}

// ZeRO-Offload: each rank's master pieces and AdamW state in host memory, AdamW on the host.
// On the cpu backend the host's AdamW is the model backend's own kernel, so the training is
// bit for bit that of the same stage without offload; the optimizer's bytes leave the
// model's memory for the host (as the planner says), and a checkpoint of an offloaded run
// resumes offloaded or not.
TEST_F(DataParallelTest, OptimizerOffloadTrainsBitForBitAndMovesTheStateToTheHost) {
  const std::string offload = "optimizer: {offload: cpu}\n";
  for (int zero : {1, 2, 3}) {
    SCOPED_TRACE(absl::StrCat("zero ", zero));
    const Result plain = Run(2, zero);
    const Result off = Run(2, zero, offload);
    EXPECT_EQ(off.losses, plain.losses);
    EXPECT_EQ(off.params, plain.params);
    ASSERT_EQ(off.memory.size(), 2u);
    for (size_t r = 0; r < 2; ++r) {
      EXPECT_EQ(off.memory[r].optimizer, 0u) << "rank " << r;
      EXPECT_EQ(off.memory[r].params, plain.memory[r].params) << "rank " << r;
      // what the device holds against the planner's figure with offload (ZeRO rounds pieces up)
      EXPECT_LE(std::fabs(static_cast<double>(off.memory[r].model_state()) / off.memory[r].predicted - 1), 0.10)
          << "rank " << r << ": held " << off.memory[r].model_state() << ", planned " << off.memory[r].predicted;
      // master + m + v + the gradient staging of its share: 16 bytes a parameter of 1/dp
      EXPECT_LE(std::fabs(static_cast<double>(off.memory[r].host) / (4.0 * plain.memory[r].optimizer / 2.0) - 1), 0.10)
          << "rank " << r << ": host " << off.memory[r].host << ", the optimizer held " << plain.memory[r].optimizer;
    }
    EXPECT_GT(off.reports[0].offload_bytes, 0u);
  }
  {  // ZeRO 3 with its parameter shard offloaded too: the device keeps no parameters between units
    const Result plain = Run(2, 3);
    parallel_extra_ = ", offload_params: cpu";
    const Result both = Run(2, 3, offload);
    parallel_extra_.clear();
    EXPECT_EQ(both.losses, plain.losses);
    EXPECT_EQ(both.params, plain.params);
    ASSERT_EQ(both.memory.size(), 2u);
    for (size_t r = 0; r < 2; ++r) {
      EXPECT_EQ(both.memory[r].params, 0u) << "rank " << r;
      EXPECT_LE(std::fabs(static_cast<double>(both.memory[r].model_state()) / both.memory[r].predicted - 1), 0.10)
          << "rank " << r;
    }
  }
  const std::string ckpt = "checkpoint: {every: 10, dir: " + dir_.File("ckpt") + "}\n";
  const Result full = Run(2, 2, ckpt + offload);
  std::filesystem::remove_all(dir_.File("ckpt"));
  ASSERT_EQ(Run(2, 2, ckpt + offload, /*stop_after=*/10).losses.size(), 10u);
  const Result resumed = Run(2, 2, ckpt + offload, 0, /*resume=*/true);
  ASSERT_EQ(resumed.losses.size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(resumed.losses[i], full.losses[10 + i]) << "step " << 11 + i;
  EXPECT_EQ(resumed.params, full.params);
  std::filesystem::remove_all(dir_.File("ckpt/step_00000020"));
  const Result plain = Run(2, 2, ckpt, 0, /*resume=*/true);  // the same checkpoint, not offloaded
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(plain.losses[i], full.losses[10 + i]) << "step " << 11 + i;
  // ZeRO 3 with both offloads writes its checkpoint from the host and resumes from it.
  std::filesystem::remove_all(dir_.File("ckpt"));
  parallel_extra_ = ", offload_params: cpu";
  const Result full3 = Run(2, 3, ckpt + offload);
  std::filesystem::remove_all(dir_.File("ckpt"));
  ASSERT_EQ(Run(2, 3, ckpt + offload, /*stop_after=*/10).losses.size(), 10u);
  const Result resumed3 = Run(2, 3, ckpt + offload, 0, /*resume=*/true);
  parallel_extra_.clear();
  ASSERT_EQ(resumed3.losses.size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(resumed3.losses[i], full3.losses[10 + i]) << "ZeRO 3 step " << 11 + i;
  EXPECT_EQ(resumed3.params, full3.params);
}

TEST_F(DataParallelTest, ZeroCheckpointsResumeAtTheSameLayoutAndAsOneProcess) {
  const std::string ckpt = "checkpoint: {every: 10, dir: " + dir_.File("ckpt") + "}\n";
  for (int zero : {1, 2, 3}) {
    SCOPED_TRACE(absl::StrCat("zero ", zero));
    std::filesystem::remove_all(dir_.File("ckpt"));
    const Result full = Run(2, zero, ckpt);
    std::filesystem::remove_all(dir_.File("ckpt"));
    const Result first = Run(2, zero, ckpt, /*stop_after=*/10);
    ASSERT_EQ(first.losses.size(), 10u);
    const Result same = Run(2, zero, ckpt, 0, /*resume=*/true);
    ASSERT_EQ(same.losses.size(), 10u);
    for (size_t i = 0; i < 10; ++i) EXPECT_EQ(same.losses[i], full.losses[10 + i]) << "step " << 11 + i;
    EXPECT_EQ(same.params, full.params);
    // The same checkpoint into one process (ZeRO 0): the gathered optimizer state makes it
    // layout-free; losses agree to fp32 reordering.
    std::filesystem::remove_all(dir_.File("ckpt/step_00000020"));
    const Result one = Run(1, 0, ckpt, 0, /*resume=*/true);
    ASSERT_EQ(one.losses.size(), 10u);
    for (size_t i = 0; i < 10; ++i) {
      EXPECT_LE(std::fabs(one.losses[i] - full.losses[10 + i]) / full.losses[10 + i], 1e-5) << "step " << 11 + i;
    }
  }
}

// Resharding: 20 steps as DP=2 ZeRO-2 with a checkpoint at step 10; resumed at step 10 as
// DP=4 ZeRO-3 and as DP=1 ZeRO-0, steps 11-20 give the uninterrupted run's losses within
// 1e-6. Each rank wrote only its own part, about half of the state.
TEST_F(DataParallelTest, ACheckpointResumesInAnyLayout) {
  const std::string ckpt = "checkpoint: {every: 10, dir: " + dir_.File("ckpt") + "}\n";
  const Result full = Run(2, 2, ckpt);
  std::filesystem::remove_all(dir_.File("ckpt"));
  ASSERT_EQ(Run(2, 2, ckpt, /*stop_after=*/10).losses.size(), 10u);
  const std::string step10 = dir_.File("ckpt/step_00000010");
  const auto p0 = std::filesystem::file_size(step10 + "/part-00000.safetensors");
  const auto p1 = std::filesystem::file_size(step10 + "/part-00001.safetensors");
  const double state = 3.0 * model::GPT(Spec(1).model).num_params() * 4;  // params, m, v
  EXPECT_NEAR(p0 / state, 0.5, 0.1);
  EXPECT_NEAR(p1 / state, 0.5, 0.1);
  for (auto [dp, zero] : {std::pair{4, 3}, std::pair{1, 0}}) {
    SCOPED_TRACE(absl::StrCat("resumed as dp ", dp, " zero ", zero));
    std::filesystem::remove_all(dir_.File("ckpt/step_00000020"));
    const Result resumed = Run(dp, zero, ckpt, 0, /*resume=*/true);
    ASSERT_EQ(resumed.losses.size(), 10u);
    for (size_t i = 0; i < 10; ++i) {
      EXPECT_LE(std::fabs(resumed.losses[i] - full.losses[10 + i]) / full.losses[10 + i], 1e-6) << "step " << 11 + i;
    }
  }
}

// A checkpoint stored over 2 shard servers: each rank's part is cut at the partition map's
// bound and each slice goes to its server, which commits what it holds. The checkpoint is
// listed only once both have committed; then a DP=4 ZeRO-1 run resumes from it in place,
// each rank fetching only the ranges it needs (all parameters, its quarter of m and v), and
// gives the uninterrupted run's losses.
TEST_F(DataParallelTest, ACheckpointOverTwoShardServersResumesReadingOnlyWhatEachRankNeeds) {
  metrics::Registry registry;
  std::vector<std::unique_ptr<shardserver::ShardService>> services;
  std::vector<std::unique_ptr<grpc::Server>> servers;
  std::vector<std::string> addresses;
  for (int i = 0; i < 2; ++i) {
    auto svc = shardserver::ShardService::Open(dir_.File(absl::StrCat("db", i)), &registry);
    ASSERT_TRUE(svc.ok()) << svc.status();
    services.push_back(std::move(*svc));
    addresses.push_back(Serve(services.back().get(), servers));
    ASSERT_FALSE(addresses.back().empty());
  }
  model::GPT m(Spec(1).model);
  const auto ranges = jobspec::PartitionParams(m.num_params(), addresses, 256);
  ASSERT_EQ(ranges.size(), 2u);
  cuts_ = {ranges[1].begin};
  const std::string ckpt = "checkpoint: {every: 10, dir: " + dir_.File("ckpt") + "}\n";
  const Result full = Run(2, 2, ckpt);
  std::filesystem::remove_all(dir_.File("ckpt"));
  ASSERT_EQ(Run(2, 2, ckpt, /*stop_after=*/10).losses.size(), 10u);
  const std::string step10 = dir_.File("ckpt/step_00000010");
  std::map<std::string, std::vector<std::string>> by_server;
  for (const auto& f : checkpoint::CheckpointFiles(2, cuts_)) {
    ASSERT_TRUE(std::filesystem::exists(step10 + "/" + f)) << f;
    by_server[ranges[std::max(checkpoint::CheckpointFileSlice(f), 0)].shard_server].push_back(f);
  }
  ASSERT_EQ(by_server.size(), 2u);
  const std::string manifest = *ReadFileToString(step10 + "/manifest.json");
  std::vector<int64_t> held;
  for (const auto& [server, files] : by_server) {
    auto n = shardserver::UploadFiles(server, "j-spread", 10, step10, files);
    ASSERT_TRUE(n.ok()) << n.status();
    held.push_back(*n);
  }
  const double state = 3.0 * m.num_params() * 4;
  for (int64_t h : held) EXPECT_NEAR(h / state, 0.5, 0.15) << "each server holds its half of the state";
  // Committed on one server only: not a checkpoint yet.
  ASSERT_TRUE(shardserver::CommitCheckpoint(addresses[0], "j-spread", 10, by_server[addresses[0]], manifest).ok());
  EXPECT_TRUE(shardserver::ListStoredCheckpoints(addresses, "j-spread").empty());
  ASSERT_TRUE(shardserver::CommitCheckpoint(addresses[1], "j-spread", 10, by_server[addresses[1]], manifest).ok());
  const auto stored = shardserver::ListStoredCheckpoints(addresses, "j-spread");
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].servers.size(), 2u);
  EXPECT_EQ(stored[0].files.size(), 2u + 4u);
  EXPECT_EQ(stored[0].bytes, held[0] + held[1]);

  std::filesystem::remove_all(dir_.File("ckpt"));  // only the shard servers have it now
  source_factory_ = [&] { return std::make_unique<checkpoint::ShardCheckpointSource>(stored[0]); };
  std::map<int, int64_t> read;
  std::mutex mu;
  source_read_ = [&](int rank, checkpoint::CheckpointSource* s) {
    std::lock_guard<std::mutex> l(mu);
    read[rank] = static_cast<checkpoint::ShardCheckpointSource*>(s)->bytes_read();
  };
  // DP=1 reads everything: the state, and the headers, manifest and config. A DP=4 ZeRO-1
  // rank reads the same less three quarters of m and v: half the state.
  int64_t whole = 0;
  for (auto [dp, zero] : {std::pair{1, 0}, std::pair{4, 1}}) {
    SCOPED_TRACE(absl::StrCat("resumed as dp ", dp, " zero ", zero));
    read.clear();
    const Result resumed = Run(dp, zero, ckpt);
    ASSERT_EQ(resumed.losses.size(), 10u);
    for (size_t i = 0; i < 10; ++i) {
      EXPECT_LE(std::fabs(resumed.losses[i] - full.losses[10 + i]) / full.losses[10 + i], 1e-6) << "step " << 11 + i;
    }
    ASSERT_EQ(read.size(), static_cast<size_t>(dp));
    if (dp == 1) {
      whole = read[0];
      EXPECT_GE(whole, static_cast<int64_t>(state));
      continue;
    }
    for (const auto& [rank, bytes] : read) EXPECT_NEAR((whole - bytes) / state, 0.5, 0.01) << "rank " << rank;
  }
  source_factory_ = nullptr;
  source_read_ = nullptr;
  cuts_.clear();
  for (auto& s : servers) s->Shutdown();
}

// Parameter-server mode with 2 shard servers (in this process, over loopback gRPC): AdamW
// runs on the servers, each over its range; 20 steps at DP=2 give worker placement's losses
// within 1e-5, and the workers hold no optimizer state. Its checkpoints resume exactly, and
// in worker placement.
TEST_F(DataParallelTest, ParameterServerModeGivesWorkerPlacementLosses) {
  const Result worker = Run(2, 0);
  metrics::Registry registry;
  std::vector<std::unique_ptr<shardserver::ParamService>> services;
  std::vector<std::unique_ptr<grpc::Server>> servers;
  std::vector<std::string> addresses;
  for (int i = 0; i < 2; ++i) {
    services.push_back(std::make_unique<shardserver::ParamService>(&registry));
    addresses.push_back(Serve(services.back().get(), servers));
    ASSERT_FALSE(addresses.back().empty());
  }
  const jobspec::JobSpec spec = Spec(2);
  model::GPT m(spec.model);
  // Aligned to 256 elements so that this small model spreads over both servers.
  const auto ranges = jobspec::PartitionParams(m.num_params(), addresses, 256);
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_GT(ranges[0].end - ranges[0].begin, 0u);
  EXPECT_GT(ranges[1].end - ranges[1].begin, 0u);
  EXPECT_EQ(ranges[1].end, m.num_params());
  std::vector<jobspec::ParamRangeOf> use = ranges;  // first through gRPC, then the data ports
  remote_factory_ = [&] {
    return std::make_unique<agent::ParamServerClient>(
        "j-ps", 1, use, m.tensors(), m.num_params(),
        kernels::AdamWConfig{spec.train.beta1, spec.train.beta2, spec.train.eps, spec.train.weight_decay});
  };
  const std::string ps_spec = "optimizer: {placement: shardserver}\n";
  ExpectSameTraining(Run(2, 0, ps_spec), worker, "parameter-server mode over gRPC, 2 shard servers");
  for (size_t i = 0; i < 2; ++i) {
    auto data = services[i]->StartDataPort("127.0.0.1");
    ASSERT_TRUE(data.ok()) << data.status();
    use[i].data_address = *data;
  }
  const Result ps = Run(2, 0, ps_spec);
  ExpectSameTraining(ps, worker, "parameter-server mode over the data ports, 2 shard servers");
  for (int zero : {1, 2}) {  // the gradients reduce-scattered: each rank pushes the pieces it reduced
    const Result z = Run(2, zero, ps_spec);
    ExpectSameTraining(z, worker, absl::StrCat("parameter-server mode with ZeRO ", zero));
    ASSERT_EQ(z.memory.size(), 2u);
    EXPECT_EQ(z.memory[0].optimizer, 0u);
    EXPECT_LE(std::fabs(static_cast<double>(z.memory[0].model_state()) / z.memory[0].predicted - 1), 0.05) << "zero " << zero;
  }
  ASSERT_EQ(ps.memory.size(), 2u);
  EXPECT_EQ(ps.memory[0].optimizer, 0u) << "the optimizer state is on the shard servers";
  // Checkpoints carry the servers' AdamW state: a run stopped at step 10 resumes exactly in
  // parameter-server mode, and into worker placement (one process) within 1e-6.
  const std::string ckpt = ps_spec + "checkpoint: {every: 10, dir: " + dir_.File("psckpt") + "}\n";
  const Result full = Run(2, 0, ckpt);
  std::filesystem::remove_all(dir_.File("psckpt"));
  ASSERT_EQ(Run(2, 0, ckpt, /*stop_after=*/10).losses.size(), 10u);
  const Result again = Run(2, 0, ckpt, 0, /*resume=*/true);
  ASSERT_EQ(again.losses.size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(again.losses[i], full.losses[10 + i]) << "step " << 11 + i;
  // staleness 1: the parameters are pulled every other step, so step 2 runs on step 0's
  // parameters (another trajectory than the synchronous one), half the reads go out, and
  // training still goes down.
  auto reads = [&] {
    const std::string text = registry.Render();
    const std::string key = "gantry_shardserver_rpcs_total{code=\"OK\",method=\"DataRead\"} ";
    const size_t at = text.find(key);
    return at == std::string::npos ? 0.0 : std::atof(text.c_str() + at + key.size());
  };
  const double r0 = reads();
  const Result sync = Run(2, 0, ps_spec);
  const double r1 = reads();
  const Result stale = Run(2, 0, "optimizer: {placement: shardserver, staleness: 1}\n");
  const double r2 = reads();
  EXPECT_EQ(stale.losses[0], sync.losses[0]);
  EXPECT_NE(stale.losses[1], sync.losses[1]) << "step 2 ran on stale parameters";
  EXPECT_EQ(r1 - r0, 20 * 2 * 2) << "synchronous: a read per step, rank and shard server";
  EXPECT_EQ(r2 - r1, (r1 - r0) / 2) << "pulls every other step";
  EXPECT_LT(stale.losses.back(), 0.8 * stale.losses.front());
  remote_factory_ = nullptr;
  std::filesystem::remove_all(dir_.File("psckpt/step_00000020"));
  const Result one = Run(1, 0, "checkpoint: {every: 10, dir: " + dir_.File("psckpt") + "}\n", 0, /*resume=*/true);
  ASSERT_EQ(one.losses.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_LE(std::fabs(one.losses[i] - full.losses[10 + i]) / full.losses[10 + i], 1e-6) << "step " << 11 + i;
  }
  for (auto& s : servers) s->Shutdown();
}

TEST(DataParallelSpecTest, GlobalBatchMustDivideByMicroBatchTimesDp) {
  auto s = jobspec::ParseJobSpec("model: {n_layer: 1, n_head: 1, n_embd: 8, vocab_size: 31, seq_len: 8}\n"
                        "data: {train: x.bin}\ntrain: {steps: 1, micro_batch: 4, global_batch: 12, lr: 1.0e-3}\n"
                        "parallel: {dp: 2}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("12 is not a multiple of micro_batch 4 x dp 2 = 8"), absl::string_view::npos)
      << s.status();
}

}  // namespace
}  // namespace gantry::train
