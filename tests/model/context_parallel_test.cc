// Context parallelism (model/context_parallel.h): the balanced split of a sequence over cp
// ranks, and ring attention over cp ranks as threads of this process, each with a Gloo
// communicator on loopback and a communication thread, against the unsplit attention of the
// cpu backend (kernels/attention.h, with kernels/gqa.h's expansion for grouped-query heads).
#include "model/context_parallel.h"

#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "comm/gloo/gloo_communicator.h"
#include "kernels/attention.h"
#include "kernels/cast.h"
#include "kernels/gqa.h"
#include "kernels/rope.h"
#include "tests/counting_communicator.h"
#include "tests/test_util.h"

namespace gantry::model {
namespace {

using testing::RandomNormal;

TEST(CpShardingTest, EachRankHoldsChunkIAndItsMirror) {
  // T 16 over cp 4: 8 chunks of 2; rank i holds chunks i and 7 - i.
  const std::vector<std::vector<int>> want = {{0, 1, 14, 15}, {2, 3, 12, 13}, {4, 5, 10, 11}, {6, 7, 8, 9}};
  std::set<int> seen;
  for (int r = 0; r < 4; ++r) {
    auto s = CpSharding::Make(16, 4, r);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->rows(), 4);
    EXPECT_EQ(s->chunk(), 2);
    EXPECT_EQ(s->Positions(), want[static_cast<size_t>(r)]) << "rank " << r;
    for (int p : s->Positions()) EXPECT_TRUE(seen.insert(p).second) << "position " << p << " twice";
  }
  EXPECT_EQ(seen.size(), 16u);
}

TEST(CpShardingTest, EveryRankHasTheSameCausalWork) {
  // The (query, key) pairs under the causal mask a rank's rows see: position + 1 each.
  for (int cp : {2, 3, 4, 8}) {
    const int T = 2 * cp * 5;
    std::set<long> work;
    for (int r = 0; r < cp; ++r) {
      const auto s = *CpSharding::Make(T, cp, r);
      long pairs = 0;
      for (int p : s.Positions()) pairs += p + 1;
      work.insert(pairs);
    }
    EXPECT_EQ(work.size(), 1u) << "cp " << cp << ": ranks' causal work differs";
  }
}

TEST(CpShardingTest, TakeAndPutAreInverse) {
  const int B = 2, T = 24, w = 3, cp = 3;
  std::vector<float> full(static_cast<size_t>(B) * T * w), back(full.size(), -1.f);
  for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<float>(i);
  for (int r = 0; r < cp; ++r) {
    const auto s = *CpSharding::Make(T, cp, r);
    std::vector<float> local(static_cast<size_t>(B) * s.rows() * w);
    s.Take(full.data(), local.data(), B, w);
    // Local row i of sequence b is global row Position(i).
    for (int b = 0; b < B; ++b) {
      for (int i = 0; i < s.rows(); ++i) {
        EXPECT_EQ(local[(static_cast<size_t>(b) * s.rows() + i) * w + 1],
                  full[(static_cast<size_t>(b) * T + s.Position(i)) * w + 1]);
      }
    }
    s.Put(local.data(), back.data(), B, w);
  }
  EXPECT_EQ(back, full);
}

// RoPE at a rank's positions (kernels::rope_apply_at) rotates its rows as the unsplit
// sequence's RoPE rotates them there, bit for bit, forward and inverse.
TEST(CpShardingTest, RopeAtTheRowsPositionsIsTheUnsplitRope) {
  const int B = 2, T = 48, NH = 4, NKV = 2, hd = 8, W = (NH + 2 * NKV) * hd;
  std::vector<float> inv_freq(hd / 2);
  kernels::rope_inv_freq(inv_freq.data(), hd, 10000.f);
  const auto x = RandomNormal(static_cast<size_t>(B) * T * W, 3);
  for (bool inverse : {false, true}) {
    auto whole = x;
    kernels::rope_apply(whole.data(), B, T, NH, NKV, hd, inv_freq.data(), inverse);
    for (int cp : {2, 4}) {
      for (int r = 0; r < cp; ++r) {
        const auto s = *CpSharding::Make(T, cp, r);
        std::vector<float> mine(static_cast<size_t>(B) * s.rows() * W), want(mine.size());
        s.Take(x.data(), mine.data(), B, W);
        const std::vector<int> positions = s.Positions();
        kernels::rope_apply_at(mine.data(), B, s.rows(), positions.data(), NH, NKV, hd, inv_freq.data(), inverse);
        s.Take(whole.data(), want.data(), B, W);
        EXPECT_EQ(mine, want) << "cp " << cp << " rank " << r << (inverse ? " inverse" : "");
      }
    }
  }
}

TEST(CpShardingTest, RejectsWhatCannotBeSplit) {
  auto odd = CpSharding::Make(12, 4, 0);
  ASSERT_FALSE(odd.ok());
  EXPECT_TRUE(absl::StrContains(odd.status().message(), "sequence length 12 is not a positive multiple of 2·cp = 8"))
      << odd.status();
  EXPECT_TRUE(absl::StrContains(CpSharding::Make(16, 0, 0).status().message(), "cp 0")) << "cp 0";
  EXPECT_TRUE(absl::StrContains(CpSharding::Make(16, 2, 2).status().message(), "rank 2 is not one of cp 2"))
      << "rank past the group";
}

TEST(RingAttentionTest, RejectsAGroupThatIsNotTheShards) {
  const AttentionHeads heads{1, 2, 1, 4};
  std::vector<float> qkv(static_cast<size_t>(2) * heads.qkv_width()), out(2 * 8), lse(4);
  RingAttention alone(nullptr, *CpSharding::Make(4, 2, 0));
  absl::Status s = alone.Forward(out.data(), lse.data(), qkv.data(), heads);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  comm::SoloCommunicator solo;
  comm::CommThread thread(&solo);
  RingAttention wrong(&thread, *CpSharding::Make(4, 2, 1));
  s = wrong.Forward(out.data(), lse.data(), qkv.data(), heads);
  EXPECT_TRUE(absl::StrContains(s.message(), "rank 1 of cp 2 was given the communicator of rank 0 of 1")) << s;
  RingAttention one(nullptr, *CpSharding::Make(4, 1, 0));
  s = one.Forward(out.data(), lse.data(), qkv.data(), AttentionHeads{1, 3, 2, 4});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "3 query heads over 2 key/value heads")) << s;
}

