// Data parallelism with ZeRO stages 0-3 gives one process's training: DP ranks as threads
// of this process, joined by the Gloo communicator over loopback TCP, against gantry-train's
// loop in one process with the same global batch and seed. (tests/integration/cluster_test.sh
// runs the same matrix with worker processes.)
#include <gloo/rendezvous/hash_store.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

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
#include "worker/agent/shard_client.h"
#include "worker/data/token_file.h"
#include "worker/parallel/gloo_communicator.h"
#include "absl/strings/str_cat.h"
#include "spec/planner.h"
#include "worker/train/trainer.h"

namespace gantry::train {
namespace {

class DataParallelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::vector<uint16_t> toks = testing::PatternedTokens(40000, 9);
    ASSERT_TRUE(data::WriteTokenFile(dir_.File("train.bin"), toks).ok());
  }
  JobSpec Spec(int dp, int zero = 0, const std::string& extra = "") {
    auto s = ParseJobSpec("model: {n_layer: 2, n_head: 2, n_embd: " + std::to_string(n_embd_) + ", vocab_size: 31, seq_len: 16}\n"
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
  };
  Result Run(int dp, int zero = 0, const std::string& extra = "", int64_t stop_after = 0, bool resume = false) {
    std::vector<Result> results(static_cast<size_t>(dp));
    std::vector<absl::Status> status(static_cast<size_t>(dp));
    auto store = std::make_shared<gloo::rendezvous::HashStore>();
    std::vector<std::thread> threads;
    for (int r = 0; r < dp; ++r) {
      threads.emplace_back([&, r] {
        kernels::ConfigureThreads(1);
        std::unique_ptr<parallel::GlooCommunicator> comm;
        TrainOptions o;
        o.stop_after = stop_after;
        o.resume = resume;
        o.checkpoint_cuts = cuts_;
        std::unique_ptr<CheckpointSource> source;
        if (source_factory_) {
          source = source_factory_();
          o.resume_source = source.get();
        }
        FILE* null = std::fopen("/dev/null", "w");
        o.out = null;
        std::unique_ptr<RemoteOptimizer> remote;
        if (remote_factory_) {
          remote = remote_factory_();
          o.remote_optimizer = remote.get();
        }
        if (dp > 1) {
          auto c = parallel::GlooCommunicator::Create(r, dp, store, {});
          if (!c.ok()) {
            status[r] = c.status();
            return;
          }
          comm = std::move(*c);
          o.comm = comm.get();
        }
        auto t = Trainer::Create(Spec(dp, zero, extra), o);
        status[r] = t.ok() ? (*t)->Run() : t.status();
        if (t.ok()) {
          for (const auto& rep : (*t)->reports()) results[r].losses.push_back(rep.loss);
          results[r].reports = (*t)->reports();
          results[r].params.assign((*t)->model().params(), (*t)->model().params() + (*t)->model().num_params());
          results[r].memory.push_back((*t)->memory());
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
  std::function<std::unique_ptr<CheckpointSource>()> source_factory_;  // resume from it, per rank
  std::function<void(int rank, CheckpointSource*)> source_read_;       // after the rank's run
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
      for (const auto& t : model::ParameterLayout(Spec(1).model)) {
        double m = 0;
        for (size_t i = t.offset; i < t.offset + t.numel; ++i) m = std::max(m, double(std::fabs(many.params[i] - one.params[i])));
        std::printf("dp %d %-26s max abs diff %.3g\n", dp, t.name.c_str(), m);
      }
    }
  }
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
      const Plan plan = *MakePlan(PlanOfSpec(Spec(4, zero)));
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
  const auto ranges = agent::PartitionParams(m.num_params(), addresses, 256);
  ASSERT_EQ(ranges.size(), 2u);
  cuts_ = {ranges[1].begin};
  const std::string ckpt = "checkpoint: {every: 10, dir: " + dir_.File("ckpt") + "}\n";
  const Result full = Run(2, 2, ckpt);
  std::filesystem::remove_all(dir_.File("ckpt"));
  ASSERT_EQ(Run(2, 2, ckpt, /*stop_after=*/10).losses.size(), 10u);
  const std::string step10 = dir_.File("ckpt/step_00000010");
  std::map<std::string, std::vector<std::string>> by_server;
  for (const auto& f : CheckpointFiles(2, cuts_)) {
    ASSERT_TRUE(std::filesystem::exists(step10 + "/" + f)) << f;
    by_server[ranges[std::max(CheckpointFileSlice(f), 0)].shard_server].push_back(f);
  }
  ASSERT_EQ(by_server.size(), 2u);
  const std::string manifest = *ReadFileToString(step10 + "/manifest.json");
  std::vector<int64_t> held;
  for (const auto& [server, files] : by_server) {
    auto n = agent::UploadFiles(server, "j-spread", 10, step10, files);
    ASSERT_TRUE(n.ok()) << n.status();
    held.push_back(*n);
  }
  const double state = 3.0 * m.num_params() * 4;
  for (int64_t h : held) EXPECT_NEAR(h / state, 0.5, 0.15) << "each server holds its half of the state";
  // Committed on one server only: not a checkpoint yet.
  ASSERT_TRUE(agent::CommitCheckpoint(addresses[0], "j-spread", 10, by_server[addresses[0]], manifest).ok());
  EXPECT_TRUE(agent::ListStoredCheckpoints(addresses, "j-spread").empty());
  ASSERT_TRUE(agent::CommitCheckpoint(addresses[1], "j-spread", 10, by_server[addresses[1]], manifest).ok());
  const auto stored = agent::ListStoredCheckpoints(addresses, "j-spread");
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].servers.size(), 2u);
  EXPECT_EQ(stored[0].files.size(), 2u + 4u);
  EXPECT_EQ(stored[0].bytes, held[0] + held[1]);

  std::filesystem::remove_all(dir_.File("ckpt"));  // only the shard servers have it now
  source_factory_ = [&] { return std::make_unique<agent::ShardCheckpointSource>(stored[0]); };
  std::map<int, int64_t> read;
  std::mutex mu;
  source_read_ = [&](int rank, CheckpointSource* s) {
    std::lock_guard<std::mutex> l(mu);
    read[rank] = static_cast<agent::ShardCheckpointSource*>(s)->bytes_read();
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
  const JobSpec spec = Spec(2);
  model::GPT m(spec.model);
  // Aligned to 256 elements so that this small model spreads over both servers.
  const auto ranges = agent::PartitionParams(m.num_params(), addresses, 256);
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_GT(ranges[0].end - ranges[0].begin, 0u);
  EXPECT_GT(ranges[1].end - ranges[1].begin, 0u);
  EXPECT_EQ(ranges[1].end, m.num_params());
  std::vector<agent::ParamRangeOf> use = ranges;  // first through gRPC, then the data ports
  remote_factory_ = [&] {
    return std::make_unique<agent::ParamServerClient>(
        "j-ps", 1, use, m.tensors(), m.num_params(),
        AdamWConfig{spec.train.beta1, spec.train.beta2, spec.train.eps, spec.train.weight_decay});
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
  auto s = ParseJobSpec("model: {n_layer: 1, n_head: 1, n_embd: 8, vocab_size: 31, seq_len: 8}\n"
                        "data: {train: x.bin}\ntrain: {steps: 1, micro_batch: 4, global_batch: 12, lr: 1.0e-3}\n"
                        "parallel: {dp: 2}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("12 is not a multiple of micro_batch 4 x dp 2 = 8"), absl::string_view::npos)
      << s.status();
}

}  // namespace
}  // namespace gantry::train
