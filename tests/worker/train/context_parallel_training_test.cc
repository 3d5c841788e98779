// Context parallelism wired into training (parallel.cp): the rank layout and groups, and a few
// steps at cp 2 (and cp 2 x dp 2) against one process, every rank a thread of this process
// with Gloo communicators over loopback. (tests/model/context_parallel_test.cc checks the ring
// attention itself against the unsplit attention.)
#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/comm_thread.h"
#include "comm/gloo/gloo_communicator.h"
#include "checkpoint/checkpoint.h"
#include "comm/groups.h"
#include "data/token_file.h"
#include "jobspec/model_layout.h"
#include "jobspec/planner.h"
#include "jobspec/ranks.h"
#include "kernels/emulated/cudnn_frontend.h"
#include "kernels/threads.h"
#include "tests/test_util.h"
#include "worker/train/trainer.h"

namespace gantry::train {
namespace {

// Megatron-Core's order: tp innermost, then cp, then dp, pp outermost. With dp 2, cp 2, tp 2,
// pp 2 (16 ranks) every rank's cp group is its (stage, replica, tp rank)'s cp ranks in cp
// order, its dp_cp group the dp x cp ranks of its (stage, tp rank), and the groups inside a
// replica (tp, pp, mp) stay within one cp rank.
TEST(CpGroupsTest, RanksPutCpBetweenTpAndDpAndTheGroupsFollow) {
  const jobspec::Layout l{2, 2, 2, 1, 2};
  ASSERT_EQ(l.world(), 16);
  for (int r = 0; r < l.world(); ++r) {
    const jobspec::Coords c = jobspec::CoordsOf(r, l);
    EXPECT_EQ(jobspec::RankOf(c, l), r);
    EXPECT_EQ(r, ((c.stage * 2 + c.replica) * 2 + c.cp_rank) * 2 + c.tp_rank);
    std::map<std::string, std::vector<int>> made;
    auto g = comm::MakeGroups(r, l, [&](const std::string& name, const std::vector<int>& members, int index)
                                          -> absl::StatusOr<std::unique_ptr<comm::Communicator>> {
      EXPECT_EQ(members[static_cast<size_t>(index)], r) << name;
      EXPECT_EQ(made.count(name.substr(0, name.find('/'))), 0u) << name;
      made[name.substr(0, name.find('/'))] = members;
      return std::make_unique<comm::SoloCommunicator>();
    });
    ASSERT_TRUE(g.ok()) << g.status();
    auto at = [&](int replica, int tp_rank, int stage, int cp_rank) {
      return jobspec::RankOf({replica, tp_rank, stage, cp_rank}, l);
    };
    EXPECT_EQ(made["cp"], (std::vector<int>{at(c.replica, c.tp_rank, c.stage, 0), at(c.replica, c.tp_rank, c.stage, 1)}))
        << "rank " << r;
    EXPECT_EQ(made["dpcp"], (std::vector<int>{at(0, c.tp_rank, c.stage, 0), at(0, c.tp_rank, c.stage, 1),
                                              at(1, c.tp_rank, c.stage, 0), at(1, c.tp_rank, c.stage, 1)}))
        << "rank " << r;
    EXPECT_EQ(made["dp"], (std::vector<int>{at(0, c.tp_rank, c.stage, c.cp_rank), at(1, c.tp_rank, c.stage, c.cp_rank)}));
    EXPECT_EQ(made["tp"], (std::vector<int>{at(c.replica, 0, c.stage, c.cp_rank), at(c.replica, 1, c.stage, c.cp_rank)}));
    EXPECT_EQ(made["pp"], (std::vector<int>{at(c.replica, c.tp_rank, 0, c.cp_rank), at(c.replica, c.tp_rank, 1, c.cp_rank)}));
    EXPECT_EQ(made["mp"].size(), 4u);
    for (int m : made["mp"]) EXPECT_EQ(jobspec::CoordsOf(m, l).cp_rank, c.cp_rank);
    EXPECT_EQ((*g)->cp->size(), 1) << "(the fake factory's communicators are groups of one)";
    EXPECT_EQ((*g)->grads(), (*g)->dp_cp);
  }
  // Expert parallelism with cp (dp 4, ep 2, cp 2): the ep group's replicas within one cp rank
  // (the all-to-all moves a cp rank's rows); edp, which reduces the experts' gradients, every
  // cp rank of the replicas that hold this rank's experts.
  const jobspec::Layout moe{4, 1, 1, 2, 2};
  for (int r = 0; r < moe.world(); ++r) {
    const jobspec::Coords c = jobspec::CoordsOf(r, moe);
    std::map<std::string, std::vector<int>> made;
    auto g = comm::MakeGroups(r, moe, [&](const std::string& name, const std::vector<int>& members, int)
                                            -> absl::StatusOr<std::unique_ptr<comm::Communicator>> {
      made[name.substr(0, name.find('/'))] = members;
      return std::make_unique<comm::SoloCommunicator>();
    });
    ASSERT_TRUE(g.ok()) << g.status();
    auto at = [&](int replica, int cp_rank) { return jobspec::RankOf({replica, 0, 0, cp_rank}, moe); };
    const int group = c.replica / 2, e = c.replica % 2;
    EXPECT_EQ(made["ep"], (std::vector<int>{at(group * 2, c.cp_rank), at(group * 2 + 1, c.cp_rank)})) << "rank " << r;
    EXPECT_EQ(made["edp"], (std::vector<int>{at(e, 0), at(e, 1), at(2 + e, 0), at(2 + e, 1)})) << "rank " << r;
  }
  // cp 1: no cp or dp_cp group, and the ranks as they always were.
  const jobspec::Layout flat{2, 2, 2};
  for (int r = 0; r < flat.world(); ++r) {
    const jobspec::Coords c = jobspec::CoordsOf(r, flat);
    EXPECT_EQ(r, (c.stage * 2 + c.replica) * 2 + c.tp_rank);
    EXPECT_EQ(c.cp_rank, 0);
  }
  std::vector<std::string> names;
  auto g = comm::MakeGroups(5, flat, [&](const std::string& name, const std::vector<int>&, int)
                                         -> absl::StatusOr<std::unique_ptr<comm::Communicator>> {
    names.push_back(name);
    return std::make_unique<comm::SoloCommunicator>();
  });
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->cp, nullptr);
  EXPECT_EQ((*g)->dp_cp, nullptr);
  EXPECT_EQ((*g)->grads(), (*g)->dp);
  EXPECT_EQ(names, (std::vector<std::string>{"world", "dp/s1/t1", "tp/s1/r0", "pp/r0/t1", "emb/r0/t1", "mp/r0"}))
      << "cp 1 keeps its groups' names";
  EXPECT_FALSE(comm::MakeGroups(0, {1, 1, 1, 1, 0}, nullptr).ok()) << "cp 0";
}

class CpTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(data::WriteTokenFile(dir_.File("train.bin"), testing::PatternedTokens(20000, 9)).ok());
  }
  jobspec::JobSpec Spec(int dp, int cp, int zero) {
    auto s = jobspec::ParseJobSpec(absl::StrCat(
        "model: {", model_, "}\n"
        "data: {train: ", dir_.File("train.bin"), ", val: ", dir_.File("train.bin"), ", shuffle: true}\n"
        "train: {steps: ", steps_, ", micro_batch: 2, global_batch: 4, lr: 1.0e-2, warmup: 2, min_lr_ratio: 0.1, "
        "weight_decay: 0.1, grad_clip: 1.0, seed: 3, recompute: ", recompute_, ", precision: ", precision_, "}\n"
        "eval: {batches: 2}\n"
        "checkpoint: {dir: ", dir_.File(ckpt_), ", every: ", every_, "}\n"
        "resources: {device: ", device_, "}\n", optimizer_,
        "parallel: {dp: ", dp, ", cp: ", cp, ", tp: ", tp_, ", pp: ", pp_, ", ep: ", ep_,
        ", sequence_parallel: ", sp_ ? "true" : "false",
        ", zero_stage: ", zero, parallel_extra_, "}\n"));
    EXPECT_TRUE(s.ok()) << s.status();
    model_config_ = s->model;
    return *s;
  }
  struct Result {
    std::vector<float> losses;  // rank 0's
    std::vector<float> params;  // rank 0's, whole (gathered at the end under ZeRO 3)
    float val_loss = NAN;       // rank 0's, at the end
    size_t activations = 0;     // rank 0's activation buffer, bytes
    // the ring's blocks, summed over the ranks (model::RingAttention::blocks)
    model::RingAttention::Blocks blocks;
    int64_t moe_assignments = 0, moe_dropped = 0;  // rank 0's reports', summed over the steps
  };
  Result Run(int dp, int cp, int zero = 0, int64_t stop_after = 0, bool resume = false) {
    const jobspec::Layout l{dp, tp_, pp_, ep_, cp};
    const int world = l.world();
    std::vector<Result> results(static_cast<size_t>(world));
    std::vector<absl::Status> status(static_cast<size_t>(world));
    std::vector<size_t> ring(static_cast<size_t>(world));  // each rank's Trainer::memory().ring
    auto store = std::make_shared<gloo::rendezvous::HashStore>();
    const jobspec::JobSpec spec = Spec(dp, cp, zero);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        kernels::ConfigureThreads(1);
        TrainOptions o;
        o.resume = resume;
        o.stop_after = stop_after;
        o.device = device_;
        FILE* null = std::fopen("/dev/null", "w");
        o.out = null;
        auto groups = comm::MakeGroups(r, l, comm::GlooGroups(store, {}));
        if (!groups.ok()) {
          status[r] = groups.status();
          std::fclose(null);
          return;
        }
        o.groups = groups->get();
        auto t = Trainer::Create(spec, o);
        status[r] = t.ok() ? (*t)->Run() : t.status();
        if (t.ok()) {
          for (const auto& rep : (*t)->reports()) {
            results[r].losses.push_back(rep.loss);
            results[r].moe_assignments += rep.moe_assignments;
            results[r].moe_dropped += rep.moe_dropped;
          }
          results[r].params.resize((*t)->model().num_params());
          (*t)->model().ReadParams(results[r].params.data());
          if (!(*t)->val_losses().empty()) results[r].val_loss = (*t)->val_losses().back().second;
          results[r].activations = (*t)->memory().activations;
          results[r].blocks = (*t)->model().context_parallel_blocks();
          ring[r] = (*t)->memory().ring;
        }
        std::fclose(null);
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    // The ring's working memory, as allocated, is the planner's (Plan::ring), to the byte.
    auto planned = jobspec::PlanRanks(jobspec::PlanOfSpec(spec));
    EXPECT_TRUE(planned.ok()) << planned.status();
    for (int r = 0; r < world && planned.ok(); ++r) {
      const jobspec::Coords c = jobspec::CoordsOf(r, l);
      EXPECT_EQ(static_cast<double>(ring[r]), (*planned)[static_cast<size_t>(c.stage * tp_ + c.tp_rank)].bytes.ring)
          << "rank " << r;
    }
    if (cp > 1) {
      EXPECT_GT(ring[0], 0u);
    }
    for (int r = 1; r < world; ++r) {
      EXPECT_EQ(results[r].losses, results[0].losses) << "every rank reports the same loss: rank " << r;
      const jobspec::Coords c = jobspec::CoordsOf(r, l);
      if (c.tp_rank == 0 && c.stage == 0 && jobspec::EpRankOf(c, l) == 0) {  // (ep: rank 0's experts)
        EXPECT_EQ(results[r].params, results[0].params) << "every rank holds the same parameters: rank " << r;
      }
    }
    for (int r = 1; r < world; ++r) {
      results[0].blocks.forward += results[r].blocks.forward;
      results[0].blocks.backward += results[r].blocks.backward;
    }
    return results[0];
  }
  // A layout's training against one process's: the same tolerance as every layout's
  // (data_parallel_test, model_parallel_test), 1e-5 relative on each step's loss and on the
  // parameters (the largest difference over the largest parameter). What cp reorders, in fp32
  // (unit roundoff u = 2^-24 = 6e-8): the softmax's sums over a row's keys, cut into per-chunk
  // partial sums merged by log-sum-exps (a relative error of a few u per merge, cp merges a
  // row), the weight gradients' sums over the B·T rows, now two partial sums of B·T/cp added by
  // the all-reduce, and dK/dV's sums over the query rows, added rank by rank round the ring.
  // Each is a sum of fewer than B·T = 64 terms: at most 64·u = 4e-6 relative to the sum of the
  // magnitudes per op, and the losses here differ by 1e-7 to 1e-6 (measured: see the test's
  // output); AdamW's division by sqrt(v) keeps the updates' relative error that of the
  // gradients except where g is near 0, which 1e-5 of the largest parameter leaves room for
  // over these few steps, as for dp.
  void ExpectSameTraining(const Result& many, const Result& one, const std::string& what) {
    ASSERT_EQ(many.losses.size(), one.losses.size()) << what;
    double worst = 0;
    for (size_t i = 0; i < one.losses.size(); ++i) {
      const double rel = std::fabs(many.losses[i] - one.losses[i]) / one.losses[i];
      worst = std::max(worst, rel);
      EXPECT_LE(rel, 1e-5) << what << " step " << i + 1 << ": " << many.losses[i] << " vs " << one.losses[i];
    }
    const double params = testing::RelErr(many.params, one.params);
    std::printf("%s: losses within %.2g, parameters within %.2g (bound 1e-5)\n", what.c_str(), worst, params);
    EXPECT_LE(params, 1e-5) << what;
    if (std::getenv("GANTRY_VERBOSE")) {  // where the parameters differ most, tensor by tensor
      double largest = 0;
      for (float x : one.params) largest = std::max(largest, double(std::fabs(x)));
      for (const auto& t : jobspec::ParameterLayout(model_config_)) {
        double m = 0;
        for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
          m = std::max(m, double(std::fabs(many.params[i] - one.params[i])));
        }
        std::printf("  %-40s max diff %.3g (%.3g of the largest parameter)\n", t.name.c_str(), m, m / largest);
      }
    }
    EXPECT_LE(std::fabs(many.val_loss - one.val_loss) / one.val_loss, 1e-5)
        << what << ": validation loss " << many.val_loss << " vs " << one.val_loss;
  }
  testing::TempDir dir_;
  // T 16: cp 2 cuts each sequence into 4 chunks of 4 rows.
  std::string model_ = "n_layer: 2, n_head: 4, n_embd: 32, vocab_size: 31, seq_len: 16";
  std::string recompute_ = "none";
  std::string precision_ = "fp32";
  std::string optimizer_;       // an optimizer section, as "optimizer: {...}\n"
  std::string parallel_extra_;  // more of the parallel section, as ", key: value"
  jobspec::GPTConfig model_config_;  // the last Spec's
  std::string ckpt_ = "ckpt";
  int every_ = 0;
  int steps_ = 6;
  std::string device_ = "cpu";  // resources.device and TrainOptions.device of every rank
  int tp_ = 1;       // parallel.tp (then Result.params is tp rank 0's shard)
  int pp_ = 1;       // parallel.pp (then Result.params is the first stage's)
  int ep_ = 1;       // parallel.ep (then Result.params is ep rank 0's shard)
  bool sp_ = false;  // parallel.sequence_parallel
};