// A rank that never arrives at the ring (connected, but waiting until rank 0 is done): rank
// 0's Forward fails with the exchange's error, naming it and the missing rank, within the
// group's timeout (0.3 s, and Gloo's grace for the other ranks' reports), not a hang.
TEST(RingAttentionTest, AMissingRankIsAnErrorNotAHang) {
  const AttentionHeads heads{1, 2, 1, 4};
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::promise<void> rank0_done;
  std::shared_future<void> done = rank0_done.get_future().share();
  absl::Status got;
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      comm::GlooOptions o;
      o.timeout = std::chrono::milliseconds(300);
      auto gloo = comm::GlooCommunicator::Create(i, 2, store, o);
      if (!gloo.ok()) {
        if (i == 0) got = gloo.status(), rank0_done.set_value();
        return;
      }
      if (i == 1) {
        done.wait_for(std::chrono::seconds(30));
        return;
      }
      comm::CommThread thread(gloo->get());
      RingAttention ring(&thread, *CpSharding::Make(8, 2, 0));
      std::vector<float> qkv(static_cast<size_t>(4) * heads.qkv_width(), 0.5f), out(4 * 8), lse(8);
      got = ring.Forward(out.data(), lse.data(), qkv.data(), heads);
      rank0_done.set_value();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(absl::IsDeadlineExceeded(got)) << got;
  EXPECT_TRUE(absl::StrContains(got.message(), "send_recv #1 failed on rank 0 of 2: rank 1 did not arrive")) << got;
}

