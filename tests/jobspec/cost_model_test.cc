// The step cost model (jobspec/cost_model.h) against hand-computed figures: the collectives'
// formulas, the links a group crosses given the rank order, one whole step of a small GPT
// worked out op by op below, recomputation's extra forward, the pipeline bubble's share, the
// data-parallel overlap, offload's host step; the cluster files (jobspec/cluster.h); and the
// ranking that must put the 70B layout `gantry plan` recommended by memory alone (tp 2 x dp 32,
// ZeRO 3: terabytes a step over data parallelism) behind a faster one on a slow network.
#include "jobspec/cost_model.h"

#include "jobspec/auto_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace gantry::jobspec {
namespace {

// Tolerance: the model is sums and products of doubles; 1e-12 relative is rounding.
constexpr double kRel = 1e-12;
#define EXPECT_REL(a, b) EXPECT_NEAR((a), (b), kRel * std::abs(b))

TEST(CostModelTest, CollectivesFollowTheirAlgorithms) {
  const Link l{100e9, 10e-6};
  // Ring all-reduce over 8: 2·7 latencies + 2·7/8 of 1 GB at 100 GB/s = 140 us + 17.5 ms; the
  // tree's 2·3 latencies + 2 · 10 ms is slower.
  EXPECT_REL(AllReduceTime(1e9, 8, l), 140e-6 + 17.5e-3);
  // 1 kB over 1024 ranks: the ring's 2046 latencies (20.46 ms) lose to the tree's 20 (200 us).
  EXPECT_REL(AllReduceTime(1e3, 1024, l), 20 * 10e-6 + 2 * 1e3 / 100e9);
  EXPECT_REL(ReduceScatterTime(1e9, 8, l), 7 * 10e-6 + 7.0 / 8 * 1e9 / 100e9);
  EXPECT_REL(AllToAllTime(8e6, 4, l), 3 * 10e-6 + 0.75 * 8e6 / 100e9);
  EXPECT_REL(SendTime(1e6, l), 10e-6 + 1e6 / 100e9);
  EXPECT_EQ(AllReduceTime(1e9, 1, l), 0) << "a group of one sends nothing";
}

ClusterSpec TwoLinks() {
  ClusterSpec c;
  c.gpus_per_node = 8;
  c.intra = {300e9, 2e-6};
  c.inter = {25e9, 5e-6};
  return c;
}

TEST(CostModelTest, AGroupUsesTheNetworkOnlyWhenItSpansNodes) {
  const ClusterSpec c = TwoLinks();
  EXPECT_EQ(GroupLink({0, 1, 2, 3, 4, 5, 6, 7}, c).bandwidth, 300e9);
  EXPECT_EQ(GroupLink({0, 8}, c).bandwidth, 25e9) << "one rank a node: one port";
  EXPECT_EQ(GroupLink({0, 8}, c).latency, 5e-6);
  EXPECT_EQ(GroupLink({0, 1, 8, 9}, c).bandwidth, 50e9) << "two ranks a node: two ports";
  std::vector<int> sixteen;
  for (int r = 0; r < 16; ++r) sixteen.push_back(r);
  EXPECT_EQ(GroupLink(sixteen, c).bandwidth, 200e9) << "eight ports: 200 GB/s, under NVLink's 300";
}

// Point to point (a pipeline's hop, the cp ring): the node's own path where the ranks share a
// node and the cluster gives one (intra_p2p, as calibrate measures Gloo's shared-memory links),
// the collectives' link otherwise; across nodes, the network's.
TEST(CostModelTest, PointToPointTakesTheNodesOwnPathWhereTheClusterGivesOne) {
  ClusterSpec c = TwoLinks();
  EXPECT_EQ(P2PLink({0, 1}, c).bandwidth, 300e9) << "none given: the collectives' link";
  c.intra_p2p = {500e9, 1e-6};
  EXPECT_EQ(P2PLink({0, 1}, c).bandwidth, 500e9);
  EXPECT_EQ(P2PLink({0, 1}, c).latency, 1e-6);
  EXPECT_EQ(P2PLink({7, 8}, c).bandwidth, 25e9) << "across nodes: the network";
  EXPECT_EQ(GroupLink({0, 1}, c).bandwidth, 300e9) << "the collectives keep theirs";
}

// A device whose rates make the arithmetic below easy; no launch floor.
ClusterSpec Simple() {
  ClusterSpec c = TwoLinks();
  DeviceProfile& d = c.device;
  d.name = "simple";
  d.peak_flops = 2e12;
  d.gemm_fwd[1] = 1e12, d.gemm_bwd[1] = 0.5e12;
  d.gemm_fwd[0] = 2e12, d.gemm_bwd[0] = 1e12;
  d.attention_fwd[1] = 1e11, d.attention_bwd[1] = 0.5e11;
  d.attention_fwd[0] = 2e11, d.attention_bwd[0] = 1e11;
  d.memory_bandwidth = 1e11;
  d.memory = 80e9;
  return c;
}

PlanInput Small() {
  GPTConfig c;
  c.n_layer = 2, c.n_embd = 64, c.n_head = 4, c.vocab_size = 128, c.max_seq_len = 32;
  PlanInput in;
  in.model = c;
  in.seq_len = 32;
  in.micro_batch = 2;
  in.precision = Precision::kFp32;
  return in;
}

// GPT-2 shape, L 2, C 64, 4 heads, V 128, T 32, B 2 (N = 64 tokens), fp32, one rank:
//   a layer's GEMM weights 64·(4+8)·16 + 64·64 + 2·64·256 = 49,152: forward 2·64·49,152 =
//     6,291,456 FLOPs at 1e12 (6.291456 us), backward twice that at 0.5e12 (25.165824 us);
//   attention 2·N·T·C = 262,144 FLOPs at 1e11 (2.62144 us), backward 2.5x at 0.5e11 (13.1072);
//   memory-bound forward: norms 2·64·64·8 + residual adds 2·64·64·12 + GELU 64·256·2·4 =
//     294,912 bytes (2.94912 us); backward norms 2·64·64·16 + adds 98,304 + GELU 64·256·3·4 =
//     425,984 bytes (4.25984 us);
//   a layer: forward 11.862016 us, backward 42.532864; two of them;
//   embedding 64·64·12 bytes each way (0.49152 us each); head: ln_f 64·64·8 (0.32768 us),
//     classifier 2·64·64·128 FLOPs (1.048576 us; backward 4.194304), softmax 64·128·12 bytes
//     (0.98304 us), backward ln_f 2·64·64·8 (0.65536 us);
//   AdamW over 110,336 parameters (wte 8,192, wpe 2,048, 2 x 49,984, ln_f 128): the norm's 4 and
//     AdamW's 28 bytes each at 1e11: 35.30752 us.
TEST(CostModelTest, ASmallStepAddsUpOpByOp) {
  const double layer_f = 6.291456 + 2.62144 + 2.94912, layer_b = 25.165824 + 13.1072 + 4.25984;
  const double fwd = 2 * layer_f + 0.49152 + 0.32768 + 1.048576 + 0.98304;
  const double bwd = 2 * layer_b + 0.49152 + 4.194304 + 0.65536;
  const double opt = 110336 * 32 / 1e11 * 1e6;
  auto r = PredictStep(Small(), Simple());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_REL(r->compute * 1e6, fwd + bwd);
  EXPECT_REL(r->optimizer * 1e6, opt);
  EXPECT_EQ(r->exposed_comm, 0);
  EXPECT_EQ(r->bubble, 0);
  EXPECT_REL(r->step * 1e6, fwd + bwd + opt);
  EXPECT_REL(r->tokens_per_s, 64 / r->step);
  // Model FLOPs: three passes of each layer's GEMMs and whole attention (2 x 2·N·T·C) and the
  // classifier's; MFU over the 2e12 peak.
  const double flops = 3 * (2 * (6291456 + 2 * 262144) + 1048576);
  EXPECT_REL(r->mfu, flops / r->step / 2e12);
  EXPECT_REL(r->flops_per_gpu, flops / r->step) << "no recomputation: hardware = model FLOPs";

  // Micro-batches repeat the passes, not the optimizer.
  PlanInput four = Small();
  four.microbatches = 4;
  EXPECT_REL(PredictStep(four, Simple())->step * 1e6, 4 * (fwd + bwd) + opt);
}

TEST(CostModelTest, FullRecomputeAddsEachLayersForwardSelectiveItsAttention) {
  const double base = PredictStep(Small(), Simple())->step;
  PlanInput full = Small(), selective = Small();
  full.recompute = Recompute::kFull;
  selective.recompute = Recompute::kSelective;
  EXPECT_REL((PredictStep(full, Simple())->step - base) * 1e6, 2 * (6.291456 + 2.62144 + 2.94912));
  EXPECT_REL((PredictStep(selective, Simple())->step - base) * 1e6, 2 * 2.62144);
  // Megatron's hardware FLOPs count the recomputed forward; MFU does not.
  auto r = PredictStep(full, Simple());
  EXPECT_REL(r->flops_per_gpu * r->step - r->mfu * r->step * 2e12, 2 * (6291456 + 2 * 262144));
}

// The profile's GEMM table (jobspec/cluster.h GemmTable) sets each GEMM's rate by its shape as
// the backend runs it (rows m, out n, in k). Small()'s GEMMs a layer: qkv (64, 192, 64), the
// attention projection (64, 64, 64), fc (64, 256, 64), fc's projection (64, 64, 256); the
// classifier (64, 128, 64). An fp32 grid m {32, 64} x n {64, 128, 192, 256} x k {64, 256}
// holds them at Simple()'s single rates and every other shape at other rates: a GEMM looked up
// at a wrong shape (dimensions swapped, or not on the grid) changes the step.
GemmTable SmallTable(double qkv_scale) {
  std::vector<GemmRate> e;
  for (int64_t m : {32, 64}) {
    for (int64_t n : {64, 128, 192, 256}) {
      for (int64_t k : {64, 256}) {
        const bool used = m == 64 && (k == 64 || n == 64);  // (64, 256, 256) and m 32: unused
        double f = used ? 1e12 : 7e12, b = used ? 0.5e12 : 3e12;
        if (m == 64 && n == 192 && k == 64) f *= qkv_scale, b *= qkv_scale;
        e.push_back({m, n, k, 1, f, b});
      }
    }
  }
  auto t = GemmTable::Make(e);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

TEST(CostModelTest, EachGemmTakesItsShapesRateFromTheTable) {
  const double base = PredictStep(Small(), Simple())->compute;
  ClusterSpec c = Simple();
  c.device.gemm_table = SmallTable(1);
  auto same = PredictStep(Small(), c);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_REL(same->compute, base) << "every GEMM at a measured shape with the single rates";
  // qkv's rate halved: its time doubles, forward 2·64·64·192 FLOPs at 1e12 (1.572864 us) and
  // backward twice that at 0.5e12 (6.291456 us) more in each of the two layers. Tolerance: the
  // difference of two sums of about 110 us, each within 1e-12 relative; 1e-9 us.
  c.device.gemm_table = SmallTable(0.5);
  auto slower = PredictStep(Small(), c);
  ASSERT_TRUE(slower.ok()) << slower.status();
  EXPECT_NEAR((slower->compute - base) * 1e6, 2 * (1.572864 + 6.291456), 1e-9);
  // A 16-bit step: the table has no 16-bit grid, so the single 16-bit rates.
  PlanInput half = Small();
  half.precision = Precision::kAutocast;
  EXPECT_REL(PredictStep(half, c)->compute, PredictStep(half, Simple())->compute);
}

// The GEMMs timed one by one (rows x in x out each) are the FLOPs the model counts: on a device
// where everything but the GEMMs takes no time (rates of 1e30, links without latency), a step at
// one GEMM rate R lasts the counted GEMM FLOPs over R, for a Llama with grouped heads, MoE
// layers (experts over ep) and tensor parallelism, where the shapes are the most split.
TEST(CostModelTest, TheGemmsTimedOneByOneAreTheCountedFlops) {
  ClusterSpec c = TwoLinks();
  c.intra = c.inter = {1e30, 0};
  DeviceProfile& d = c.device;
  d.name = "gemms-only";
  d.peak_flops = 1e12;
  const double R = 1e12;
  for (int p = 0; p < 2; ++p) {
    d.gemm_fwd[p] = d.gemm_bwd[p] = R;
    d.attention_fwd[p] = d.attention_bwd[p] = 1e30;
  }
  d.memory_bandwidth = 1e30;
  d.memory = 80e9;
  PlanInput in = Small();
  in.model->arch = Arch::kLlama;
  in.model->n_kv_head = 2, in.model->ffn_hidden = 96;
  in.model->moe.num_experts = 4, in.model->moe.top_k = 2, in.model->moe.every_n_layers = 2;
  in.tp = 2, in.dp = 2, in.ep = 2;
  auto r = PredictStep(in, c);
  ASSERT_TRUE(r.ok()) << r.status();
  // Hardware FLOPs a GPU (no recomputation): three passes of the GEMMs and of attention's
  // 2 x 2·N·T·C/tp a layer. Attention's take no time here, so the step is the GEMMs' alone.
  const double N = 64, T = 32, C = 64, L = 2, tp = 2;
  const double gemm_flops = r->flops_per_gpu * r->step - 3 * L * 2 * (2 * N * T * C / tp);
  // Tolerance: sums of doubles (1e-15 relative each) and the other ops' 1e-30-scale times.
  EXPECT_NEAR(r->step * R / gemm_flops, 1, 1e-12);
  // The same with the GEMMs in a table at R everywhere (a one-shape grid): the same step.
  auto t = GemmTable::Make({{768, 768, 768, 1, R, R}});
  ASSERT_TRUE(t.ok()) << t.status();
  d.gemm_table = *t;
  d.gemm_fwd[1] = d.gemm_bwd[1] = R / 3;  // (unused: fp32 is in the table)
  EXPECT_NEAR(PredictStep(in, c)->step / r->step, 1, 1e-12);
}

TEST(CostModelTest, TheBubbleIsTheScheduleShareOfBalancedStages) {
  PlanInput in = Small();
  in.model->n_layer = 8;
  in.pp = 4;
  for (int m : {1, 4, 16}) {
    in.microbatches = m;
    auto r = PredictStep(in, Simple());
    ASSERT_TRUE(r.ok()) << r.status();
    const double pipe = r->compute + r->bubble + r->pp_comm;  // the schedule's time
    EXPECT_REL(r->bubble / pipe, 3.0 / (m + 3)) << m;
    EXPECT_GT(r->pp_comm, 0);
  }
}

// The interleaved schedule (vp 2): the fill and drain are a chunk's p - 1 micro-batches, so the
// bubble's share of the schedule's time is (p-1)/(v·m+p-1); each chunk sends its own activation
// and gradient, so the pipeline's transfers take longer than 1F1B's.
TEST(CostModelTest, TheInterleavedBubbleIsDividedByTheChunks) {
  PlanInput in = Small();
  in.model->n_layer = 8;
  in.pp = 4;
  for (int m : {4, 16}) {
    in.microbatches = m;
    in.vp = 1;
    auto plain = PredictStep(in, Simple());
    in.vp = 2;
    auto r = PredictStep(in, Simple());
    ASSERT_TRUE(r.ok()) << r.status();
    const double pipe = r->compute + r->bubble + r->pp_comm;
    EXPECT_REL(r->bubble / pipe, 3.0 / (2 * m + 3)) << m;
    EXPECT_GT(r->pp_comm, plain->pp_comm) << m;
    EXPECT_LT(r->bubble, plain->bubble) << m;
  }
}

// A chunk holds a layer at least, as the job spec says (parallel.virtual_stages): pp x vp
// beyond the layers is refused, naming the figures, not priced as chunks with nothing in them.
TEST(CostModelTest, MoreChunksThanLayersAreRefused) {
  PlanInput in = Small();
  in.model->n_layer = 8;
  in.pp = 4;
  in.microbatches = 4;
  in.vp = 2;
  EXPECT_TRUE(PredictStep(in, Simple()).ok());
  in.vp = 3;
  auto r = PredictStep(in, Simple());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("12 chunks of one layer at least, and the model has 8 layers"), std::string::npos)
      << r.status();
}

// The interleaved schedule's extra transfers, counted chunk by chunk: a stage's chunks each
// receive their input and send their output (and the gradients back), except stage 0's first
// chunk's input and the last stage's last chunk's output. Small at 8 layers over pp 4: the
// last stage (the head: the slowest) makes 1 hop each way a micro-batch at vp 1, 3 at vp 2.
TEST(CostModelTest, TheInterleavedSchedulesTransfersAreEachChunksOwn) {
  PlanInput in = Small();
  in.model->n_layer = 8;
  in.pp = 4;
  in.microbatches = 4;
  const ClusterSpec c = Simple();
  const double one = SendTime(64 * 64 * 4, c.intra);  // a micro-batch's 64 rows of 64 floats, in a node
  auto plain = PredictStep(in, c);
  in.vp = 2;
  auto chunks = PredictStep(in, c);
  ASSERT_TRUE(plain.ok() && chunks.ok());
  EXPECT_REL(plain->pp_comm, 4 * 2 * 1 * one);
  EXPECT_REL(chunks->pp_comm, 4 * 2 * 3 * one);
  // The hops take the node's point-to-point path where the cluster gives one.
  ClusterSpec p2p = c;
  p2p.intra_p2p = {600e9, 1e-6};  // faster than intra: the head stays the slowest stage
  EXPECT_REL(PredictStep(in, p2p)->pp_comm, 4 * 2 * 3 * SendTime(64 * 64 * 4, p2p.intra_p2p));
  // Sequence parallelism: each rank sends its 1/tp of the rows (the trainer's stage_floats).
  in.vp = 1, in.tp = 2, in.sequence_parallel = true;
  EXPECT_REL(PredictStep(in, c)->pp_comm, 4 * 2 * 1 * SendTime(32 * 64 * 4, c.intra));
}

// Context parallelism, Small at cp 2 (two ranks in a node, T 32: 16 rows a sequence each, 32
// rows of the micro-batch): every GEMM and memory-bound op on half the rows, attention half
// the work (the balanced chunks' share), the ring's merges added (forward 32·64·12 bytes: 0.24576
// us, backward 32·128·12: 0.49152 us a layer). The ring: a K/V block is 32 rows x 2 x 4 heads x
// 16 = 4,096 floats; forward one exchange (16,384 bytes: 2 us + 54.6 ns), hidden up to a ring
// step's attention (1.31072 / 2 us), the rest exposed; backward one exchange with its dK/dV
// (32,768 bytes) hidden behind a step's 3.2768 us, and the dK/dV home (16,384 bytes) exposed.
// The gradients are all-reduced over the 2 ranks, as dp 2's; the tokens are cp 1's, on 2 GPUs.
TEST(CostModelTest, ContextParallelSplitsTheWorkAndHidesItsRingBehindTheBlockAttention) {
  const ClusterSpec c = Simple();
  const PlanInput one = Small();
  PlanInput in = Small();
  in.cp = 2;
  auto a = PredictStep(one, c), r = PredictStep(in, c);
  ASSERT_TRUE(a.ok() && r.ok()) << r.status();
  EXPECT_REL(r->compute * 1e6, a->compute * 1e6 / 2 + 2 * (0.24576 + 0.49152));
  const double xf = 2e-6 + 16384 / 300e9, home = xf;
  const double attn_f = 2.0 * 32 * 32 * 64 / 1e11;
  EXPECT_REL(r->cp_comm, 2 * ((xf - attn_f / 2) + home)) << "two layers: the forward's excess and the last dK/dV";
  EXPECT_REL(r->tokens, a->tokens);
  EXPECT_REL(r->tokens_per_s_per_gpu, r->tokens_per_s / 2);
  PlanInput dp2 = Small();
  dp2.dp = 2;
  auto d = PredictStep(dp2, c);
  EXPECT_REL(r->dp_bytes, d->dp_bytes);
  EXPECT_REL(r->dp_comm_total, d->dp_comm_total);
  // The model's FLOPs a GPU halve (MFU's numerator), the step's time more than halves less.
  const double flops = 3 * (2 * (6291456 + 2 * 262144) + 1048576);
  EXPECT_REL(r->mfu, flops / 2 / r->step / 2e12);
  // Recomputation runs the forward's ring again.
  in.recompute = Recompute::kSelective;
  EXPECT_REL(PredictStep(in, c)->cp_comm, 2 * (2 * (xf - attn_f / 2) + home));
  // On a link fast enough every exchange hides behind its step's attention but the last dK/dV.
  ClusterSpec fast = c;
  fast.intra = {1e15, 0};
  in.recompute = Recompute::kNone;
  EXPECT_REL(PredictStep(in, fast)->cp_comm, 2 * 16384 / 1e15);
  // The ring's exchanges are point to point: a fast path of the node's own for them alone
  // (ClusterSpec::intra_p2p) gives the same; the all-gather variant, a collective, keeps intra.
  ClusterSpec p2p = c;
  p2p.intra_p2p = {1e15, 0};
  EXPECT_REL(PredictStep(in, p2p)->cp_comm, 2 * 16384 / 1e15);
  in.cp_exchange = CpExchange::kAllGather;
  EXPECT_REL(PredictStep(in, p2p)->cp_comm, 2 * 16384 / 1e15 + (PredictStep(in, c)->cp_comm - 2 * home))
      << "the gathers as on intra, the dK/dV ring on the fast path";
  in.cp_exchange = CpExchange::kRing;
  // Where the collectives share the compute's cores, the hidden exchanges still cost compute.
  ClusterSpec shared = c;
  shared.device.comm_compute_cost = 0.5;
  const double hidden = 2 * (attn_f / 2 + (2e-6 + 32768 / 300e9));
  EXPECT_REL(PredictStep(in, shared)->cp_comm, r->cp_comm + 0.5 * hidden);
  // 2·cp must divide T.
  in.cp = 3;
  EXPECT_FALSE(PredictStep(in, c).ok());
}

// The all-gather variant (CpExchange::kAllGather, as Llama 3's CP and torch's context_parallel
// run it), Small at cp 4 worked by hand: per layer the cp - 1 other blocks in one all-gather
// (3 latencies and 3/4 of 4 blocks' 8,192 bytes over 300 GB/s), hidden behind the local block's
// attention only (1/4 of 2·16·32·64 FLOPs at 1e11) forward; backward gathered again behind 1/4 of
// the backward's attention (2.5x the FLOPs at 0.5e11), then 4 dK/dV blocks (fp32) round the ring,
// 3 behind a step each and the last exposed. With GQA's K/V repeated to every query head
// (cp_repeated_kv) the blocks are NH/NKV times the bytes.
TEST(CostModelTest, TheAllGatherVariantHidesItsExchangeBehindTheLocalBlockOnly) {
  const ClusterSpec c = Simple();
  PlanInput in = Small();
  in.cp = 4;
  in.cp_exchange = CpExchange::kAllGather;
  auto r = PredictStep(in, c);
  ASSERT_TRUE(r.ok()) << r.status();
  const double gather = 3 * 2e-6 + 0.75 * 4 * 8192 / 300e9, home = 2e-6 + 8192 / 300e9;
  const double step_f = 2.0 * 16 * 32 * 64 / 1e11 / 4, step_b = 2.5 * 2 * 16 * 32 * 64 / 0.5e11 / 4;
  const double exp_f = gather - step_f, exp_b = (gather - step_b) + 3 * (home - step_b) + home;
  EXPECT_REL(r->cp_comm, 2 * (exp_f + exp_b)) << "two layers";
  // Against the ring of the same blocks: the same compute, another exposure.
  PlanInput ring = in;
  ring.cp_exchange = CpExchange::kRing;
  auto g = PredictStep(ring, c);
  ASSERT_TRUE(g.ok());
  EXPECT_REL(g->compute, r->compute);
  EXPECT_REL(g->cp_comm, 2 * (3 * (home - step_f) + 3 * (2e-6 + 16384 / 300e9 - step_b) + home));
  // Repeated K/V: a Llama of 4 heads over 2 key/value heads sends twice the bytes; on a link
  // fast enough to hide the rest, the last dK/dV (exposed) shows it.
  ClusterSpec fast = c;
  fast.intra = {1e15, 0};
  PlanInput llama = in;
  llama.model->arch = Arch::kLlama, llama.model->n_kv_head = 2;
  auto kv = PredictStep(llama, fast);
  llama.cp_repeated_kv = true;
  auto heads = PredictStep(llama, fast);
  ASSERT_TRUE(kv.ok() && heads.ok());
  EXPECT_REL(kv->cp_comm, 2 * (2 * 16 * 2 * 16 * 4) / 1e15) << "16 rows x K and V x 2 heads x 16 wide, fp32";
  EXPECT_REL(heads->cp_comm, 2 * kv->cp_comm);
  EXPECT_GT(heads->compute, kv->compute) << "backward adds the arriving dK/dV of every head";
}

// The intra-node link serves a tp group inside a node; the same group split over nodes is
// slower by the links' ratio in its bandwidth term.
TEST(CostModelTest, TensorParallelCommunicationCrossesTheLinkItsRanksSitOn) {
  PlanInput in = Small();
  in.tp = 2;
  ClusterSpec one_node = Simple(), split = Simple();
  split.gpus_per_node = 1;
  auto a = PredictStep(in, one_node), b = PredictStep(in, split);
  ASSERT_TRUE(a.ok() && b.ok());
  // Per layer 4 all-reduces of N·C·4 bytes (2 forward, 2 backward), the embedding's and the
  // classifier input's, and the softmax statistics' reduce-scatter of N·8·2 bytes.
  const double ar = 64 * 64 * 4;
  auto expected = [&](const Link& l) {
    return (2 * 4 + 2) * AllReduceTime(ar, 2, l) + ReduceScatterTime(64 * 8 * 2, 2, l);
  };
  EXPECT_REL(a->tp_comm, expected(one_node.intra));
  EXPECT_REL(b->tp_comm, expected(split.inter));
  EXPECT_GT(b->step, a->step);
}

// ZeRO 0: one all-reduce of the gradients, in the last micro-batch's backward. A fast link
// hides all but the last bucket's; a slow one is exposed beyond the backward's length.
TEST(CostModelTest, DataParallelReductionOverlapsBackward) {
  PlanInput in = Small();
  in.dp = 2;
  in.bucket_mb = 0.1;  // 100 kB buckets of the 441 kB of gradients
  ClusterSpec fast = Simple();
  fast.gpus_per_node = 1;
  fast.intra = fast.inter = {1e12, 0};
  const double grads = 110336 * 4.0, share = 1e5 / grads;
  auto r = PredictStep(in, fast);
  ASSERT_TRUE(r.ok());
  EXPECT_REL(r->dp_comm, AllReduceTime(grads * share, 2, fast.inter)) << "the last bucket alone";
  EXPECT_REL(r->dp_comm_total, AllReduceTime(grads, 2, fast.inter));
  EXPECT_REL(r->dp_bytes, grads * 2 * 0.5);
  ClusterSpec slow = fast;
  slow.inter = {1e9, 0};  // 441 us of reduction against a backward of about 90 us
  auto s = PredictStep(in, slow);
  const double bwd = s->compute - PredictStep(Small(), slow)->compute;  // dp changes no compute
  EXPECT_EQ(bwd, 0);
  const double backward = (2 * (25.165824 + 13.1072 + 4.25984) + 0.49152 + 4.194304 + 0.65536) * 1e-6;
  EXPECT_REL(s->dp_comm, AllReduceTime(grads, 2, slow.inter) - backward * (1 - share));
}

// ZeRO 3 gathers every unit for each micro-batch's forward and backward and reduce-scatters
// every micro-batch: its bytes grow with the micro-batches, and so does the planner's count.
TEST(CostModelTest, Zero3MovesItsBytesEveryMicroBatch) {
  PlanInput in = Small();
  in.dp = 4;
  in.zero = 3;
  for (int m : {1, 8}) {
    in.microbatches = m;
    auto r = PredictStep(in, Simple());
    ASSERT_TRUE(r.ok());
    EXPECT_REL(r->dp_bytes, m * 110336 * (4 + 2 * 4) * 0.75);
    EXPECT_REL(MakePlan(in)->dp_bytes, r->dp_bytes);
  }
  in.zero = 1;
  EXPECT_REL(PredictStep(in, Simple())->dp_bytes, 110336 * 8 * 0.75) << "ZeRO 1: once per step";
}

// Every bucket (ZeRO 0-2) and every unit (ZeRO 3: each gathered for forward and for backward,
// and reduce-scattered) is a collective of its own that pays the link's latency: on a link of
// 1 ms a message, a step of many small collectives is latency-bound (found by bench/plan_check,
// where ZeRO 3's 36 collectives a step were counted as three).
TEST(CostModelTest, EachBucketAndEachUnitPaysItsCollectivesLatency) {
  PlanInput in = Small();
  in.dp = 2;
  in.bucket_mb = 0.1;  // 441,344 bytes of gradients: 5 buckets
  ClusterSpec c = Simple();
  c.gpus_per_node = 2;
  c.intra = {1e9, 1e-3};
  const double grads = 110336 * 4.0;
  auto z0 = PredictStep(in, c);
  ASSERT_TRUE(z0.ok());
  EXPECT_REL(z0->dp_comm_total, 5 * AllReduceTime(grads / 5, 2, c.intra));
  in.zero = 3;
  in.microbatches = 2;
  auto z3 = PredictStep(in, c);
  ASSERT_TRUE(z3.ok());
  const int units = 2 + 2;  // the embedding, two layers, the head
  const double one = ReduceScatterTime(grads / units, 2, c.intra);  // fp32: gathers move as many bytes
  EXPECT_REL(z3->dp_comm_total, 2 * units * 3 * one);
  EXPECT_GT(z3->dp_comm_total, 2 * units * 3 * c.intra.latency) << "at least the latency of each of its collectives";
}

// Where the collectives share the compute's cores (CPU ranks over Gloo), hidden traffic still
// costs compute: comm_compute_cost of it is added to what the step waits for, and all of it
// at 1. ZeRO 3, whose per-unit gathers the model otherwise hides, pays for them then.
TEST(CostModelTest, HiddenTrafficCostsComputeWhereTheProfileSaysItShares) {
  PlanInput in = Small();
  in.dp = 2;
  in.zero = 3;
  in.microbatches = 4;
  ClusterSpec c = Simple();
  c.gpus_per_node = 2;
  c.intra = {1e9, 0};
  auto free = PredictStep(in, c);
  ASSERT_TRUE(free.ok());
  ASSERT_LT(free->dp_comm, free->dp_comm_total) << "the case needs hidden traffic";
  for (double cost : {0.5, 1.0}) {
    ClusterSpec shared = c;
    shared.device.comm_compute_cost = cost;
    auto r = PredictStep(in, shared);
    ASSERT_TRUE(r.ok());
    const double hidden = free->dp_comm_total - free->dp_comm;
    EXPECT_REL(r->dp_comm, free->dp_comm + cost * hidden);
    EXPECT_REL(r->step, free->step + cost * hidden);
    EXPECT_REL(r->dp_comm_total, free->dp_comm_total);
  }
  // The profile file carries it, and refuses a negative one by name.
  DeviceProfile d = c.device;
  d.comm_compute_cost = 0.75;
  std::string yaml = ProfileYaml(d);
  auto p = ParseProfile(yaml);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->comm_compute_cost, 0.75);
  const size_t at = yaml.find("comm_compute_cost: 0.75");
  ASSERT_NE(at, std::string::npos) << yaml;
  auto bad = ParseProfile(yaml.replace(at, std::string("comm_compute_cost: 0.75").size(), "comm_compute_cost: -1"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("comm_compute_cost"), std::string::npos) << bad.status();
}

TEST(CostModelTest, OffloadRunsAdamWOnTheHostPipelinedWithItsCopies) {
  PlanInput in = Small();
  in.dp = 2;
  in.zero = 1;
  in.offload_optimizer = true;
  ClusterSpec c = Simple();
  c.device.host_adamw = 1e8;   // parameters/s
  c.device.host_link = 10e9;   // bytes/s
  const double shard = 110336 / 2.0, adam = shard / 1e8, copy = shard * 4 / 10e9;
  const double norm = 110336 * 4 / 1e11;  // the gradient norm, on the device
  EXPECT_REL(PredictStep(in, c)->optimizer, norm + adam + (adam + 2 * copy));  // one chunk: no overlap
}

TEST(CostModelTest, ClusterFilesParseAndNameTheirErrors) {
  auto c = ParseCluster(R"(
name: two-by-h100
gpus_per_node: 2
gpu: h100
intra_node: {bandwidth_gbs: 100, latency_us: 2}
inter_node: {bandwidth_gbs: 10, latency_us: 8}
)");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->gpus_per_node, 2);
  EXPECT_EQ(c->device.name, "h100");
  EXPECT_EQ(c->intra.bandwidth, 100e9);
  EXPECT_EQ(c->inter.latency, 8e-6);
  // Written and read back: the same cluster, the device inline.
  auto again = ParseCluster(ClusterYaml(*c));
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << ClusterYaml(*c);
  EXPECT_EQ(again->device.gemm_bwd[0], c->device.gemm_bwd[0]);
  EXPECT_EQ(again->device.memory_bandwidth, c->device.memory_bandwidth);
  EXPECT_EQ(again->inter.bandwidth, 10e9);
  EXPECT_EQ(again->intra_p2p.bandwidth, 0) << "no point-to-point path given: none written";
  c->intra_p2p = {4e9, 20e-6};
  auto p2p = ParseCluster(ClusterYaml(*c));
  ASSERT_TRUE(p2p.ok()) << p2p.status();
  EXPECT_EQ(p2p->intra_p2p.bandwidth, 4e9);
  EXPECT_DOUBLE_EQ(p2p->intra_p2p.latency, 20e-6);

  auto bad = ParseCluster("gpus_per_node: 8\ngpu: h100\nintra_node: {bandwidth_gbs: 100, latency_us: 2}\n"
                          "inter_node: {bandwidth_gbs: -1, latency_us: 8}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("inter_node.bandwidth_gbs"), std::string::npos) << bad.status();
  auto none = ParseCluster("gpus_per_node: 8\nintra_node: {bandwidth_gbs: 1, latency_us: 1}\n"
                           "inter_node: {bandwidth_gbs: 1, latency_us: 1}\n");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("gpu"), std::string::npos) << none.status();
  auto typo = ParseProfile("name: x\nmemory_gb: 1\npeak_tflops: 1\nmemory_gbs: 1\nunfused_attention: true\n"
                           "gemm_tflops: {bf16_fwd: 1, bf16_bwd: 1, fp32_fwd: 1, fp32_bwd: 1, fp64: 2}\n");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("gemm_tflops.fp64"), std::string::npos) << typo.status();
  EXPECT_TRUE(ClusterPreset("dgx-h100").ok());
  EXPECT_FALSE(LoadCluster("dgx-h1000").ok());
}