// GPT-2 (learned position embeddings, read at the chunks' global positions): cp 2, cp 2 x
// dp 2 and cp 2 with selective recomputation train as one process does.
TEST_F(CpTrainingTest, Gpt2AtCpTwoAndCpTwoByDpTwoTrainsAsOneProcess) {
  const Result one = Run(1, 1);
  ASSERT_EQ(one.losses.size(), 6u);
  ASSERT_LT(one.losses.back(), one.losses.front()) << "the run learns";
  const Result cp2 = Run(1, 2);
  ExpectSameTraining(cp2, one, "gpt2 cp 2");
  // A rank's activations: every row-local tensor halves, and the attention keeps B·NH·T/cp
  // log-sum-exps where the cpu's unsplit attention keeps B·NH·T² probabilities (and their
  // gradient's room): less than half.
  std::printf("activations per rank: cp 1 %zu bytes, cp 2 %zu\n", one.activations, cp2.activations);
  EXPECT_GT(cp2.activations, 0u);
  EXPECT_LT(cp2.activations, one.activations / 2);
  ExpectSameTraining(Run(2, 2, 1), one, "gpt2 cp 2 x dp 2, ZeRO 1");
  recompute_ = "selective";  // the ring's forward again in the backward, for the log-sum-exps
  ExpectSameTraining(Run(1, 2), one, "gpt2 cp 2, selective recomputation");
}