struct Case {
  const char* name;
  int cp, B, T, NH, NKV, hd;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name << " (cp " << c.cp << ", B " << c.B << ", T " << c.T << ", NH " << c.NH << ", NKV " << c.NKV
      << ", hd " << c.hd << ")";
}

struct Result {
  std::vector<float> out, lse, dqkv;
};

// The unsplit attention, fp32: the grouped heads expanded, the cpu backend's causal attention
// forward and backward, the key/value gradients summed back; lse the double-accumulated
// reference's.
Result Unsplit(const Case& c, const std::vector<float>& qkv, const std::vector<float>& dout) {
  const int C = c.NH * c.hd;
  const int64_t BT = static_cast<int64_t>(c.B) * c.T;
  const size_t att = static_cast<size_t>(c.B) * c.NH * c.T * c.T;
  std::vector<float> qkv3(static_cast<size_t>(BT) * 3 * C), dqkv3(qkv3.size()), probs(att), scratch(att);
  Result r{std::vector<float>(static_cast<size_t>(BT) * C), std::vector<float>(static_cast<size_t>(c.B) * c.NH * c.T),
           std::vector<float>(qkv.size())};
  kernels::gqa_expand(qkv3.data(), qkv.data(), BT, c.NH, c.NKV, c.hd);
  kernels::attention_forward(r.out.data(), probs.data(), qkv3.data(), c.B, c.T, C, c.NH);
  kernels::attention_lse(r.lse.data(), qkv3.data(), c.B, c.T, C, c.NH);
  kernels::attention_backward(dqkv3.data(), scratch.data(), dout.data(), qkv3.data(), probs.data(), c.B, c.T, C, c.NH);
  kernels::gqa_reduce(r.dqkv.data(), dqkv3.data(), BT, c.NH, c.NKV, c.hd);
  return r;
}

// What travelled, per rank.
struct Traffic {
  size_t fwd_floats = 0, bwd_floats = 0, fwd_steps = 0, bwd_steps = 0, collectives = 0, counted_by_ring = 0;
  size_t ring_bytes = 0;  // RingAttention::bytes() after the backward
};

// Ring attention over c.cp ranks (threads, Gloo on loopback; no communicator at cp 1), each
// given its rows of qkv and dout; the ranks' outputs put back in sequence order. kv_type: the
// type the K/V values are of (and travel in).
Result Ring(const Case& c, const std::vector<float>& qkv, const std::vector<float>& dout,
            std::vector<Traffic>* traffic, kernels::Precision kv_type = kernels::Precision::kFp32) {
  const AttentionHeads heads{c.B, c.NH, c.NKV, c.hd, 0.f, kv_type};
  const int W = heads.qkv_width(), C = heads.out_width();
  Result r{std::vector<float>(static_cast<size_t>(c.B) * c.T * C, NAN),
           std::vector<float>(static_cast<size_t>(c.B) * c.NH * c.T, NAN), std::vector<float>(qkv.size(), NAN)};
  traffic->assign(static_cast<size_t>(c.cp), Traffic{});
  std::vector<absl::Status> status(static_cast<size_t>(c.cp));
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  auto rank = [&](int i) -> absl::Status {
    const CpSharding shard = *CpSharding::Make(c.T, c.cp, i);
    const int rows = shard.rows();
    std::unique_ptr<comm::GlooCommunicator> gloo;
    std::unique_ptr<fakes::CountingCommunicator> counting;
    std::unique_ptr<comm::CommThread> thread;
    if (c.cp > 1) {
      comm::GlooOptions o;
      o.timeout = std::chrono::milliseconds(20000);
      auto made = comm::GlooCommunicator::Create(i, c.cp, store, o);
      if (!made.ok()) return made.status();
      gloo = std::move(*made);
      counting = std::make_unique<fakes::CountingCommunicator>(gloo.get());
      thread = std::make_unique<comm::CommThread>(counting.get());
    }
    std::vector<float> q(static_cast<size_t>(c.B) * rows * W), g(static_cast<size_t>(c.B) * rows * C),
        out(g.size()), lse(static_cast<size_t>(c.B) * c.NH * rows), dq(q.size());
    shard.Take(qkv.data(), q.data(), c.B, W);
    shard.Take(dout.data(), g.data(), c.B, C);
    RingAttention ring(thread.get(), shard);
    Traffic& t = (*traffic)[static_cast<size_t>(i)];
    if (absl::Status s = ring.Forward(out.data(), lse.data(), q.data(), heads); !s.ok()) return s;
    t.counted_by_ring = ring.floats_sent();
    if (counting) t.fwd_floats = counting->floats_sent(), t.fwd_steps = counting->send_recvs();
    if (absl::Status s = ring.Backward(dq.data(), g.data(), q.data(), out.data(), lse.data(), heads); !s.ok()) return s;
    t.counted_by_ring += ring.floats_sent();
    t.ring_bytes = ring.bytes();
    if (counting) {
      t.bwd_floats = counting->floats_sent() - t.fwd_floats;
      t.bwd_steps = counting->send_recvs() - t.fwd_steps;
      t.collectives = counting->collectives();
    }
    shard.Put(out.data(), r.out.data(), c.B, C);
    shard.Put(lse.data(), r.lse.data(), c.B * c.NH, 1);  // (B, NH, T): B·NH sequences of one float
    shard.Put(dq.data(), r.dqkv.data(), c.B, W);
    return absl::OkStatus();
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < c.cp; ++i) threads.emplace_back([&, i] { status[static_cast<size_t>(i)] = rank(i); });
  for (auto& t : threads) t.join();
  for (int i = 0; i < c.cp; ++i) EXPECT_TRUE(status[static_cast<size_t>(i)].ok()) << "rank " << i << ": " << status[i];
  return r;
}