GPTConfig Llama70B() {
  GPTConfig c;
  c.arch = Arch::kLlama;
  c.n_layer = 80, c.n_embd = 8192, c.n_head = 64, c.n_kv_head = 8, c.ffn_hidden = 28672;
  c.vocab_size = 128256, c.max_seq_len = 4096;
  return c;
}

// Issue 39, item 6: for Llama 3 70B on 64 H100s (global batch 512, T 4096, bf16), Recommend
// (memory alone) picks tp 2 x dp 32, ZeRO 3, which gathers and reduces every micro-batch: 408
// GB a micro-batch per GPU. On DGX H100 (8 x 400 Gb/s a node) the backward's 4 s hide most of
// it; on a cluster with one 100 Gb/s port per node they do not, and the ranking puts a layout
// with less data-parallel traffic first.
TEST(CostModelTest, TheMemoryRecommendationFor70BIsRankedByItsTraffic) {
  PlanInput in;
  in.model = Llama70B();
  in.seq_len = 4096;
  in.precision = Precision::kAutocast;
  in.device_memory = 80e9;
  auto rec = Recommend(in, 64, 512);
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ(rec->tp, 2);
  EXPECT_EQ(rec->dp, 32);
  EXPECT_EQ(rec->zero, 3);
  ClusterSpec slow = *ClusterPreset("dgx-h100");
  slow.inter.bandwidth = 12.5e9 / 8;  // one 100 Gb/s port shared by a node's 8 GPUs
  auto r = PredictStep(*rec, slow);
  ASSERT_TRUE(r.ok());
  EXPECT_GT(r->dp_bytes, 1e12) << "terabytes a step";
  auto ranked = RankLayouts(in, slow, 64, 512, 3);
  ASSERT_TRUE(ranked.ok()) << ranked.status();
  const RankedLayout& best = (*ranked)[0];
  EXPECT_FALSE(best.in.zero == 3 && best.in.dp == 32) << "the top layout: tp " << best.in.tp << " pp " << best.in.pp;
  EXPECT_GT(best.cost.tokens_per_s, 1.5 * r->tokens_per_s);
  EXPECT_LE(best.plan.total(), 0.9 * 80e9);
  for (const RankedLayout& x : *ranked) EXPECT_LE(x.cost.tokens_per_s, best.cost.tokens_per_s);
}