// Tensor parallelism (heads split; the ring carries a tp rank's heads) and sequence
// parallelism (a cp rank's rows split again over tp in the norms) with cp: the losses as one
// process's at tp 2, and the shards' parameters as tp 2's alone.
TEST_F(CpTrainingTest, TensorAndSequenceParallelismWithCpTwoTrainAsWithout) {
  model_ = "arch: llama, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 32, vocab_size: 31, seq_len: 16, ffn_hidden: 48";
  steps_ = 4;  // (six runs, of up to four ranks)
  const Result one = Run(1, 1);
  tp_ = 2;
  const Result tp2 = Run(1, 1);
  const Result both = Run(1, 2);
  ExpectSameTraining(both, tp2, "llama cp 2 x tp 2 against tp 2");
  for (size_t i = 0; i < one.losses.size(); ++i) {
    EXPECT_LE(std::fabs(both.losses[i] - one.losses[i]) / one.losses[i], 1e-5) << "step " << i + 1;
  }
  sp_ = true;
  ExpectSameTraining(Run(1, 2), tp2, "llama cp 2 x tp 2, sequence parallel, against tp 2");
  // GPT-2: the position embeddings on tp rank 0 (the vocabulary-parallel embedding's sum).
  model_ = "n_layer: 2, n_head: 4, n_embd: 32, vocab_size: 31, seq_len: 16";
  sp_ = false;
  ExpectSameTraining(Run(1, 2), Run(1, 1), "gpt2 cp 2 x tp 2 against tp 2");
}