// The bound, per element, for two fp32 computations of causal attention that differ in the
// order of their sums and in how the softmax is normalised (the unsplit kernel: one pass over
// the row; the ring: cp blocks merged by their log-sum-exps). Each is within its error of the
// exact value, so the two within twice that. With u = 2^-24 (Higham, Accuracy and Stability,
// 3.1: an n-term fp32 sum is within n u of its terms' magnitudes):
//  - a score s_ij = scale q_i·k_j is within (hd + 1) u scale A_ij (A_ij = Σ_d |q_id k_jd|);
//    the weight p_ij = exp(s_ij - lse_i) moves with s_ij and with lse_i (which holds the max
//    score's error and the T-term sum's), and with the rounding of lse_i and of exp (vec::Exp:
//    a few ulp) and, in the ring, the 2·cp exps and logs of the merges. So p_ij is within a
//    relative e_i = u (2 (hd + 2) scale max_j A_ij + T + 4 + 4 (|lse_i| + 1) + 8 + 8 cp); E is
//    the largest e_i (it holds for every row);
//  - out_id = Σ_j p_ij v_jd: E + (T + 2) u of S_out = Σ_j p_ij |v_jd|;
//  - dv_jd = Σ_i p_ij dout_id over the group's heads: E + (group·T + cp + 1) u of
//    S_dv = Σ_{h,i} p_ij |dout_id| (the ring's cp partial sums are added in another order);
//  - ds_ij = p_ij (dp_ij - D_i) scale, dp_ij = dout_i·v_j (hd terms), D_i = Σ_j p_ij dp_ij (the
//    unsplit kernel's) or dout_i·out_i (the ring's; out carries out's error): relative to
//    M_ij = scale p_ij (P_ij + D_i^abs), P_ij = Σ_d |dout_id v_jd|, D_i^abs = Σ_j p_ij P_ij,
//    within 2E + (T + 2 hd + 8) u;
//  - dq_id = Σ_j ds_ij k_jd: that plus (T + 1) u of S_dq = Σ_j M_ij |k_jd|; dk_jd = Σ_{h,i}
//    ds_ij q_id: plus (group·T + cp + 1) u of S_dk = Σ_{h,i} M_ij |q_id|.
//  - lse against the double-accumulated reference (rounded once): E + u (|lse| + 1).
struct Bounds {
  std::vector<double> out, lse, dqkv;
};