// A Llama's grouped key/value heads on GPUs in 16 bits: cuDNN reads them as they are, so the
// ranked layouts' memory holds no repeated copy of them (PlanInput::grouped_attention, as
// PlanOfSpec sets it for a job on a cuda device); on a device whose attention is unfused, or
// in fp32, the heads are repeated.
TEST(CostModelTest, RankedLlamaLayoutsKeepNoRepeatedKeyValueHeadsOnGpus) {
  PlanInput in;
  in.model = Llama70B();
  in.seq_len = 4096;
  in.precision = Precision::kAutocast;
  const ClusterSpec h100 = *ClusterPreset("dgx-h100");
  // (cp 1: under context parallelism the ring's attention reads the grouped heads on any device.)
  auto ranked = RankLayouts(in, h100, 64, 512, 1, [](const PlanInput& x) { return x.cp == 1; });
  ASSERT_TRUE(ranked.ok()) << ranked.status();
  const RankedLayout& best = (*ranked)[0];
  EXPECT_TRUE(best.in.grouped_attention);
  PlanInput repeated = best.in;
  repeated.grouped_attention = false;
  auto with = MakePlan(best.in), without = MakePlan(repeated);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_EQ(with->total(), best.plan.total());
  EXPECT_LT(with->total(), without->total()) << "the repeated copy is counted only without grouped attention";
  ClusterSpec unfused = h100;
  unfused.device.unfused_attention = true;
  in.precision = Precision::kAutocast;
  auto r2 = RankLayouts(in, unfused, 64, 512, 1, [](const PlanInput& x) { return x.cp == 1; });
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_FALSE((*r2)[0].in.grouped_attention);
}