// Pipeline parallelism with cp, 1F1B and interleaved: each stage's ring over its own cp group,
// the stages' transfers T/cp rows of the residual stream, the loss the last stage's mean over
// the cp ranks.
TEST_F(CpTrainingTest, PipelineParallelismWithCpTwoTrainsAsWithout) {
  const Result one = Run(1, 1);
  pp_ = 2;
  const Result pp2 = Run(1, 1);
  ExpectSameTraining(Run(1, 2), pp2, "gpt2 cp 2 x pp 2 against pp 2");
  for (size_t i = 0; i < one.losses.size(); ++i) {
    EXPECT_LE(std::fabs(pp2.losses[i] - one.losses[i]) / one.losses[i], 1e-5) << "step " << i + 1;
  }
  // The interleaved schedule: two chunks of a layer each a stage, round the ring of stages.
  model_ = "n_layer: 4, n_head: 4, n_embd: 32, vocab_size: 31, seq_len: 16";
  parallel_extra_ = ", virtual_stages: 2";
  const Result vp2 = Run(1, 1);
  ExpectSameTraining(Run(1, 2), vp2, "gpt2 cp 2 x pp 2, virtual_stages 2, against pp 2, virtual_stages 2");
}

// Checkpoints hold the parameters and AdamW's state whole (nothing is split by cp; ZeRO's
// pieces are over dp x cp), so any layout resumes any other's: cp 2 (ZeRO 1) → cp 1, and
// cp 1 → cp 2 x dp 2 (ZeRO 2), each continuing as the uninterrupted one-process run does.
TEST_F(CpTrainingTest, CheckpointsReshardBetweenCpTwoAndCpOne) {
  const Result one = Run(1, 1);
  every_ = 3;
  ckpt_ = "from_cp2";
  Run(1, 2, 1, /*stop_after=*/3);
  auto latest = checkpoint::FindLatestCheckpoint(dir_.File(ckpt_));
  ASSERT_TRUE(latest.ok()) << latest.status();
  auto source = checkpoint::DirectorySource(*latest);
  auto layout = checkpoint::ReadCheckpointLayout(*source);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->cp, 2) << "the manifest names the writer's cp";
  EXPECT_EQ(layout->dp, 1);
  Result resumed = Run(1, 1, 0, 0, /*resume=*/true);
  ASSERT_EQ(resumed.losses.size(), 3u) << "steps 4-6";
  resumed.losses.insert(resumed.losses.begin(), one.losses.begin(), one.losses.begin() + 3);
  ExpectSameTraining(resumed, one, "cp 2 → cp 1 at step 3");
  ckpt_ = "from_cp1";
  Run(1, 1, 0, 3);
  Result again = Run(2, 2, 2, 0, true);
  ASSERT_EQ(again.losses.size(), 3u);
  again.losses.insert(again.losses.begin(), one.losses.begin(), one.losses.begin() + 3);
  ExpectSameTraining(again, one, "cp 1 → cp 2 x dp 2 (ZeRO 2) at step 3");
}