Bounds Derive(const Case& c, const std::vector<float>& qkv, const std::vector<float>& dout) {
  const double u = 0x1p-24, scale = 1.0 / std::sqrt(static_cast<double>(c.hd));
  const int group = c.NH / c.NKV, W = (c.NH + 2 * c.NKV) * c.hd, C = c.NH * c.hd, T = c.T, hd = c.hd;
  std::vector<double> s_out(static_cast<size_t>(c.B) * T * C), lse(static_cast<size_t>(c.B) * c.NH * T),
      s_dqkv(qkv.size());
  std::vector<bool> is_dv(qkv.size(), false), is_dq(qkv.size(), false);
  double E = 0;
  std::vector<double> p(static_cast<size_t>(T)), pabs(static_cast<size_t>(T));
  auto Q = [&](int b, int t, int h, int d) { return qkv[(static_cast<size_t>(b) * T + t) * W + h * hd + d]; };
  auto K = [&](int b, int t, int g, int d) { return qkv[(static_cast<size_t>(b) * T + t) * W + C + g * hd + d]; };
  auto V = [&](int b, int t, int g, int d) {
    return qkv[(static_cast<size_t>(b) * T + t) * W + C + c.NKV * hd + g * hd + d];
  };
  auto G = [&](int b, int t, int h, int d) { return dout[(static_cast<size_t>(b) * T + t) * C + h * hd + d]; };
  for (int b = 0; b < c.B; ++b) {
    for (int h = 0; h < c.NH; ++h) {
      const int g = h / group;
      for (int i = 0; i < T; ++i) {
        double mx = -INFINITY, A = 0;
        for (int j = 0; j <= i; ++j) {
          double dot = 0, a = 0;
          for (int d = 0; d < hd; ++d) dot += static_cast<double>(Q(b, i, h, d)) * K(b, j, g, d);
          for (int d = 0; d < hd; ++d) a += std::fabs(static_cast<double>(Q(b, i, h, d)) * K(b, j, g, d));
          p[static_cast<size_t>(j)] = dot * scale;
          mx = std::max(mx, p[static_cast<size_t>(j)]);
          A = std::max(A, a);
        }
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += std::exp(p[static_cast<size_t>(j)] - mx);
        const double l = mx + std::log(sum);
        lse[(static_cast<size_t>(b) * c.NH + h) * T + i] = l;
        E = std::max(E, u * (2.0 * (hd + 2) * scale * A + T + 4 + 4 * (std::fabs(l) + 1) + 8 + 8 * c.cp));
        double dabs = 0;
        for (int j = 0; j <= i; ++j) {
          p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - l);
          double pa = 0;
          for (int d = 0; d < hd; ++d) pa += std::fabs(static_cast<double>(G(b, i, h, d)) * V(b, j, g, d));
          pabs[static_cast<size_t>(j)] = pa;
          dabs += p[static_cast<size_t>(j)] * pa;
        }
        const size_t qrow = (static_cast<size_t>(b) * T + i) * W;
        for (int j = 0; j <= i; ++j) {
          const double pj = p[static_cast<size_t>(j)], m = scale * pj * (pabs[static_cast<size_t>(j)] + dabs);
          const size_t krow = (static_cast<size_t>(b) * T + j) * W + C;
          for (int d = 0; d < hd; ++d) {
            s_out[(static_cast<size_t>(b) * T + i) * C + h * hd + d] += pj * std::fabs(V(b, j, g, d));
            s_dqkv[qrow + h * hd + d] += m * std::fabs(K(b, j, g, d));
            s_dqkv[krow + g * hd + d] += m * std::fabs(Q(b, i, h, d));
            s_dqkv[krow + c.NKV * hd + g * hd + d] += pj * std::fabs(G(b, i, h, d));
          }
        }
      }
    }
  }
  Bounds bd{std::vector<double>(s_out.size()), std::vector<double>(lse.size()), std::vector<double>(s_dqkv.size())};
  for (size_t i = 0; i < s_out.size(); ++i) bd.out[i] = 2 * (E + (T + 2) * u) * s_out[i];
  for (size_t i = 0; i < lse.size(); ++i) bd.lse[i] = E + u * (std::fabs(lse[i]) + 1);
  const double ds = 2 * E + (T + 2 * hd + 8) * u, kv_sum = (static_cast<double>(group) * T + c.cp + 1) * u;
  for (size_t i = 0; i < s_dqkv.size(); ++i) {
    const int col = static_cast<int>(i % static_cast<size_t>(W));
    const double rel = col < C ? ds + (T + 1) * u : col < C + c.NKV * hd ? ds + kv_sum : E + kv_sum;
    bd.dqkv[i] = 2 * rel * s_dqkv[i];
  }
  return bd;
}