// Llama 3 405B's layers (126) over 16 pipeline stages: pp need not divide the layers (uneven
// stages: BalanceStages splits them 7, 8 x 14, 7), so the ranked layouts of 128 GPUs at tp 8
// (16 GPUs over tp) include pp 16, some of which fit an 80 GB H100. Fails if the search keeps
// only pp dividing the layers (126 = 2·3²·7: no pp 16).
TEST(CostModelTest, RankedLayoutsTakePipelinesThatDoNotDivideTheLayers) {
  PlanInput in;
  GPTConfig c = Llama70B();
  c.n_layer = 126, c.n_embd = 16384, c.n_head = 128, c.n_kv_head = 8, c.ffn_hidden = 53248;
  c.vocab_size = 128256;
  in.model = c;
  in.seq_len = 8192;
  in.precision = Precision::kAutocast;
  const ClusterSpec h100 = *ClusterPreset("dgx-h100");
  auto ranked = RankLayouts(in, h100, 128, 128, 1000, [](const PlanInput& x) { return x.tp == 8 && x.pp == 16; });
  ASSERT_TRUE(ranked.ok()) << ranked.status();
  ASSERT_FALSE(ranked->empty());
  for (const RankedLayout& x : *ranked) {
    EXPECT_EQ(x.in.pp, 16);
    EXPECT_LE(x.plan.total(), 0.9 * 80e9);
  }
}