// Any to any, as a chain (issue 49's cp 4 → cp 1 → cp 2 · tp 2): steps 1-2 at cp 4 (ZeRO 1:
// AdamW's state in four cp ranks' pieces), steps 3-4 at cp 1 from that checkpoint, steps 5-6 at
// cp 2 x tp 2 with sequence parallelism (ZeRO 3: each rank reads its tensor-parallel blocks'
// pieces) from cp 1's. The six losses, the final validation loss, and the parameters of the
// last checkpoint (written by the cp 2 x tp 2 ranks, read whole) against the uninterrupted
// one-process run, within every layout's bound. For GPT-2 and for a Llama with grouped heads
// (2 key/value heads: the tp ranks split them).
TEST_F(CpTrainingTest, CheckpointsReshardFromCpFourToCpOneToCpTwoByTpTwo) {
  every_ = 2;
  for (const char* arch : {"", "arch: llama, n_kv_head: 2, ffn_hidden: 48, "}) {
    model_ = absl::StrCat(arch, "n_layer: 2, n_head: 4, n_embd: 32, vocab_size: 31, seq_len: 16");
    const std::string what = *arch ? "llama" : "gpt2";
    tp_ = 1;
    sp_ = false;
    ckpt_ = absl::StrCat(what, "_uninterrupted");
    const Result one = Run(1, 1);
    ASSERT_EQ(one.losses.size(), 6u) << what;
    ckpt_ = absl::StrCat(what, "_chain");
    Result chain = Run(1, 4, 1, /*stop_after=*/2);
    ASSERT_EQ(chain.losses.size(), 2u) << what << ": steps 1-2 at cp 4";
    const Result cp1 = Run(1, 1, 0, /*stop_after=*/4, /*resume=*/true);
    ASSERT_EQ(cp1.losses.size(), 2u) << what << ": steps 3-4 at cp 1";
    tp_ = 2;
    sp_ = true;
    const Result last = Run(1, 2, 3, 0, /*resume=*/true);
    ASSERT_EQ(last.losses.size(), 2u) << what << ": steps 5-6 at cp 2 x tp 2";
    chain.losses.insert(chain.losses.end(), cp1.losses.begin(), cp1.losses.end());
    chain.losses.insert(chain.losses.end(), last.losses.begin(), last.losses.end());
    chain.val_loss = last.val_loss;
    // The whole model at step 6, as the cp 2 x tp 2 ranks wrote it.
    auto latest = checkpoint::FindLatestCheckpoint(dir_.File(ckpt_));
    ASSERT_TRUE(latest.ok()) << latest.status();
    auto source = checkpoint::DirectorySource(*latest);
    auto layout = checkpoint::ReadCheckpointLayout(*source);
    ASSERT_TRUE(layout.ok()) << layout.status();
    EXPECT_EQ(layout->cp, 2);
    EXPECT_EQ(layout->tp, 2);
    chain.params.assign(one.params.size(), NAN);
    auto st = checkpoint::ReadCheckpoint(*source, model_config_, jobspec::ParameterLayout(model_config_),
                                         chain.params.data(), nullptr, nullptr);
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(st->step, 6);
    ExpectSameTraining(chain, one, what + " cp 4 → cp 1 → cp 2 x tp 2 (sequence parallel)");
  }
}