// The largest |a - b| / bound over the elements (NaN, an element never written, counts as
// infinite); where it is: *worst.
double WorstRatio(const std::vector<float>& a, const std::vector<float>& b, const std::vector<double>& bound,
                  size_t* worst) {
  double r = 0;
  *worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(static_cast<double>(a[i]) - b[i]);
    const double q = std::isnan(e) ? INFINITY : bound[i] > 0 ? e / bound[i] : e > 0 ? INFINITY : 0;
    if (q > r) r = q, *worst = i;
  }
  return r;
}

class RingAttentionTest : public ::testing::TestWithParam<Case> {};

// Forward output, log-sum-exps and every gradient of the ring equal the unsplit attention's
// within the derived bound; only the key/value heads travel: cp − 1 K/V blocks forward,
// cp − 1 more and cp dK/dV blocks backward, each B·T/cp rows of 2·NKV·hd floats, and no
// collective besides.
TEST_P(RingAttentionTest, EqualsTheUnsplitAttention) {
  const Case c = GetParam();
  const int W = (c.NH + 2 * c.NKV) * c.hd, C = c.NH * c.hd;
  const auto qkv = RandomNormal(static_cast<size_t>(c.B) * c.T * W, 7);
  const auto dout = RandomNormal(static_cast<size_t>(c.B) * c.T * C, 8);
  const Result want = Unsplit(c, qkv, dout);
  std::vector<Traffic> traffic;
  const Result got = Ring(c, qkv, dout, &traffic);
  const Bounds bound = Derive(c, qkv, dout);
  size_t at = 0;
  const double r_out = WorstRatio(got.out, want.out, bound.out, &at);
  EXPECT_LE(r_out, 1.0) << "out[" << at << "] " << got.out[at] << " vs " << want.out[at] << ", bound " << bound.out[at];
  const double r_lse = WorstRatio(got.lse, want.lse, bound.lse, &at);
  EXPECT_LE(r_lse, 1.0) << "lse[" << at << "] " << got.lse[at] << " vs " << want.lse[at] << ", bound " << bound.lse[at];
  const double r_d = WorstRatio(got.dqkv, want.dqkv, bound.dqkv, &at);
  EXPECT_LE(r_d, 1.0) << "dqkv[" << at << "] (column " << at % W << " of " << W << ") " << got.dqkv[at] << " vs "
                      << want.dqkv[at] << ", bound " << bound.dqkv[at];
  std::printf("%s: worst error / bound: out %.3g, lse %.3g, dqkv %.3g\n", c.name, r_out, r_lse, r_d);

  const size_t block = static_cast<size_t>(c.B) * (c.T / c.cp) * 2 * c.NKV * c.hd;
  for (int i = 0; i < c.cp; ++i) {
    const Traffic& t = traffic[static_cast<size_t>(i)];
    SCOPED_TRACE(::testing::Message() << "rank " << i);
    if (c.cp == 1) {
      EXPECT_EQ(t.counted_by_ring, 0u);
      continue;
    }
    EXPECT_EQ(t.fwd_steps, static_cast<size_t>(c.cp - 1));
    EXPECT_EQ(t.fwd_floats, (c.cp - 1) * block) << "forward: K and V of the key/value heads only";
    EXPECT_EQ(t.bwd_steps, static_cast<size_t>(2 * c.cp - 1));
    EXPECT_EQ(t.bwd_floats, (2 * c.cp - 1) * block) << "backward: K/V, then dK/dV home";
    EXPECT_EQ(t.counted_by_ring, t.fwd_floats + t.bwd_floats);
    EXPECT_EQ(t.collectives, 0u);
  }
}