// Published: Narayanan et al. 2021 (Megatron-LM on A100 clusters), Table 1, TFLOP/s per GPU
// by the paper's count, GPT with T 2048 and V 51,200, full recomputation, fp16, on DGX A100
// (the dgx-a100 preset, attention unfused as that Megatron ran it; micro-batch 1 assumed).
// Within 20% on every row (docs/perf/planner.md tables them).
TEST(CostModelTest, ReproducesMegatronsTable1Within20Percent) {
  struct Row {
    int heads, hidden, layers, tp, pp, gpus, batch;
    double published;
  };
  const Row rows[] = {{24, 2304, 24, 1, 1, 32, 512, 137},        {32, 3072, 30, 2, 1, 64, 512, 138},
                      {32, 4096, 36, 4, 1, 128, 512, 142},       {48, 6144, 40, 8, 1, 256, 1024, 135},
                      {64, 8192, 48, 8, 2, 512, 1536, 138},      {80, 10240, 60, 8, 4, 1024, 1792, 140},
                      {96, 12288, 80, 8, 8, 1536, 2304, 148},    {128, 16384, 96, 8, 16, 1920, 2160, 155},
                      {128, 20480, 105, 8, 35, 2520, 2520, 163}, {160, 25600, 128, 8, 64, 3072, 3072, 163}};
  ClusterSpec a100 = *ClusterPreset("dgx-a100");
  a100.device.unfused_attention = true;
  for (const Row& r : rows) {
    PlanInput in;
    GPTConfig c;
    c.n_layer = r.layers, c.n_head = r.heads, c.n_embd = r.hidden, c.vocab_size = 51200, c.max_seq_len = 2048;
    in.model = c;
    in.seq_len = 2048;
    in.precision = Precision::kMixed;
    in.recompute = Recompute::kFull;
    in.tp = r.tp, in.pp = r.pp, in.dp = r.gpus / (r.tp * r.pp);
    in.microbatches = r.batch / in.dp;
    auto p = PredictStep(in, a100);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_NEAR(p->flops_per_gpu / 1e12, r.published, 0.2 * r.published) << r.hidden << " wide, " << r.layers << " layers";
  }
}


// Published: MosaicML's MPT training benchmarks, github.com/mosaicml/llm-foundry,
// scripts/train/benchmarking/README.md, table "H100 80GB BF16": tokens/s per GPU ("Throughput
// (T/s/GPU)") and MFU of MPT models trained data parallel only with FSDP FULL_SHARD (= ZeRO 3;
// its "PURE" mixed precision gathers bf16 parameters and reduces bf16 gradients: Gantry's
// `mixed`), activation checkpointing on or off (recompute full or none), micro-batch and
// gradient accumulation as each row gives them, on 8 to 64 H100s, 8 a node; predicted with the
// dgx-h100 preset as it is. Shapes from scripts/train/yamls/pretrain/mpt-*.yaml (d_model,
// n_heads, n_layers, expansion_ratio 4, vocab_size 50,368) on Gantry's gpt2 arch, which MPT is
// but for its biases: MPT has none, and the gpt2 arch's bias passes (a few memory-bound bytes a
// token) make the prediction slower, not faster. These runs kept learned positions (the table's
// NumParams grow by T x d_model with the sequence, as gpt2's wpe; ALiBi, had it been on, adds a
// bias to the scores inside the attention kernel: no FLOPs either side counts). MFU on both
// sides is PaLM's (6N + 12·L·T·C a token, over 989 TFLOP/s).
//
// Rows chosen by a rule fixed before predicting: every row of that table with sequence length
// 2048 (the yamls' own; 20 rows), and every other 7b and 13b row (T 1,024 to 65,536; 9 rows).
// Within 20%: 18 of the 29 (12 of the 20 at T 2048). The model over-predicts the other 11 by
// 21% to 42% (docs/perf/planner.md gives the reasons: MosaicML's runs without checkpointing at 35-46%
// HFU where its checkpointed runs reach 48-59%; FSDP's gathers as 10-40% of the compute time,
// which the model hides for free; the longest sequences). `within` pins that table both
// ways: a row that changes sides must change docs/perf/planner.md too.
TEST(CostModelTest, ReproducesMosaicMlMptH100TableWhereDocumented) {
  struct Row {
    const char* model;
    int layers, d_model, heads, seq, gpus, mb, accum;
    bool checkpointing;
    double published_tokens, published_mfu;  // per GPU; %
    bool within;                             // documented within 20% (docs/perf/planner.md)
  };
  const Row rows[] = {
      // T 2048: every row.
      {"70b", 80, 8192, 64, 2048, 64, 8, 4, true, 1039, 42.57, true},
      {"70b", 80, 8192, 64, 2048, 32, 2, 16, true, 882, 36.15, false},
      {"30b", 48, 7168, 56, 2048, 32, 14, 3, true, 2308, 43.92, true},
      {"30b", 48, 7168, 56, 2048, 16, 10, 3, true, 2263, 43.07, true},
      {"30b", 48, 7168, 56, 2048, 8, 3, 21, true, 2002, 38.11, true},
      {"13b", 40, 5120, 40, 2048, 64, 2, 1, false, 4800, 39.86, false},
      {"13b", 40, 5120, 40, 2048, 32, 2, 1, false, 4811, 39.95, false},
      {"13b", 40, 5120, 40, 2048, 16, 2, 1, false, 4767, 39.58, false},
      {"13b", 40, 5120, 40, 2048, 8, 2, 1, false, 4792, 39.79, false},
      {"7b", 32, 4096, 32, 2048, 8, 6, 1, false, 10643, 46.44, true},
      {"3b", 32, 2560, 20, 2048, 64, 6, 3, false, 22525, 40.8, false},
      {"3b", 32, 2560, 20, 2048, 32, 6, 3, false, 23021, 41.7, false},
      {"3b", 32, 2560, 20, 2048, 16, 10, 3, false, 24142, 43.73, true},
      {"1b", 24, 2048, 16, 2048, 64, 20, 1, false, 44402, 40.85, true},
      {"1b", 24, 2048, 16, 2048, 32, 20, 1, false, 45130, 41.52, true},
      {"1b", 24, 2048, 16, 2048, 16, 20, 1, false, 46037, 42.36, true},
      {"1b", 24, 2048, 16, 2048, 8, 14, 1, false, 45455, 41.82, true},
      {"760m", 24, 1536, 12, 2048, 32, 24, 1, false, 67971, 37.57, true},
      {"760m", 24, 1536, 12, 2048, 16, 24, 1, false, 68551, 37.89, true},
      {"760m", 24, 1536, 12, 2048, 8, 24, 2, false, 63147, 34.9, false},
      // 7b and 13b: every other row.
      {"13b", 40, 5120, 40, 32768, 8, 1, 3, true, 1976, 31.68, false},
      {"13b", 40, 5120, 40, 16384, 8, 3, 3, true, 2985, 35.55, true},
      {"13b", 40, 5120, 40, 4096, 8, 10, 3, true, 4717, 41.6, true},
      {"13b", 40, 5120, 40, 1024, 8, 40, 3, true, 5502, 44.27, true},
      {"7b", 32, 4096, 32, 65536, 8, 1, 2, true, 1956, 28.59, false},
      {"7b", 32, 4096, 32, 32768, 8, 2, 2, true, 3318, 30.94, false},
      {"7b", 32, 4096, 32, 8192, 8, 8, 2, true, 6935, 37.14, true},
      {"7b", 32, 4096, 32, 4096, 8, 16, 2, true, 8611, 40.42, true},
      {"7b", 32, 4096, 32, 1024, 8, 64, 2, true, 10203, 42.83, true},
  };
  const ClusterSpec h100 = *ClusterPreset("dgx-h100");
  for (const Row& r : rows) {
    PlanInput in;
    GPTConfig c;
    c.n_layer = r.layers, c.n_embd = r.d_model, c.n_head = r.heads, c.vocab_size = 50368, c.max_seq_len = r.seq;
    in.model = c;
    in.seq_len = r.seq;
    in.precision = Precision::kMixed;
    in.recompute = r.checkpointing ? Recompute::kFull : Recompute::kNone;
    in.dp = r.gpus, in.zero = 3;
    in.micro_batch = r.mb, in.microbatches = r.accum;
    auto p = PredictStep(in, h100);
    ASSERT_TRUE(p.ok()) << p.status();
    const double error = p->tokens_per_s_per_gpu / r.published_tokens - 1;
    std::printf("MPT %-4s T %5d GPUs %2d mb %2d x %2d ckpt %d: published %6.0f tok/s/GPU (MFU %.2f%%), predicted %6.0f "
                "(MFU %.1f%%), %+.1f%%\n",
                r.model, r.seq, r.gpus, r.mb, r.accum, r.checkpointing, r.published_tokens, r.published_mfu,
                p->tokens_per_s_per_gpu, 100 * p->mfu, 100 * error);
    const std::string what = std::string("MPT ") + r.model + " T " + std::to_string(r.seq) + " on " +
                             std::to_string(r.gpus) + " GPUs, mb " + std::to_string(r.mb);
    // The two sides count MFU alike (PaLM's, 989 TFLOP/s), but for MosaicML's N, which also
    // holds the learned positions (T·C, an embedding lookup Gantry counts no FLOPs for; 3.9% of
    // N at 7b T 65,536): with them added, its error is the throughput's, to the published
    // figures' rounding.
    const double mfu = p->mfu + p->tokens_per_s_per_gpu * 6.0 * r.seq * r.d_model / h100.device.peak_flops;
    EXPECT_NEAR(100 * mfu / r.published_mfu, p->tokens_per_s_per_gpu / r.published_tokens, 0.005) << what;
    if (r.within) {
      EXPECT_LE(std::abs(error), 0.2) << what << ": documented within 20% in docs/perf.md";
    } else {
      EXPECT_GT(error, 0.2) << what << ": documented as over-predicted by more than 20% in docs/perf.md";
    }
  }
}