// Llama (RoPE at the rows' positions, grouped-query heads: only the key/value heads go round
// the ring), with full recomputation (the ring's forward again in the backward) and ZeRO 3
// (the parameters gathered per unit, sharded over the dp x cp ranks).
TEST_F(CpTrainingTest, LlamaWithGroupedHeadsRecomputationAndZeroThreeAtCpTwoTrainsAsOneProcess) {
  model_ = "arch: llama, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 32, vocab_size: 31, seq_len: 16, ffn_hidden: 48";
  const Result one = Run(1, 1);
  ASSERT_LT(one.losses.back(), one.losses.front()) << "the run learns";
  ExpectSameTraining(Run(1, 2), one, "llama cp 2");
  recompute_ = "full";
  ExpectSameTraining(Run(1, 2, 3), one, "llama cp 2, ZeRO 3, full recomputation");
  // ZeRO-Offload: the dp x cp ranks' shards of the master weights and AdamW's state on the
  // host, with ZeRO 3's parameter shard too.
  recompute_ = "none";
  optimizer_ = "optimizer: {offload: cpu}\n";
  parallel_extra_ = ", offload_params: cpu";
  ExpectSameTraining(Run(1, 2, 3), one, "llama cp 2, ZeRO 3, optimizer and parameters offloaded");
}

// Mixture of experts (GPT-2, 4 experts, top 2, in both layers): the load-balancing loss is the
// micro-batch's, its statistics (routed counts, the router probabilities' column sums, the
// z-loss) summed over the cp group, so that cp 2 trains as one process. With ep 2 (dp 2): the
// all-to-all within each cp rank, the experts' gradients reduced over their replicas x cp (and
// ZeRO 0's gradient norm counting each expert once), as ep 2 alone; again with full
// recomputation (the routing recomputed, its statistics reduced again). The capacity is each cp
// rank's own (Megatron-Core's rule; docs/decisions.md), so the capacity factor here drops
// nothing (E / top_k = 2: every expert may take every row of a rank): where one would drop,
// cp's drops differ from one process's. The coefficients are large (aux 0.1, z 0.01) so that a
// rank's own statistics in place of the group's fail the bound (checked: losses 2e-4 to 7e-3
// apart, parameters 0.045), as does the group's counts without the backward's 1/cp, and edp
// without the other cp rank (ep 2: losses 0.023 apart). (Reordering alone, with both
// coefficients 0, leaves the experts' weights 5e-6 apart, as here: AdamW near g = 0.)
TEST_F(CpTrainingTest, MixtureOfExpertsWithAndWithoutEpAtCpTwoTrainsAsOneProcess) {
  model_ = "n_layer: 2, n_head: 4, n_embd: 32, vocab_size: 31, seq_len: 16, moe: {num_experts: 4, top_k: 2, "
           "capacity_factor: 2.0, aux_loss_coeff: 0.1, z_loss_coeff: 0.01, every_n_layers: 1}";
  const Result one = Run(1, 1);
  ASSERT_LT(one.losses.back(), one.losses.front()) << "the run learns";
  EXPECT_EQ(one.moe_dropped, 0);
  const Result cp2 = Run(1, 2);
  ExpectSameTraining(cp2, one, "moe cp 2");
  EXPECT_EQ(cp2.moe_assignments, one.moe_assignments) << "a report counts the cp group's routing";
  EXPECT_EQ(cp2.moe_dropped, 0);
  ep_ = 2;
  const Result ep2 = Run(2, 1);
  for (size_t i = 0; i < one.losses.size(); ++i) {
    EXPECT_LE(std::fabs(ep2.losses[i] - one.losses[i]) / one.losses[i], 1e-5) << "ep 2, step " << i + 1;
  }
  ExpectSameTraining(Run(2, 2), ep2, "moe cp 2 x ep 2 (dp 2) against ep 2");
  recompute_ = "full";
  ExpectSameTraining(Run(2, 2, 1), ep2, "moe cp 2 x ep 2 (dp 2, ZeRO 1), full recomputation, against ep 2");
}