// bf16 and fp16: where K and V are the 16-bit type's values (as the model's are, widened), the
// blocks travel in that type, half the words: (cp − 1) half blocks forward, backward as many
// and the cp dK/dV blocks in fp32 (sums over the ranks' queries). Computing on the values that
// arrive, widened again, the ring gives the fp32 ring's results bit for bit, and holds the same
// working bytes (two 16-bit blocks and one fp32 in place of two fp32).
TEST(RingAttentionSixteenBitTest, SixteenBitBlocksTravelInTheirType) {
  for (kernels::Precision p : {kernels::Precision::kBf16, kernels::Precision::kFp16}) {
    for (const Case& c : {Case{"cp2_gqa", 2, 2, 32, 4, 2, 8}, Case{"cp4_mha", 4, 1, 64, 2, 2, 16}}) {
      SCOPED_TRACE(::testing::Message() << kernels::PrecisionName(p) << " " << c.name);
      const int W = (c.NH + 2 * c.NKV) * c.hd, C = c.NH * c.hd;
      auto qkv = RandomNormal(static_cast<size_t>(c.B) * c.T * W, 17);
      const auto dout = RandomNormal(static_cast<size_t>(c.B) * c.T * C, 18);
      kernels::round_to(qkv.data(), qkv.data(), static_cast<int64_t>(qkv.size()), p);  // the 16-bit values
      std::vector<Traffic> wide, narrow;
      const Result want = Ring(c, qkv, dout, &wide);
      const Result got = Ring(c, qkv, dout, &narrow, p);
      EXPECT_EQ(got.out, want.out);
      EXPECT_EQ(got.lse, want.lse);
      EXPECT_EQ(got.dqkv, want.dqkv);
      const size_t block = static_cast<size_t>(c.B) * (c.T / c.cp) * 2 * c.NKV * c.hd;
      for (int i = 0; i < c.cp; ++i) {
        const Traffic& t = narrow[static_cast<size_t>(i)];
        EXPECT_EQ(t.fwd_steps, static_cast<size_t>(c.cp - 1)) << "rank " << i;
        EXPECT_EQ(t.fwd_floats, (c.cp - 1) * block / 2) << "rank " << i << ": forward, 16-bit K/V";
        EXPECT_EQ(t.bwd_floats, (c.cp - 1) * block / 2 + c.cp * block) << "rank " << i << ": 16-bit K/V, fp32 dK/dV";
        EXPECT_EQ(t.counted_by_ring, t.fwd_floats + t.bwd_floats) << "rank " << i;
        // 5 fp32 blocks' room and D (B, NH, rows): jobspec's RingCpBytes.
        const size_t bytes = 4 * (5 * block + static_cast<size_t>(c.B) * c.NH * (c.T / c.cp));
        EXPECT_EQ(t.ring_bytes, bytes) << "rank " << i;
        EXPECT_EQ(wide[static_cast<size_t>(i)].ring_bytes, bytes) << "rank " << i << " (fp32)";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, RingAttentionTest,
    ::testing::Values(Case{"cp1_mha", 1, 2, 32, 2, 2, 8}, Case{"cp2_mha", 2, 2, 64, 4, 4, 16},
                      Case{"cp2_mqa", 2, 1, 40, 3, 1, 8},
                      Case{"cp2_gqa_chunks_over_a_tile", 2, 1, 288, 4, 2, 16}, Case{"cp4_mha", 4, 2, 64, 2, 2, 16},
                      Case{"cp4_gqa", 4, 2, 96, 6, 2, 8}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace gantry::model