// parallel: auto (jobspec/auto_layout.h): the cost model's first layout, kept to what the spec
// states and bounds, as a spec the worker can read; refused with the memory it would need.
GPTConfig Llama405B() {
  GPTConfig c;
  c.arch = Arch::kLlama;
  c.n_layer = 126, c.n_embd = 16384, c.n_head = 128, c.n_kv_head = 8, c.ffn_hidden = 53248;
  c.vocab_size = 128256, c.max_seq_len = 131072;
  return c;
}

// Published: "The Llama 3 Herd of Models" (Llama Team, AI @ Meta, arXiv 2407.21783 v3, 23 Nov.
// 2024), §3.3.2, Table 4 (p. 10): Llama 3 405B's pre-training layouts on 8,192 and 16,384 H100s
// at tp 8, pp 16, cp 1 or 16, T 8,192 or 131,072, 16M tokens a step, and their BF16 TFLOP/s per
// GPU (430 is its 43% MFU of 989). What the paper states and the prediction uses: the
// interleaved schedule (p. 11; V chunks a rank, V not given), no activation checkpointing at T
// 8,192 (p. 11: "pre-trained on sequences of 8K tokens without activation checkpointing"), and
// an all-gather context parallelism of GQA's K and V, its latency exposed (p. 11-12:
// CpExchange::kAllGather, the key/value heads only). Assumed: vp 4 (the largest the search
// considers; docs/perf/planner.md gives vp 1 and 2 too), no recomputation at T 131,072 as at 8K,
// micro-batch 1. The rest on the dgx-h100 preset as it is: textbook mixed precision, sequence
// parallel, ZeRO 1, dp = GPUs / (tp·cp·pp), micro-batches = the table's batch size per DP.
// Within 20% on every row.
TEST(CostModelTest, ReproducesLlama3Table4Within20Percent) {
  struct Row {
    int gpus, cp, dp, seq, per_dp;
    double published;
  };
  const Row rows[] = {{8192, 1, 64, 8192, 32, 430}, {16384, 1, 128, 8192, 16, 400}, {16384, 16, 8, 131072, 16, 380}};
  const ClusterSpec h100 = *ClusterPreset("dgx-h100");
  for (const Row& r : rows) {
    PlanInput in;
    in.model = Llama405B();
    in.seq_len = r.seq;
    in.precision = Precision::kMixed;
    in.tp = 8, in.pp = 16, in.vp = 4, in.cp = r.cp, in.dp = r.dp;
    ASSERT_EQ(in.tp * in.pp * in.cp * in.dp, r.gpus);
    in.sequence_parallel = true;
    in.zero = 1;
    in.microbatches = r.per_dp;
    in.cp_exchange = CpExchange::kAllGather;
    auto p = PredictStep(in, h100);
    ASSERT_TRUE(p.ok()) << p.status();
    std::printf("Llama 3 Table 4, %5d GPUs cp %2d: published %.0f TFLOP/s, predicted %.1f (%+.1f%%), cp exposed %.2f%%\n",
                r.gpus, r.cp, r.published, p->mfu * 989, 100 * (p->mfu * 989 / r.published - 1),
                100 * p->cp_comm / p->step);
    EXPECT_NEAR(p->mfu * 989, r.published, 0.2 * r.published) << r.gpus << " GPUs, cp " << r.cp;
    if (r.cp > 1) {
      // The paper: the all-gather's exposed latency is small beside the attention (GQA's K/V).
      EXPECT_GT(p->cp_comm, 0) << "the all-gather's latency is exposed";
      EXPECT_LT(p->cp_comm, 0.01 * p->step) << "an 8K-row block's K/V heads beside its attention";
    }
  }
}

// Published: torchtitan's Llama 3.1 benchmarks on H100s (github.com/pytorch/torchtitan,
// benchmarks/llama3_h100_202412_torchtitan.md, Dec. 2024, torchtitan 9dec370 and torch 1963fc8;
// H100 96 GB HBM2e at 500 W, Float8 GEMMs, torch.compile, full activation checkpointing),
// tokens/s per GPU, predicted on the dgx-h100 preset in bf16 (Gantry has no Float8 rate; the
// card's 500 W and HBM2e are not the preset's either). Their context parallelism as that
// torchtitan ran it: torch's context_parallel with rotate method "allgather" (torchtitan's
// default, config_manager.py) on K and V repeated to every query head (model.py's repeat_kv
// comes before scaled_dot_product_attention, where torch's CP takes them): CpExchange::kAllGather
// with cp_repeated_kv.
//
// 405B on 512 GPUs, FSDP (ZeRO 3) x tp 8 x pp 8. Table 5: T 8,192, local batch 32 in 8
// micro-batches (torchtitan's default: pp of them), 1F1B 100, interleaved 1F1B (its default 2
// stages a rank: vp 2) 128. Table 6 (1F1B, local batch 8 in 8 micro-batches): T 32,768·cp over
// cp 1, 2, 4, 8 (FSDP 8/cp): 76, 47, 31, 16. Within 20% but for the longest row, over-predicted
// by 20.4% (+33.0% with Gantry's ring of the key/value heads in their place: the all-gather of
// 16 repeated heads over the network is exposed beyond the first block's attention at cp 8; the
// rest grows with attention's share of the step, docs/perf/planner.md); the interleaved
// schedule's gain over 1F1B within 20% of the published 1.28.
TEST(CostModelTest, ReproducesTorchtitans405BScheduleAndContextParallelTables) {
  struct Row {
    int vp, cp, seq, mb;
    double published;
    bool within;  // else over-predicted by more than 20%
  };
  const Row rows[] = {{1, 1, 8192, 4, 100, true},   {2, 1, 8192, 4, 128, true},  {1, 1, 32768, 1, 76, true},
                      {1, 2, 65536, 1, 47, true},   {1, 4, 131072, 1, 31, true}, {1, 8, 262144, 1, 16, false}};
  const ClusterSpec h100 = *ClusterPreset("dgx-h100");
  double predicted[2] = {0, 0};
  for (const Row& r : rows) {
    PlanInput in;
    in.model = Llama405B();
    in.model->max_seq_len = std::max(in.model->max_seq_len, r.seq);
    in.seq_len = r.seq;
    in.precision = Precision::kMixed;
    in.tp = 8, in.pp = 8, in.vp = r.vp, in.cp = r.cp, in.dp = 8 / r.cp;
    in.sequence_parallel = true;
    in.zero = 3;
    in.recompute = Recompute::kFull;
    in.micro_batch = r.mb, in.microbatches = 8;
    in.cp_exchange = CpExchange::kAllGather, in.cp_repeated_kv = true;
    auto p = PredictStep(in, h100);
    ASSERT_TRUE(p.ok()) << p.status();
    const double err = p->tokens_per_s_per_gpu / r.published - 1;
    std::printf("torchtitan 405B vp %d cp %d T %6d: published %5.1f tok/s/GPU, predicted %5.1f (%+.1f%%), bubble "
                "%.1f%%, cp exposed %.2f%%\n",
                r.vp, r.cp, r.seq, r.published, p->tokens_per_s_per_gpu, 100 * err, 100 * p->bubble / p->step,
                100 * p->cp_comm / p->step);
    const std::string what = "vp " + std::to_string(r.vp) + " cp " + std::to_string(r.cp) + " T " + std::to_string(r.seq);
    if (r.within) {
      EXPECT_LE(std::abs(err), 0.2) << what << ": " << p->tokens_per_s_per_gpu;
    } else {
      EXPECT_GT(err, 0.2) << what << ": " << p->tokens_per_s_per_gpu;
    }
    if (r.cp == 8) {
      // The all-gather of the repeated K/V is what the ring of the key/value heads hides: it
      // costs this row more than 3% of the step (the ring's exposed share is under 0.1%).
      PlanInput ring = in;
      ring.cp_exchange = CpExchange::kRing, ring.cp_repeated_kv = false;
      auto q = PredictStep(ring, h100);
      ASSERT_TRUE(q.ok()) << q.status();
      EXPECT_GT(p->cp_comm, 0.03 * p->step) << what;
      EXPECT_LT(q->cp_comm, 0.001 * q->step) << what;
      EXPECT_GT(q->tokens_per_s_per_gpu, 1.08 * p->tokens_per_s_per_gpu) << what;
    }
    if (r.seq == 8192) predicted[r.vp - 1] = p->tokens_per_s_per_gpu;
  }
  EXPECT_NEAR(predicted[1] / predicted[0], 1.28, 0.2 * 1.28) << "the interleaved schedule's gain";
}