// bf16 and fp16: the ring reads the 16-bit q|k|v widened and rounds its output (and dq|dk|dv)
// back, computing in fp32 as the cpu's attention does, but merging the blocks by log-sum-exps
// where the unsplit attention rounds its softmax's weights to 16 bits first (autocast's
// softmax output). The losses within the bound every 16-bit layout is held to
// (model_parallel_test): 2^-9 relative, half bf16's unit roundoff.
TEST_F(CpTrainingTest, SixteenBitPrecisionAtCpTwoTrainsAsOneProcess) {
  model_ = "arch: llama, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 32, vocab_size: 31, seq_len: 16, ffn_hidden: 48";
  const Result fp32 = Run(1, 1);
  for (const char* p : {"bf16", "fp16"}) {
    precision_ = p;
    const Result one = Run(1, 1);
    const Result cp2 = Run(2, 2, 1);
    ASSERT_EQ(cp2.losses.size(), one.losses.size()) << p;
    double worst = 0;
    for (size_t i = 0; i < one.losses.size(); ++i) {
      const double rel = std::fabs(cp2.losses[i] - one.losses[i]) / one.losses[i];
      worst = std::max(worst, rel);
      EXPECT_LE(rel, 0x1p-9) << p << " cp 2 x dp 2 step " << i + 1 << ": " << cp2.losses[i] << " vs " << one.losses[i];
      EXPECT_NE(one.losses[i], fp32.losses[i]) << p << " is not fp32, step " << i + 1;
    }
    std::printf("%s cp 2 x dp 2: losses within %.2g (bound 2^-9 = %.2g), step 1 %.2g\n", p, worst, 0x1p-9, std::fabs(cp2.losses[0] - one.losses[0]) / one.losses[0]);
  }
}

// The device path: the ring's block ops, RoPE at the rows' positions and GPT-2's position
// embeddings on the backend, on cuda-emulated (kernels/cuda's block kernels under the CUDA
// emulator; the exchanges Gloo's on the device memory, in NCCL's call sequence: a
// Synchronize before each SendRecv, as on a GPU, where the NCCL communicator's stream must
// not read a block the backend's stream is still writing). Against one process on the same
// backend (its fused attention), within every layout's bound (ExpectSameTraining): a Llama
// with grouped heads (RoPE at the positions, only the key/value heads travel), fp32, and in
// bf16 (the ring on widened copies in device memory) within 2^-9 as SixteenBitPrecision...;
// GPT-2 (its learned positions gathered and their gradient added back on the device). Three
// steps, so that the emulator's time stays a few seconds. (bf16 on the device:
// CudaEmulatedCpTwoOnCudnnTrainsAsOneProcess, the blocks on cuDNN and on these kernels.)
TEST_F(CpTrainingTest, CudaEmulatedCpTwoTrainsAsOneProcess) {
  device_ = "cuda-emulated";
  steps_ = 3;
  model_ = "arch: llama, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 32, vocab_size: 31, seq_len: 16, ffn_hidden: 48";
  const Result one = Run(1, 1);
  ASSERT_EQ(one.losses.size(), 3u);
  ExpectSameTraining(Run(1, 2), one, "llama cuda-emulated cp 2");
  model_ = "n_layer: 2, n_head: 4, n_embd: 32, vocab_size: 31, seq_len: 16";
  ExpectSameTraining(Run(1, 2), Run(1, 1), "gpt2 cuda-emulated cp 2");
}

