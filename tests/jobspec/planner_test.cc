// The planner against the textbook figures: model states in mixed precision with Adam at
// 16 bytes/parameter (20 with fp32 gradient accumulation), the ZeRO paper's example (7.5B
// parameters on 64 GPUs: 120 GB -> 31.4 / 16.6 / 1.9 GB for stages 1 / 2 / 3), the 1F1B
// bubble (4 stages, 16 micro-batches: 3/19); each rank's shard; refusals; and the
// recommendation. (data_parallel_test and model_parallel_test check it against the bytes real
// CPU runs hold, and the dp_matrix and model_parallel integration tests against worker
// processes.)
#include "jobspec/planner.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace gantry::jobspec {
namespace {

constexpr double kGB = 1e9;

TEST(PlannerTest, ModelStatesInMixedPrecisionAre16BytesAParameterAnd20WithFp32Accumulation) {
  EXPECT_DOUBLE_EQ(StateBytes(1, Precision::kMixed, false, 0, 1).model_state(), 16);
  EXPECT_DOUBLE_EQ(StateBytes(1, Precision::kMixed, true, 0, 1).model_state(), 20);
  EXPECT_DOUBLE_EQ(StateBytes(1, Precision::kFp32, false, 0, 1).model_state(), 16) << "fp32: 4 + 4 + 8";
  PlanInput in;
  in.fp32_grad_accum = true;
  in.params = 1e9;
  EXPECT_NEAR(MakePlan(in)->model_state() / kGB, 20, 1e-9);
  in.params = 70e9;
  EXPECT_NEAR(MakePlan(in)->model_state() / kGB, 1400, 1e-6);
}

// optimizer.offload cpu: the optimizer's share leaves the device for the host, with a host
// copy of the gradient shard to step it from (fp32 master, m, v, gradients: 16 bytes a
// parameter of the rank's 1/dp), and `gantry plan` says so.
TEST(PlannerTest, OptimizerOffloadMovesTheOptimizersShareToTheHost) {
  const Plan on = StateBytes(1e9, Precision::kFp32, false, 2, 4, /*offload=*/true);
  const Plan off = StateBytes(1e9, Precision::kFp32, false, 2, 4);
  EXPECT_DOUBLE_EQ(on.optimizer, 0);
  EXPECT_DOUBLE_EQ(on.params, off.params);
  EXPECT_DOUBLE_EQ(on.grads, off.grads);
  EXPECT_DOUBLE_EQ(on.host, 1e9 * 16 / 4);
  EXPECT_DOUBLE_EQ(StateBytes(1e9, Precision::kFp32, false, 0, 4, true).host, 0) << "ZeRO 0 has no shard to offload";
  EXPECT_DOUBLE_EQ(StateBytes(1e9, Precision::kFp32, false, 3, 4, true, /*offload_params=*/true).params, 0)
      << "ZeRO 3's parameter shard is the host's master";
  EXPECT_DOUBLE_EQ(StateBytes(1e9, Precision::kFp32, false, 3, 4, true, true).host, 1e9 * 16 / 4);
  PlanInput in;
  in.params = 1e9;
  in.zero = 1;
  in.dp = 2;
  in.offload_optimizer = true;
  auto p = MakePlan(in);
  ASSERT_TRUE(p.ok());
  EXPECT_NE(RenderPlan(in, *p).find("host memory (optimizer offload): "), std::string::npos) << RenderPlan(in, *p);
}

TEST(PlannerTest, TheZeroPapersExample) {
  PlanInput in;
  in.params = 7.5e9;
  in.dp = 64;
  const double want[] = {120, 31.4, 16.6, 1.9};
  for (int zero = 0; zero <= 3; ++zero) {
    in.zero = zero;
    auto p = MakePlan(in);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_NEAR(p->model_state() / kGB, want[zero], 0.05) << "stage " << zero;
  }
}

TEST(PlannerTest, PipelineBubble) {
  PlanInput in;
  in.params = 1e9;
  in.pp = 4;
  in.microbatches = 16;
  EXPECT_NEAR(MakePlan(in)->bubble, 3.0 / 19, 1e-12);  // 15.8%
  in.pp = 1;
  EXPECT_EQ(MakePlan(in)->bubble, 0);
}

// The interleaved 1F1B schedule (vp 2: two chunks of layers a stage): the bubble divided by vp,
// (p-1)/(v·m+p-1); twice the pipeline's bytes (each chunk sends its activation and its gradient);
// and each stage's activations those of its slots: a chunk's layers each (half the stage's), a
// mailbox of the residual stream's rows each, and more of them on the first stage, whose warm-up
// keeps 2(p-1) + (v-1)p + 1 micro-batches of its chunks in flight (one more where an input comes
// ahead: jobspec/pipeline.h) against 1F1B's p. Refused, naming vp: micro-batches pp does not
// divide, more chunks than layers.
TEST(PlannerTest, InterleavedScheduleDividesTheBubbleAndCountsItsTransfersAndWarmUp) {
  PlanInput in;
  in.model = *ModelPreset("gpt2");
  in.precision = Precision::kFp32;
  in.seq_len = 64;
  in.pp = 4;
  in.microbatches = 16;
  const Plan plain = *MakePlan(in);
  auto plain_ranks = PlanRanks(in);
  ASSERT_TRUE(plain_ranks.ok()) << plain_ranks.status();
  in.vp = 2;
  auto inter = MakePlan(in);
  ASSERT_TRUE(inter.ok()) << inter.status();
  EXPECT_NEAR(plain.bubble, 3.0 / 19, 1e-12);
  EXPECT_NEAR(inter->bubble, 3.0 / 35, 1e-12);  // 8.6%, against 1F1B's 15.8%
  EXPECT_DOUBLE_EQ(inter->pp_bytes, 2 * plain.pp_bytes);
  EXPECT_NE(RenderPlan(in, *inter).find("interleaved, 2 chunks a stage: (p-1)/(v·m+p-1) = 3/35"), std::string::npos)
      << RenderPlan(in, *inter);
  auto ranks = PlanRanks(in);
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  for (int stage = 0; stage < 4; ++stage) {
    const ModelShard shard = ShardOf(*in.model, 1, 0, 4, stage, {}, 2);
    ASSERT_EQ(shard.num_chunks(), 2);
    const ChunkedActivations a = LayoutChunks(*in.model, shard, in.micro_batch, in.seq_len);
    // A slot: the larger chunk's micro-batch region (each chunk's as LayoutActivations lays out
    // that chunk alone), then a mailbox of the residual stream's rows.
    size_t largest = 0;
    for (int c = 0; c < 2; ++c) {
      const ActivationLayout one = LayoutActivations(*in.model, ChunkShard(*in.model, shard, c), in.micro_batch, in.seq_len);
      EXPECT_EQ(a.chunks[static_cast<size_t>(c)].kept, one.kept);
      largest = std::max(largest, one.kept);
    }
    EXPECT_EQ(a.mailbox, largest) << stage;
    const double mailbox = static_cast<double>(in.micro_batch) * in.seq_len * in.model->n_embd;
    EXPECT_EQ(static_cast<double>(a.kept - a.mailbox), mailbox) << "the mailbox: the residual stream's rows";
    const int slots = PipelineSlots(Schedule::k1F1B, 4, stage, 16, 2);
    const int warm = 2 * (4 - stage - 1) + 4 + 1;
    EXPECT_GE(slots, warm) << stage;
    EXPECT_LE(slots, warm + 1) << stage;
    EXPECT_EQ((*ranks)[static_cast<size_t>(stage)].bytes.activations, 4.0 * static_cast<double>(a.floats(slots))) << stage;
  }
  EXPECT_GT((*ranks)[0].bytes.activations, (*plain_ranks)[0].bytes.activations)
      << "stage 0's warm-up keeps 11 slots of a chunk against 1F1B's 4 of the stage";
  in.microbatches = 6;
  EXPECT_NE(std::string(MakePlan(in).status().message()).find("vp "), std::string::npos) << MakePlan(in).status();
  in.microbatches = 16;
  in.vp = 4;
  EXPECT_NE(std::string(MakePlan(in).status().message()).find("pp 4 x vp 4 chunks for 12 layers"), std::string::npos)
      << MakePlan(in).status();
}

// The interleaved schedule's default split balances each stage's chunks together: GPT-2's
// classifier costs about four layers, so balancing the 8 chunks alone (BalanceStages) gives
// the last chunk one layer but stage 3's other chunk two (3 layers and the classifier on one
// stage); BalanceChunks moves a layer of that chunk to stage 2's (2 layers and the classifier).
TEST(PlannerTest, InterleavedChunksBalanceEachStagesChunksTogether) {
  const GPTConfig c = *ModelPreset("gpt2");
  EXPECT_EQ(BalanceStages(c, 8), (std::vector<int>{0, 1, 2, 3, 5, 7, 9, 11, 12}));
  EXPECT_EQ(BalanceChunks(c, 4, 2), (std::vector<int>{0, 1, 2, 4, 5, 7, 9, 11, 12}));
  EXPECT_EQ(BalanceChunks(c, 4, 1), BalanceStages(c, 4));
  const ModelShard last = ShardOf(c, 1, 0, 4, 3, {}, 2);
  EXPECT_EQ(last.chunks, (std::vector<std::pair<int, int>>{{4, 5}, {11, 12}}));
  EXPECT_EQ(HeldLayers(c, last), (std::vector<int>{4, 11}));
  // stage_layers, when given, is kept as given.
  EXPECT_EQ(ShardOf(c, 1, 0, 4, 3, {1, 1, 1, 2, 2, 2, 2, 1}, 2).chunks, (std::vector<std::pair<int, int>>{{3, 5}, {11, 12}}));
}

// Per rank: a pipeline's last stage holds its own copy of wte; tensor ranks each hold the
// replicated tensors (wpe, the LayerNorms, the row-parallel biases); the plan is the rank that
// holds the most; GPipe keeps every micro-batch's activations where 1F1B keeps p - s.
TEST(PlannerTest, EachRankHoldsItsShard) {
  PlanInput in;
  in.model = *ModelPreset("gpt2");
  const auto& c = *in.model;
  const double whole = MakePlan(in)->params / 2;  // mixed precision: 2 bytes a parameter
  EXPECT_NEAR(whole, 124.44e6, 0.01e6);
  in.pp = 2;
  in.microbatches = 8;
  auto ranks = PlanRanks(in);
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  ASSERT_EQ(ranks->size(), 2u);
  EXPECT_EQ((*ranks)[0].num_params + (*ranks)[1].num_params, whole + double(c.vocab_size) * c.n_embd);
  const RankPlan& top = (*ranks)[0].bytes.total() >= (*ranks)[1].bytes.total() ? (*ranks)[0] : (*ranks)[1];
  EXPECT_EQ(MakePlan(in)->total(), top.bytes.total());
  const double one_f_one_b = (*ranks)[0].bytes.activations;
  in.schedule = Schedule::kGPipe;
  EXPECT_DOUBLE_EQ((*PlanRanks(in))[0].bytes.activations, one_f_one_b * 8 / 2) << "8 micro-batches kept, not 2";
  in.schedule = Schedule::k1F1B;
  in.pp = 1;
  in.tp = 4;
  ranks = PlanRanks(in);
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  double sum = 0;
  for (const auto& r : *ranks) sum += r.num_params;
  const double C = c.n_embd, replicated = c.max_seq_len * C + c.n_layer * 6 * C + 2 * C;
  EXPECT_EQ(sum, whole + 3 * replicated);
}

// Expert parallelism: a rank holds E/ep of each MoE layer's experts (GPT-2 medium's shape, 8
// experts in every second layer: 12 MoE layers of 8 MLPs), and under ZeRO 1 their AdamW state
// is split over the dp/ep replicas that hold them, the rest over dp.
TEST(PlannerTest, ExpertParallelRanksHoldTheirExpertsAndShardThemOverTheirReplicas) {
  PlanInput in;
  in.model = *ModelPreset("gpt2-medium");
  in.model->moe = {8, 2, 1.25, 0.01, 0.0, 2};
  in.precision = Precision::kFp32;
  in.dp = 8;
  in.zero = 1;
  const double C = in.model->n_embd, expert = 8 * C * C + 5 * C;  // c_fc (C, 4C) + 4C, c_proj (4C, C) + C
  const double experts = 12 * 8 * expert;
  auto one = PlanRanks(in);
  ASSERT_TRUE(one.ok()) << one.status();
  in.ep = 4;
  auto four = PlanRanks(in);
  ASSERT_TRUE(four.ok()) << four.status();
  const RankPlan& a = (*one)[0];
  const RankPlan& b = (*four)[0];
  EXPECT_EQ(a.num_params - b.num_params, experts * 3 / 4) << "a quarter of the experts";
  const double rest = a.num_params - experts;
  EXPECT_DOUBLE_EQ(a.bytes.optimizer, 8 * a.num_params / 8);
  EXPECT_DOUBLE_EQ(b.bytes.optimizer, 8 * rest / 8 + 8 * (experts / 4) / 2) << "experts over dp/ep = 2 replicas";
  EXPECT_DOUBLE_EQ(b.bytes.params, 4 * b.num_params);
  in.ep = 3;
  EXPECT_FALSE(PlanRanks(in).ok()) << "3 divides neither dp 8 nor 8 experts";
}

// Data-parallel bytes per GPU and step (ring collectives, (d-1)/d of each buffer): ZeRO 0
// all-reduces the gradients (2x), ZeRO 1 and 2 reduce-scatter them and all-gather the
// parameters, ZeRO 3 gathers the parameters twice. train.grad_reduce_dtype bf16 (set by
// PlanOfSpec) halves the gradients' share; Gantry's parameters stay 4 bytes on the wire.
TEST(PlannerTest, Bf16GradientReductionHalvesTheGradientBytes) {
  PlanInput in;
  in.params = 1e9;
  in.precision = Precision::kFp32;
  in.dp = 4;
  const double ring = 1e9 * 3 / 4;
  for (int zero = 0; zero <= 3; ++zero) {
    SCOPED_TRACE(zero);
    in.zero = zero;
    in.bf16_grad_reduce = false;
    const double grads = zero == 0 ? 2 : 1, params = zero == 0 ? 0 : zero == 3 ? 2 : 1;
    EXPECT_DOUBLE_EQ(MakePlan(in)->dp_bytes, ring * (4 * grads + 4 * params));
    in.bf16_grad_reduce = true;
    EXPECT_DOUBLE_EQ(MakePlan(in)->dp_bytes, ring * (2 * grads + 4 * params));
  }
  in.zero = 0;
  EXPECT_NE(RenderPlan(in, *MakePlan(in)).find("(gradients in bf16)"), std::string::npos);
  in.dp = 1;
  EXPECT_EQ(MakePlan(in)->dp_bytes, 0);
  // From a spec: the field sets it, and ZeRO 3 plans a bf16 staging buffer per unit size.
  const std::string yaml = R"(
model: {n_layer: 2, n_head: 2, n_embd: 64, vocab_size: 256, seq_len: 8}
data: {train: t.bin}
train: {steps: 10, micro_batch: 2, global_batch: 4, lr: 1.0e-3, precision: bf16)";
  auto fp32 = ParseJobSpec(yaml + "}\nparallel: {dp: 2, zero_stage: 3}\n");
  auto bf16 = ParseJobSpec(yaml + ", grad_reduce_dtype: bf16}\nparallel: {dp: 2, zero_stage: 3}\n");
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_FALSE(PlanOfSpec(*fp32).bf16_grad_reduce);
  EXPECT_TRUE(PlanOfSpec(*bf16).bf16_grad_reduce);
  const Plan a = *MakePlan(PlanOfSpec(*fp32)), b = *MakePlan(PlanOfSpec(*bf16));
  EXPECT_LT(b.dp_bytes, a.dp_bytes);
  // A layer's unit: 12 C^2 + 13 C parameters, in 2 bytes; the embedding's (wte, wpe) and the
  // head's (ln_f) too, each padded to dp pieces (even sizes here).
  const double C = 64, layer = 12 * C * C + 13 * C, embedding = 256 * C + 8 * C, head = 2 * C;
  EXPECT_DOUBLE_EQ(b.working - a.working, 2 * (layer + embedding + head));
}

TEST(PlannerTest, DegreesThatDoNotDivideAreRefused) {
  PlanInput in;
  in.model = *ModelPreset("gpt2");
  in.tp = 5;
  EXPECT_NE(MakePlan(in).status().message().find("tp 5 does not divide the 12 heads"), std::string::npos);
  in.tp = 1;
  in.pp = 5;
  EXPECT_TRUE(MakePlan(in).ok()) << "uneven stages: 12 layers over 5";
  in.pp = 13;
  EXPECT_NE(MakePlan(in).status().message().find("pp 13 stages for 12 layers"), std::string::npos);
  EXPECT_FALSE(ModelPreset("gpt5").ok());
  // Llama: tensor parallelism splits the key/value heads and the MLP's width too.
  in.pp = 1;
  in.model->arch = Arch::kLlama;
  in.model->n_kv_head = 2;
  in.tp = 4;
  EXPECT_NE(MakePlan(in).status().message().find("tp 4 does not divide the 2 key/value heads"), std::string::npos)
      << MakePlan(in).status();
  in.model->n_kv_head = 0;
  in.model->ffn_hidden = 2050;
  EXPECT_NE(MakePlan(in).status().message().find("tp 4 does not divide the MLP's width 2050"), std::string::npos)
      << MakePlan(in).status();
}

TEST(PlannerTest, RecommendsTheSimplestLayoutThatFits) {
  PlanInput in;
  in.model = *ModelPreset("gpt2-xl");
  in.device_memory = 80 * kGB;
  auto r = Recommend(in, 8, 512);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tp * r->pp, 1) << "1.5B fits data-parallel on 80 GB GPUs";
  EXPECT_EQ(r->dp, 8);
  EXPECT_EQ(512 % (r->micro_batch * r->dp), 0);
  EXPECT_TRUE(MakePlan(*r)->fits);
  // On 16 GB GPUs the model states alone (1.56B x 16 bytes = 25 GB) need sharding.
  in.device_memory = 16 * kGB;
  auto small = Recommend(in, 8, 512);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_TRUE(small->zero > 0 || small->tp * small->pp > 1);
  EXPECT_LE(MakePlan(*small)->total(), 0.9 * 16 * kGB);
  in.device_memory = 0.5 * kGB;
  EXPECT_EQ(Recommend(in, 1, 8).status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
// Llama 3 405B's layout as Meta ran it (Dubey et al. 2024, section 3.3: tp 8, pp 16, dp 64, T
// 8192, micro-batch 1, 32 micro-batches a step, 80 GB H100s): its 126 layers do not divide
// over 16 stages. BalanceStages splits them by cost (a layer's flops, the classifier's on the
// last stage), 7 or 8 a stage, and the planner plans every stage. With the cuda backends'
// fused attention, bf16, ZeRO 1, sequence parallelism and full recomputation, the rank that
// holds the most fits 90% of 80 GB (Plan::fits).
TEST(PlannerTest, Llama3405BsLayersSplitUnevenlyOverSixteenStagesAndFitAnH100) {
  PlanInput in;
  GPTConfig c;
  c.arch = Arch::kLlama;
  c.n_layer = 126, c.n_embd = 16384, c.n_head = 128, c.n_kv_head = 8, c.ffn_hidden = 53248, c.vocab_size = 128256;
  c.max_seq_len = 8192;
  in.model = c;
  in.seq_len = 8192;
  in.precision = Precision::kAutocast;
  in.tp = 8, in.pp = 16, in.dp = 64, in.zero = 1;
  in.micro_batch = 1, in.microbatches = 32;
  in.recompute = Recompute::kFull;
  in.sequence_parallel = true;
  in.fused_attention = true;
  in.grouped_attention = GroupedAttentionOf(in);
  in.device_memory = 80e9;
  const std::vector<int> bounds = BalanceStages(c, 16);
  ASSERT_EQ(bounds.size(), 17u);
  EXPECT_EQ(bounds.front(), 0);
  EXPECT_EQ(bounds.back(), 126);
  for (int s = 0; s < 16; ++s) {
    const int layers = bounds[s + 1] - bounds[s];
    EXPECT_TRUE(layers == 7 || layers == 8) << "stage " << s << ": " << layers << " layers";
  }
  auto ranks = PlanRanks(in);
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  ASSERT_EQ(ranks->size(), 16u * 8u);
  auto plan = MakePlan(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // The same split given as the spec's stage_layers plans the same bytes; one layer moved from
  // the first stage (16 micro-batches in flight) to the last (one) lowers the most held.
  PlanInput given = in;
  for (int s = 0; s < 16; ++s) given.stage_layers.push_back(bounds[s + 1] - bounds[s]);
  auto same = MakePlan(given);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->total(), MakePlan(in)->total());
  given.stage_layers.front() -= 1;
  given.stage_layers.back() += 1;
  auto moved = PlanRanks(given);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_LT((*moved)[0].bytes.activations, (*ranks)[0].bytes.activations);
  given.stage_layers.back() += 1;
  EXPECT_NE(MakePlan(given).status().message().find("stage_layers gives 127 layers in all, the model has 126"),
            std::string::npos);
  std::printf("405B, 126 layers over 16 stages:");
  for (int s = 0; s < 16; ++s) std::printf(" %d", bounds[s + 1] - bounds[s]);
  std::printf("; the most held: %.2f GB (activations %.2f GB)\n", plan->total() / 1e9, plan->activations / 1e9);
  EXPECT_TRUE(plan->fits) << plan->total() / 1e9 << " GB";
}

}  // namespace gantry::jobspec

namespace gantry::jobspec {
namespace {

// Context parallelism (PlanInput::cp): each rank keeps its T/cp rows of every buffer of the
// sequence, its attention keeps each row's log-sum-exp (the ring's), not the probabilities, and
// the ring's working memory is once a stage: 5 K/V blocks (the block computed with and the one
// arriving; backward's dK/dV, two and the one arriving) of the rank's rows of the key/value
// heads and D, fp32 (Plan::ring, in Plan::activations); in bf16 or fp16 also the fp32 copies
// of the ring's 16-bit operands. ZeRO shards over dp x cp. Fails without cp in the plan (the
// same bytes at cp 1 and 2). (long_context_bench --check holds Plan::ring to the bytes
// model::RingAttention allocates.)
// A 64-wide GPT of `layers` at T 32 in fp32.
PlanInput TinyFp32(int layers) {
  GPTConfig c;
  c.n_layer = layers, c.n_embd = 64, c.n_head = 4, c.vocab_size = 128, c.max_seq_len = 32;
  PlanInput in;
  in.model = c;
  in.seq_len = 32;
  in.precision = Precision::kFp32;
  return in;
}

TEST(PlannerTest, ContextParallelHoldsItsRowsOfTheSequenceAndTheRingsBlocks) {
  PlanInput in = TinyFp32(2);
  const GPTConfig c = *in.model;
  in.micro_batch = 2;
  in.cp = 2;
  auto ranks = PlanRanks(in);
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  const ModelShard shard = ShardOf(c, 1, 0, 1, 0);
  // Rows 2 x 16 = 32; heads 4 of 16: blocks 32·2·4·16 = 4,096 floats, D 32·4 = 128:
  // 5·4,096 + 128 = 20,608 floats, 82,432 bytes.
  const double ring = 82432;
  LayoutOptions lo;
  lo.fused_attention = lo.grouped_attention = true;
  const double layout = 4.0 * LayoutChunks(c, shard, 2, 16, lo).floats(1);
  EXPECT_DOUBLE_EQ((*ranks)[0].bytes.activations, layout + ring);
  EXPECT_DOUBLE_EQ((*ranks)[0].bytes.ring, ring);
  {  // bf16 (Gantry's autocast): the widened q|k|v and dq|dk|dv (32·192 floats each), out and
     // dout (32·64 each): 16,384 floats more.
    PlanInput half = in;
    half.precision = Precision::kAutocast;
    EXPECT_DOUBLE_EQ(PlanRanks(half)->front().bytes.ring, ring + 4.0 * 16384);
  }
  in.cp = 1;
  const double whole = PlanRanks(in)->front().bytes.activations;
  EXPECT_GT(whole, 2 * layout) << "cp 1 keeps the probabilities (B, NH, T, T) on the cpu";

  // Fused attention in 16 bits (a GPU's): the activations fall as 1/cp, plus the ring's blocks.
  GPTConfig l;
  l.arch = Arch::kLlama;
  l.n_layer = 4, l.n_embd = 1024, l.n_head = 16, l.n_kv_head = 4, l.vocab_size = 1024, l.max_seq_len = 8192;
  PlanInput g;
  g.model = l;
  g.seq_len = 8192;
  g.precision = Precision::kAutocast;
  g.fused_attention = true;
  g.grouped_attention = true;
  const double one = MakePlan(g)->activations;
  for (int cp : {2, 4, 8}) {
    g.cp = cp;
    const double a = MakePlan(g)->activations;
    // The ring widens its 16-bit operands to fp32 on a GPU too (the fp32 block ops read them; the
    // cuDNN blocks pack them back into the backend's scratch, which the plan does not count): its
    // widened copies of q|k|v, dq|dk|dv, out and dout (model::RunContext::RingScratch) come on top.
    const double rows = 8192.0 / cp, widened = 4 * (2 * rows * (16 + 2 * 4) * 64 + 2 * rows * 16 * 64);
    EXPECT_GT(a, one / cp) << cp;
    EXPECT_LT(a - widened, 1.1 * one / cp)
        << cp << ": the sequence's buffers over cp and the ring's 5 blocks beside them";
  }

  // ZeRO 1 shards the optimizer over dp x cp; the gradients are reduced over them.
  in.cp = 2, in.zero = 1;
  const Plan two = *MakePlan(in);
  in.cp = 1;
  const Plan alone = *MakePlan(in);
  EXPECT_DOUBLE_EQ(two.optimizer, alone.optimizer / 2);
  EXPECT_GT(two.dp_bytes, 0) << "cp 2 at dp 1 still reduces its gradients";
  EXPECT_EQ(alone.dp_bytes, 0);
  // The ring's bytes a step: per layer and micro-batch, cp - 1 K/V blocks forward, backward
  // cp - 1 K/V blocks and cp dK/dV blocks (fp32): (1 + 1 + 2)·4,096 floats x 4 bytes x 2 layers.
  EXPECT_DOUBLE_EQ(two.cp_bytes, 2 * 4 * 4096 * 4.0);
  EXPECT_EQ(alone.cp_bytes, 0);
  // bf16: the K/V blocks travel in it (2 bytes a value), dK/dV in fp32 (context_parallel_test's
  // SixteenBitBlocksTravelInTheirType counts the same on the wire).
  PlanInput half = in;
  half.cp = 2, half.precision = Precision::kAutocast;
  EXPECT_DOUBLE_EQ(MakePlan(half)->cp_bytes, 2 * (4096 * 2.0 + (4096 * 2.0 + 2 * 4096 * 4.0)));

  // T a multiple of 2·cp: refused otherwise, naming both.
  in.cp = 3;
  auto bad = MakePlan(in);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cp 3"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("multiple of 2 x cp"), std::string::npos) << bad.status();
}

// The pipeline's transfers carry a rank's rows of the residual stream: with sequence
// parallelism 1/tp of them (the trainer's stage_floats); the interleaved schedule sends vp
// times as many.
TEST(PlannerTest, PipelineTransfersCarryTheRanksRowsAndOneSetAChunk) {
  PlanInput in = TinyFp32(8);
  in.tp = 2, in.pp = 2, in.microbatches = 4;
  const double plain = MakePlan(in)->pp_bytes;
  EXPECT_DOUBLE_EQ(plain, 2 * 4 * 32 * 64 * 4.0);
  in.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(MakePlan(in)->pp_bytes, plain / 2);
  in.vp = 2;
  EXPECT_DOUBLE_EQ(MakePlan(in)->pp_bytes, plain);
}

}  // namespace
}  // namespace gantry::jobspec