// Published: the same document's Table 2: Llama 3.1 8B on 8 GPUs (one node), FSDP x cp (FSDP
// 8/cp), local batch 1, full activation checkpointing, torch.compile and Float8: T 32,768·cp at
// cp 1, 2, 4, 8: 3,890, 2,540, 1,071, 548 tokens/s per GPU. Predicted as the 405B rows (bf16,
// dgx-h100, torchtitan's all-gather of repeated K/V). Within 20% at cp 1 and 2; over-predicted
// by more than 20% at cp 4 and 8 (T 131,072 and 262,144). Inside a node the exchange is hidden
// either way (under 1% of the step), so the miss is not the context-parallel exchange: the
// published rate falls 2.4x from cp 2 to cp 4 where the attention's FLOPs per token grow 1.5x
// (docs/perf/planner.md). `within` pins the rows both ways.
TEST(CostModelTest, ReproducesTorchtitans8BContextParallelTableWhereDocumented) {
  struct Row {
    int cp;
    double published;
    bool within;
  };
  const Row rows[] = {{1, 3890, true}, {2, 2540, true}, {4, 1071, false}, {8, 548, false}};
  const ClusterSpec h100 = *ClusterPreset("dgx-h100");
  for (const Row& r : rows) {
    PlanInput in;
    GPTConfig c;
    c.arch = Arch::kLlama;
    c.n_layer = 32, c.n_embd = 4096, c.n_head = 32, c.n_kv_head = 8, c.ffn_hidden = 14336;
    c.vocab_size = 128256, c.max_seq_len = 32768 * r.cp;
    in.model = c;
    in.seq_len = 32768 * r.cp;
    in.precision = Precision::kMixed;
    in.cp = r.cp, in.dp = 8 / r.cp, in.zero = 3, in.recompute = Recompute::kFull;
    in.cp_exchange = CpExchange::kAllGather, in.cp_repeated_kv = true;
    auto p = PredictStep(in, h100);
    ASSERT_TRUE(p.ok()) << p.status();
    const double err = p->tokens_per_s_per_gpu / r.published - 1;
    std::printf("torchtitan 8B cp %d T %6d: published %4.0f tok/s/GPU, predicted %4.0f (%+.1f%%), cp exposed %.2f%%\n",
                r.cp, in.seq_len, r.published, p->tokens_per_s_per_gpu, 100 * err, 100 * p->cp_comm / p->step);
    EXPECT_LT(p->cp_comm, 0.01 * p->step) << "cp " << r.cp << ": NVLink hides the exchange";
    if (r.within) {
      EXPECT_LE(std::abs(err), 0.2) << "cp " << r.cp << ": documented within 20% in docs/perf/planner.md";
    } else {
      EXPECT_GT(err, 0.2) << "cp " << r.cp << ": documented as over-predicted by more than 20% in docs/perf/planner.md";
    }
  }
}

// Published: NeMo AutoModel's performance summary (github.com/NVIDIA-NeMo/Automodel,
// docs/performance-summary.mdx, read at 36044ad3d, 22 Aug. 2026; the row since 2013a4dd6, 10 Apr.
// 2026), table "Pre-Training Performance", "System: DGX-H100, Precision: BF16", row "Llama3 70B":
// 64 GPUs, GBS 128, MBS 1, LBS 1, GA 4, T 8,192, TP 1, PP 1, CP 2, FSDP 32, 18.90 s a step,
// 866.77 tokens/s per GPU. Its recipe (examples/llm_benchmark/llama3_3/
// custom_llama3_1_70b_pretrain_benchmark_8nodes.yaml) states FSDP2 (ZeRO 3), dp 32 = 64 / (tp 1
// x cp 2), activation checkpointing (Recompute::kFull), torch.compile, no sequence parallelism;
// its CP is torch's context_parallel with rotate method "allgather" (nemo_automodel/components/
// distributed/cp_utils.py, make_cp_batch_and_ctx): CpExchange::kAllGather. The only dense row of
// that table (the others are MoE models with DeepEP or FlexAttention, whose routing and kernels
// Gantry does not model), and its only row with cp > 1. Not stated, so taken both ways: whether
// the K/V that travel are the 8 key/value heads (transformers' SDPA with enable_gqa once the CP
// hook drops the mask) or repeated to the 64 query heads (cp_repeated_kv); both within 20%. The
// rest on the dgx-h100 preset as it is, textbook mixed precision (FSDP2's bf16 parameters and
// fp32 master). No interleaved schedule (pp 1).
TEST(CostModelTest, ReproducesAutoModelsContextParallelLlama70BRowWithin20Percent) {
  const double published = 866.77;  // tokens/s per GPU
  // The row's own columns agree: GBS x T / (GPUs x tokens/s per GPU) is its step time.
  EXPECT_NEAR(128.0 * 8192 / (64 * published), 18.90, 0.005);
  const ClusterSpec h100 = *ClusterPreset("dgx-h100");
  for (bool repeated : {false, true}) {
    PlanInput in;
    in.model = Llama70B();
    in.model->max_seq_len = 8192;
    in.seq_len = 8192;
    in.precision = Precision::kMixed;
    in.cp = 2, in.dp = 32, in.zero = 3, in.recompute = Recompute::kFull;
    ASSERT_EQ(in.tp * in.pp * in.cp * in.dp, 64);
    in.micro_batch = 1, in.microbatches = 4;
    ASSERT_EQ(in.dp * in.micro_batch * in.microbatches, 128) << "the row's global batch";
    in.cp_exchange = CpExchange::kAllGather, in.cp_repeated_kv = repeated;
    auto p = PredictStep(in, h100);
    ASSERT_TRUE(p.ok()) << p.status();
    const double err = p->tokens_per_s_per_gpu / published - 1;
    std::printf("AutoModel Llama3 70B cp 2 (%s K/V): published %.1f tok/s/GPU (18.90 s), predicted %.1f (%.2f s), "
                "%+.1f%%, cp exposed %.2f%%\n",
                repeated ? "64 repeated" : "8 key/value heads'", published, p->tokens_per_s_per_gpu, p->step, 100 * err,
                100 * p->cp_comm / p->step);
    EXPECT_LE(std::abs(err), 0.2) << (repeated ? "repeated K/V" : "key/value heads");
    // The cp pair are neighbouring ranks of one node: over NVLink the gather is nearly hidden.
    EXPECT_LT(p->cp_comm, 0.02 * p->step);
  }
}