// The ring's blocks on the cuDNN path (AttentionBlock::values 16-bit; the stand-in of
// kernels/emulated/cudnn_frontend.h on cuda-emulated): a bf16 Llama with grouped heads (only the
// key/value heads travel; cuDNN's SDPA reads them ungrouped) at cp 2 against one process on the
// same backend (its attention on cuDNN too), within 2^-9 a step as
// SixteenBitPrecisionAtCpTwoTrainsAsOneProcess and CudaEmulatedCpTwoTrainsAsOneProcess: each
// block's output and gradients are rounded to bf16 once more than the one process's (a
// relative 2^-9 of a partial at most, against loss changes of that order over three steps).
// That cuDNN ran them: the stand-in's record holds one graph of the chunk's 4 rows for every
// block the ranks' rings computed (none left to the fp32 kernels), causal (the diagonal)
// and unmasked, forward and backward, at 3 unmasked blocks to 2 diagonal ones a layer and
// pass (cp 2: rank 0's chunks 0 and 3 see 0; 0 and 3; 1 and 2 whole). Fails where the ring
// runs its fp32 kernels instead. Then the fallback (issue 48's rule): with cuDNN refusing every
// plan (the stand-in's test switch, around the cp run only) every block runs on the fp32
// kernels (the 16-bit values widened; the one process's attention stays on cuDNN), within the
// same bound.
TEST_F(CpTrainingTest, CudaEmulatedCpTwoOnCudnnTrainsAsOneProcess) {
  device_ = "cuda-emulated";
  steps_ = 3;
  precision_ = "bf16";
  model_ = "arch: llama, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 32, vocab_size: 31, seq_len: 16, ffn_hidden: 48";
  const int L = 4;  // T 16 over 2·cp chunks
  const Result one = Run(1, 1);
  ASSERT_EQ(one.losses.size(), 3u);
  int64_t before[2][2];
  for (int bwd = 0; bwd < 2; ++bwd)
    for (int causal = 0; causal < 2; ++causal) before[bwd][causal] = emucudnn::Executions(bwd, causal, L);
  const Result cp2 = Run(1, 2);
  ASSERT_EQ(cp2.losses.size(), one.losses.size());
  double worst = 0;
  for (size_t i = 0; i < one.losses.size(); ++i) {
    const double rel = std::fabs(cp2.losses[i] - one.losses[i]) / one.losses[i];
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 0x1p-9) << "bf16 step " << i + 1 << ": " << cp2.losses[i] << " vs " << one.losses[i];
  }
  int64_t ran[2][2];
  for (int bwd = 0; bwd < 2; ++bwd)
    for (int causal = 0; causal < 2; ++causal) ran[bwd][causal] = emucudnn::Executions(bwd, causal, L) - before[bwd][causal];
  std::printf("llama bf16 cuda-emulated cp 2 on cuDNN: losses within %.2g (bound 2^-9); the ranks' blocks: %lld "
              "forward, %lld backward; cuDNN graphs of %d rows run: %lld forward, %lld backward\n",
              worst, static_cast<long long>(cp2.blocks.forward), static_cast<long long>(cp2.blocks.backward), L,
              static_cast<long long>(ran[0][0] + ran[0][1]), static_cast<long long>(ran[1][0] + ran[1][1]));
  EXPECT_GT(cp2.blocks.forward, 0);
  EXPECT_GT(cp2.blocks.backward, 0);
  EXPECT_EQ(ran[0][0] + ran[0][1], cp2.blocks.forward) << "a forward block not on cuDNN";
  EXPECT_EQ(ran[1][0] + ran[1][1], cp2.blocks.backward) << "a backward block not on cuDNN";
  for (int bwd = 0; bwd < 2; ++bwd) {
    EXPECT_GT(ran[bwd][1], 0) << (bwd ? "backward" : "forward") << ": no diagonal block ran on cuDNN";
    EXPECT_EQ(2 * ran[bwd][0], 3 * ran[bwd][1]) << (bwd ? "backward" : "forward") << ": " << ran[bwd][0]
                                                << " unmasked blocks to " << ran[bwd][1] << " diagonal ones";
  }
  for (int bwd = 0; bwd < 2; ++bwd)
    for (int causal = 0; causal < 2; ++causal) before[bwd][causal] = emucudnn::Executions(bwd, causal, L);
  ASSERT_EQ(setenv(emucudnn::kNoPlanVariable, "all", 1), 0);
  const Result fallback = Run(1, 2);
  unsetenv(emucudnn::kNoPlanVariable);
  ASSERT_EQ(fallback.losses.size(), one.losses.size());
  worst = 0;
  for (size_t i = 0; i < one.losses.size(); ++i) {
    const double rel = std::fabs(fallback.losses[i] - one.losses[i]) / one.losses[i];
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 0x1p-9) << "bf16 fallback step " << i + 1 << ": " << fallback.losses[i] << " vs " << one.losses[i];
  }
  std::printf("llama bf16 cuda-emulated cp 2 on the fp32 block kernels (no cuDNN plan): losses within %.2g\n", worst);
  EXPECT_EQ(fallback.blocks.forward, cp2.blocks.forward);
  EXPECT_EQ(fallback.blocks.backward, cp2.blocks.backward);
  for (int bwd = 0; bwd < 2; ++bwd) {
    for (int causal = 0; causal < 2; ++causal) {
      EXPECT_EQ(emucudnn::Executions(bwd, causal, L), before[bwd][causal]) << "a block on cuDNN with no plan";
    }
  }
}

}  // namespace
}  // namespace gantry::train