TEST(AutoLayoutTest, ChoosesTheCostModelsFirstLayoutWithinWhatTheSpecStates) {
  const std::string model =
      "model: {n_layer: 4, n_head: 4, n_embd: 256, vocab_size: 512, seq_len: 128}\ndata: {train: t.bin}\n"
      "train: {steps: 10, global_batch: 16, lr: 1.0e-3}\n";
  auto spec = ParseJobSpec(model + "parallel: auto\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::string why;
  ClusterSpec cluster = DefaultCluster("cpu", "", &why);
  EXPECT_NE(why.find("generic cpu profile"), std::string::npos) << why;
  cluster.gpus_per_node = 4;
  auto choices = ChooseLayouts(*spec, cluster, 4, 3);
  ASSERT_TRUE(choices.ok()) << choices.status();
  ASSERT_EQ(choices->size(), 3u);
  auto ranked = RankLayouts(PlanOfSpec(*spec), cluster, 4, 16, 1);
  ASSERT_TRUE(ranked.ok()) << ranked.status();
  const PlanInput& best = ranked->front().in;
  const JobSpec& chosen = choices->front().spec;
  EXPECT_FALSE(chosen.auto_layout());
  EXPECT_EQ(chosen.parallel.dp, best.dp);
  EXPECT_EQ(chosen.parallel.tp, best.tp);
  EXPECT_EQ(chosen.parallel.pp, best.pp);
  EXPECT_EQ(chosen.parallel.zero_stage, best.zero);
  EXPECT_EQ(chosen.train.micro_batch, best.micro_batch);
  EXPECT_EQ(chosen.recompute(), best.recompute);
  EXPECT_EQ(chosen.world_size(), 4);
  EXPECT_EQ(chosen.train.global_batch, 16) << "the global batch is the user's";
  EXPECT_DOUBLE_EQ(choices->front().ranked.cost.tokens_per_s, ranked->front().cost.tokens_per_s);
  for (size_t i = 1; i < choices->size(); ++i) {
    EXPECT_LE((*choices)[i].ranked.cost.tokens_per_s, (*choices)[i - 1].ranked.cost.tokens_per_s);
  }
  const std::string line = DescribeChoice(choices->front());
  for (const char* part : {"dp ", " x tp ", "ZeRO ", "micro_batch ", "predicted step ", "tokens/s", "MFU ", "GB per worker of 16 GB"}) {
    EXPECT_NE(line.find(part), std::string::npos) << part << ": " << line;
  }
  // Stated keys are kept and bounds hold, in every choice.
  auto fixed = ParseJobSpec(model + "parallel: {auto: true, zero_stage: 2, max_tp: 1, max_pp: 1}\n");
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  auto kept = ChooseLayouts(*fixed, cluster, 4, 5);
  ASSERT_TRUE(kept.ok()) << kept.status();
  for (const LayoutChoice& c : *kept) {
    EXPECT_EQ(c.spec.parallel.zero_stage, 2);
    EXPECT_EQ(c.spec.parallel.tp, 1);
    EXPECT_EQ(c.spec.parallel.pp, 1);
    EXPECT_EQ(c.spec.parallel.dp, 4);
  }
  // Not auto: refused.
  auto plain = ParseJobSpec("model: {n_layer: 4, n_head: 4, n_embd: 256, vocab_size: 512, seq_len: 128}\n"
                            "data: {train: t.bin}\ntrain: {steps: 10, micro_batch: 1, lr: 1.0e-3}\n");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(ChooseLayouts(*plain, cluster, 4, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

// RankLayouts considers context parallelism and the interleaved schedule within its bound (cp
// a power of two up to 32 at micro-batch 1 only, T/cp >= 1,024; vp 1, 2 or 4 with pp > 1 and
// the micro-batches a multiple of pp): Llama 3 70B at T 32,768 on 64 H100s is fastest split over
// cp ranks; at T 4,096 on 256 the interleaved schedule is among the first. Fails without cp and
// vp in the search.
TEST(CostModelTest, RankedLayoutsConsiderContextParallelismAndTheInterleavedScheduleWithinTheirBound) {
  const ClusterSpec h100 = *ClusterPreset("dgx-h100");
  auto bounded = [](const RankedLayout& x) {
    const bool cp = x.in.cp == 1 || (x.in.micro_batch == 1 && x.in.cp <= 32 && x.in.seq_len / x.in.cp >= 1024);
    const bool vp = x.in.vp == 1 || ((x.in.vp == 2 || x.in.vp == 4) && x.in.pp > 1 && x.in.microbatches % x.in.pp == 0);
    return cp && vp;
  };
  PlanInput in;
  in.model = Llama70B();
  in.model->max_seq_len = 32768;
  in.seq_len = 32768;
  in.precision = Precision::kAutocast;
  auto lng = RankLayouts(in, h100, 64, 64, 5);
  ASSERT_TRUE(lng.ok()) << lng.status();
  EXPECT_GT(lng->front().in.cp, 1) << "at 32K tokens the sequence is split";
  for (const RankedLayout& x : *lng) {
    EXPECT_TRUE(bounded(x)) << "cp " << x.in.cp << " mb " << x.in.micro_batch << " vp " << x.in.vp;
    EXPECT_EQ(x.in.tp * x.in.cp * x.in.pp * x.in.dp, 64);
  }
  in.seq_len = 4096;
  auto pipe = RankLayouts(in, h100, 256, 256, 6);
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  bool interleaved = false;
  for (const RankedLayout& x : *pipe) {
    EXPECT_TRUE(bounded(x)) << "cp " << x.in.cp << " mb " << x.in.micro_batch << " vp " << x.in.vp;
    interleaved = interleaved || x.in.vp > 1;
  }
  EXPECT_TRUE(interleaved) << "no interleaved layout among the first six";
}

// parallel: auto takes the interleaved schedule's chunks into the chosen spec
// (parallel.virtual_stages, which ParseJobSpec accepts), and places at cp 1 while the job spec
// states no cp.
// parallel: auto's choice is a spec that states it: the interleaved schedule's chunks and,
// where the ring's blocks run at the rates the cost model prices, context parallelism: on the
// cpu, and on a cuda kind for a 16-bit model (its blocks on cuDNN); never for an fp32 model on
// a cuda kind (the untiled fp32 block kernels). Each chosen spec parses back as it is (the job
// spec's rules hold for it).
TEST(AutoLayoutTest, TheChosenSpecCarriesTheChunksAndTheContextParallelismWhereItRuns) {
  for (const auto& [device, precision] : std::vector<std::pair<std::string, std::string>>{
           {"cpu", "fp32"}, {"cuda", "fp32"}, {"cuda", "bf16"}, {"cuda-emulated", "bf16"}}) {
    SCOPED_TRACE(device + " " + precision);
    const bool cp_runs = device == "cpu" || precision != "fp32";
    auto spec = ParseJobSpec(
        "model: {n_layer: 8, n_head: 4, n_embd: 256, vocab_size: 512, seq_len: 2048}\ndata: {train: t.bin}\n"
        "train: {steps: 10, global_batch: 32, lr: 1.0e-3, precision: " + precision +
        "}\nparallel: {auto: true, pp: 4}\nresources: {device: " + device + "}\n");
    ASSERT_TRUE(spec.ok()) << spec.status();
    std::string why;
    ClusterSpec cluster = DefaultCluster(device, "", &why);
    cluster.gpus_per_node = 8;
    auto choices = ChooseLayouts(*spec, cluster, 8, 400);  // every admitted layout, not only the fastest
    ASSERT_TRUE(choices.ok()) << choices.status();
    bool interleaved = false, context_parallel = false;
    for (const LayoutChoice& c : *choices) {
      EXPECT_EQ(c.spec.parallel.virtual_stages, c.ranked.in.vp);
      EXPECT_EQ(c.spec.parallel.cp, c.ranked.in.cp);
      EXPECT_EQ(c.spec.world_size(), 8);
      auto back = ParseJobSpec(ToYaml(c.spec));
      EXPECT_TRUE(back.ok()) << DescribeChoice(c) << ": " << back.status();
      if (c.ranked.in.vp > 1) {
        interleaved = true;
        EXPECT_NE(DescribeChoice(c).find("virtual_stages " + std::to_string(c.ranked.in.vp)), std::string::npos)
            << DescribeChoice(c);
      }
      if (c.ranked.in.cp > 1) {
        context_parallel = true;
        EXPECT_TRUE(cp_runs) << DescribeChoice(c);
        EXPECT_NE(DescribeChoice(c).find("cp " + std::to_string(c.ranked.in.cp)), std::string::npos)
            << DescribeChoice(c);
      }
    }
    EXPECT_TRUE(interleaved) << "no interleaved layout among the choices";
    EXPECT_EQ(context_parallel, cp_runs) << "cp among the choices where the ring's blocks run as priced";
  }
}

TEST(AutoLayoutTest, AModelThatFitsNoLayoutIsRefusedWithTheMemoryItNeeds) {
  auto spec = ParseJobSpec("model: {n_layer: 4, n_head: 4, n_embd: 256, vocab_size: 512, seq_len: 128}\n"
                           "data: {train: t.bin}\ntrain: {steps: 10, global_batch: 16, lr: 1.0e-3}\nparallel: auto\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::string why;
  ClusterSpec cluster = DefaultCluster("cpu", "", &why);
  cluster.device.memory = 1e6;  // 1 MB a worker
  auto none = ChooseLayouts(*spec, cluster, 2, 1);
  ASSERT_EQ(none.status().code(), absl::StatusCode::kNotFound) << none.status();
  const std::string m(none.status().message());
  EXPECT_NE(m.find("no layout of 2 GPUs fits 90% of 0.00 GB each"), std::string::npos) << m;
  EXPECT_NE(m.find("the least any needs is"), std::string::npos) << m;
  // The least it names (3 significant digits) is what a worker needs: with that much, it fits.
  const size_t at = m.find("the least any needs is ") + 23;
  const double need = std::stod(m.substr(at));
  cluster.device.memory = need * 1e9 / 0.9 * 1.01;  // above the rounding
  EXPECT_TRUE(ChooseLayouts(*spec, cluster, 2, 1).ok());
  cluster.device.memory = need * 1e9 / 0.9 * 0.99;
  EXPECT_FALSE(ChooseLayouts(*spec, cluster, 2, 1).ok());
}

TEST(AutoLayoutTest, DefaultClusterFollowsTheDeviceKindAndTheGpusName) {
  std::string why;
  EXPECT_EQ(DefaultCluster("cuda", "NVIDIA H200", &why).name, "dgx-h200");
  EXPECT_NE(why.find("the dgx-h200 preset for NVIDIA H200"), std::string::npos) << why;
  EXPECT_EQ(DefaultCluster("cuda", "NVIDIA A100-SXM4-80GB", &why).name, "dgx-a100");
  EXPECT_EQ(DefaultCluster("cuda", "NVIDIA L4", &why).name, "dgx-h100");
  EXPECT_NE(why.find("no preset for 'NVIDIA L4'"), std::string::npos) << why;
  EXPECT_TRUE(DefaultCluster("cpu", "", &why).device.unfused_attention) << "the cpu backend keeps the probabilities";
  EXPECT_FALSE(DefaultCluster("cuda-emulated", "cuda-emulated:0", &why).device.unfused_attention);
}

}  // namespace
}  // namespace gantry::jobspec
