#include "jobspec/cost_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "jobspec/ranks.h"

namespace gantry::jobspec {

double AllReduceTime(double bytes, int n, const Link& link) {
  if (n <= 1 || bytes <= 0) return 0;
  const double ring = 2.0 * (n - 1) * link.latency + 2.0 * (n - 1) / n * bytes / link.bandwidth;
  const double tree = 2.0 * std::ceil(std::log2(n)) * link.latency + 2.0 * bytes / link.bandwidth;
  return std::min(ring, tree);
}

double ReduceScatterTime(double bytes, int n, const Link& link) {
  if (n <= 1 || bytes <= 0) return 0;
  return (n - 1) * link.latency + static_cast<double>(n - 1) / n * bytes / link.bandwidth;
}

double AllToAllTime(double bytes, int n, const Link& link) { return ReduceScatterTime(bytes, n, link); }

double SendTime(double bytes, const Link& link) { return bytes <= 0 ? 0 : link.latency + bytes / link.bandwidth; }

Link GroupLink(const std::vector<int>& ranks, const ClusterSpec& cluster) {
  const int gpn = std::max(1, cluster.gpus_per_node);
  std::set<int> nodes;
  for (int r : ranks) nodes.insert(r / gpn);
  if (nodes.size() <= 1) return cluster.intra;
  // The group's ranks on its busiest node, each with its own port, share the crossing.
  int per_node = 0;
  for (int node : nodes) {
    per_node = std::max(per_node, static_cast<int>(std::count_if(ranks.begin(), ranks.end(),
                                                                 [&](int r) { return r / gpn == node; })));
  }
  Link l = cluster.inter;
  l.bandwidth = std::min(cluster.intra.bandwidth, per_node * cluster.inter.bandwidth);
  return l;
}

// Point to point between these ranks (a pipeline's hop, the cp ring): the node's own path where
// they share a node, the group's link otherwise.
Link P2PLink(const std::vector<int>& ranks, const ClusterSpec& cluster) {
  const int gpn = std::max(1, cluster.gpus_per_node);
  const bool one_node = std::all_of(ranks.begin(), ranks.end(), [&](int r) { return r / gpn == ranks[0] / gpn; });
  return one_node ? cluster.NodeP2P() : GroupLink(ranks, cluster);
}

namespace {

// The links of a layout's groups (those of rank 0's groups: every group of a kind sits alike
// when the node size is a multiple of tp).
// cp: the context-parallel ring's; dp: the gradients' reduction, over the dp x cp ranks that
// hold the same parameters.
struct Links {
  Link tp, dp, pp, ep, edp, cp;
  Link cp_ring;  // the ring's exchanges, point to point (cp: the all-gather variant's collective)
};

Links LinksOf(const PlanInput& in, const ClusterSpec& cluster) {
  // Ranks ((stage·dp + replica)·cp + cp_rank)·tp + tp_rank (Megatron-Core's order, cp between
  // tp and dp): ranks.h's order with dp x cp "replicas", replica·cp + cp_rank.
  const int cp = in.cp;
  const Layout l{in.dp * cp, in.tp, in.pp, 1};
  auto ranks_of = [&](auto member, int n) {
    std::vector<int> ranks;
    for (int i = 0; i < n; ++i) ranks.push_back(RankOf(member(i), l));
    return ranks;
  };
  auto group = [&](auto member, int n) { return GroupLink(ranks_of(member, n), cluster); };
  Links k;
  k.tp = group([](int i) { return Coords{0, i, 0}; }, in.tp);
  k.cp = group([](int i) { return Coords{i, 0, 0}; }, cp);
  k.cp_ring = P2PLink(ranks_of([](int i) { return Coords{i, 0, 0}; }, cp), cluster);
  k.dp = group([](int i) { return Coords{i, 0, 0}; }, in.dp * cp);
  k.ep = group([&](int i) { return Coords{i * cp, 0, 0}; }, in.ep);
  k.edp = group([&](int i) { return Coords{(i / cp) * in.ep * cp + i % cp, 0, 0}; }, in.dp / in.ep * cp);
  // A pipeline's neighbours: the slowest hop between consecutive stages.
  k.pp = cluster.NodeP2P();
  for (int s = 0; s + 1 < in.pp; ++s) {
    const Link hop = P2PLink({RankOf({0, 0, s}, l), RankOf({0, 0, s + 1}, l)}, cluster);
    if (hop.bandwidth < k.pp.bandwidth) k.pp = hop;
  }
  return k;
}

// One op: its work at its rate, at least `kernels` launches.
double Op(double work, double rate, double kernels, const DeviceProfile& d) {
  return std::max(rate > 0 ? work / rate : 0.0, kernels * d.launch);
}

// The GEMMs of a layer (or the classifier) as the backend runs them (MatmulForward and
// MatmulBackward of `rows` rows, `in` wide into `out` wide), `count` alike, each at its shape's
// rate (DeviceProfile::GemmFwd / GemmBwd: the profile's GEMM table, or its single rates):
// forward 2·rows·in·out FLOPs a call, one launch; backward twice that, two launches (the input's
// and the weight's gradients).
struct Gemms {
  Gemms(const DeviceProfile& d, int pi) : d(d), pi(pi) {}
  void Add(double rows, double in, double out, double count = 1) {
    const double flops = 2 * rows * in * out * count;
    fwd += Op(flops, d.GemmFwd(pi, rows, out, in), count, d);
    bwd += Op(2 * flops, d.GemmBwd(pi, rows, out, in), 2 * count, d);
  }
  const DeviceProfile& d;
  const int pi;
  double fwd = 0, bwd = 0;  // seconds
};

// One micro-batch's costs on one stage (seconds; FLOPs per GPU).
struct StageCost {
  double fwd = 0, bwd = 0;            // compute (bwd includes recomputation)
  double tp = 0, ep = 0, pp = 0;      // exposed collectives, forward and backward together
  double cp = 0;                      // the ring's exposed exchanges (and its hidden ones' cost to compute)
  double cp_hidden = 0;               // the ring's exchanges hidden behind the block attention
  double fwd_comm = 0;                // the forward's share of tp + ep + pp + cp (the rest is backward's)
  double flops = 0;                   // hardware FLOPs (Megatron's convention), per GPU
  double model_flops = 0;             // the model's (6N + 12·L·T·C a token), per GPU
  // The rank's shard (tp_rank 0): parameters, of them the experts' (reduced over edp), and
  // ZeRO's units (layers, the embedding, the head).
  double params = 0, expert_params = 0, gemm_params = 0;
  int units = 0;
};

StageCost CostOfStage(const PlanInput& in, const ClusterSpec& cluster, const Links& links, const ModelShard& shard) {
  const GPTConfig& c = *in.model;
  const DeviceProfile& d = cluster.device;
  const int pi = in.precision == Precision::kFp32 ? 1 : 0;  // the rates' index
  const double e = pi ? 4 : 2;                              // a 16-bit or fp32 activation
  // Wire bytes of activations: Gantry sums the projections and sends stage boundaries in fp32;
  // the textbook's mixed precision (Megatron) in 16 bits.
  const double w = in.precision == Precision::kMixed ? 2 : 4;
  // N: this rank's rows of the micro-batch (context parallelism: T/cp of each sequence); s the
  // whole sequence, which its queries attend over.
  const double t = in.tp, s = in.seq_len, N = static_cast<double>(in.micro_batch) * in.seq_len / in.cp;
  const double cp = in.cp;
  const double C = c.n_embd, F = c.ffn(), hd = c.head_dim(), nh = c.n_head, kv = c.kv_heads(), V = c.vocab_size;
  const double rows = in.sequence_parallel && in.tp > 1 ? N / t : N;  // the residual stream's rows
  const bool unfused = d.unfused_attention;
  StageCost sc;

  // Per layer: GEMM weights (a token's forward FLOPs are twice them), memory-bound bytes and
  // kernels forward (backward: twice each), attention.
  const std::vector<int> held = HeldLayers(c, shard);
  for (int l : held) {
    const bool moe = c.moe_layer(l);
    const double k = moe ? c.moe.top_k : 1;
    const double attn_w = C * (nh + 2 * kv) * hd + C * C;
    const double mlp_w = (c.llama() ? 3 : 2) * C * F;
    const double gemm_w = (attn_w + k * mlp_w) / t + (moe ? C * c.moe.num_experts : 0);
    const double gemm_f = 2 * N * gemm_w;
    // The same FLOPs GEMM by GEMM, each at its shape's rate (Gemms).
    Gemms gemms(d, pi);
    gemms.Add(N, C, (nh + 2 * kv) * hd / t);  // q, k, v
    gemms.Add(N, C / t, C);                   // attention's output projection
    const double up = (c.llama() ? 2 : 1) * F / t;  // fc (GPT-2), or gate | up (Llama)
    if (moe) {
      // The router, then each of this rank's num_experts / ep experts over its share of the
      // N·top_k routed rows of the ep ranks (N·top_k·ep / num_experts, capacity aside).
      const double E = c.moe.num_experts, experts = E / in.ep, rows = N * k * in.ep / E;
      gemms.Add(N, C, E);
      gemms.Add(rows, C, up, experts);
      gemms.Add(rows, F / t, C, experts);
    } else {
      gemms.Add(N, C, up);
      gemms.Add(N, F / t, C);
    }
    // Memory-bound bytes forward and backward. Norms: read the fp32 residual, write e; backward
    // read it and the gradient, write and accumulate fp32. Residual adds (fp32): two reads and a
    // write each way. The MLP's activation: GELU reads and writes (backward: two reads, a write);
    // SwiGLU reads two and writes one (backward: three and two).
    const double act = k * N * F / t * e;
    double bytes = 2 * rows * C * (4 + e) + 2 * rows * C * 12 + act * (c.llama() ? 3 : 2);
    double bytes_b = 2 * rows * C * (12 + e) + 2 * rows * C * 12 + act * (c.llama() ? 5 : 3);
    double kernels = 8;
    if (c.llama()) {
      const double rope = N * (nh + kv) * hd / t * 2 * e;  // RoPE on q and k
      bytes += rope, bytes_b += rope;
      if (kv < nh) {  // K and V repeated to every head, and their gradients summed back
        const double rep = N * 2 * (nh + kv) * hd / t * e;
        bytes += rep, bytes_b += rep;
      }
      kernels += 3;
    } else if (pi == 0) {
      // 16-bit outputs with a bias (qkv, fc): an fp32 product, then one pass adds the bias and
      // rounds; backward, the biases' column sums read every projection's output gradient.
      bytes += N * (3 * C + F) / t * 8;
      bytes_b += N * (5 * C + F) / t * e;
      kernels += 2;
    }
    if (moe) bytes += 2 * N * k * C * 4, bytes_b += 2 * N * k * C * 4, kernels += 6;  // dispatch and combine
    // Context parallelism: each ring step but the first merges its block's output into the
    // rows' running output by the log-sum-exps (fp32: read both, write one); backward, the
    // dK/dV arriving are added to.
    // (The K/V heads that travel: the key/value heads, or every query head's copy where GQA's
    // repetition comes before the exchange, PlanInput::cp_repeated_kv.)
    const double xkv = in.cp_repeated_kv ? nh : kv;
    if (cp > 1) {
      bytes += (cp - 1) * N * nh * hd / t * 12;
      bytes_b += (cp - 1) * N * 2 * xkv * hd / t * 12;
      kernels += cp - 1;
    }
    const double mem_f = Op(bytes, d.memory_bandwidth, kernels, d);
    // Attention: the causal half of 4·T·C a token forward (with cp: this rank's rows' share,
    // as balanced chunks give every rank the same).
    const double attn_flops = 2 * N * s * C / t;
    double attn_f, attn_b;
    // (The unfused scores are batched GEMMs inside the attention op, k the head dimension,
    // outside the GEMM table's shapes: they keep the single rates.)
    if (cp > 1 && unfused) {
      // The ring's block kernels (kernels/attention_block.h) at the GEMM rates, no
      // probabilities kept: the pairs of chunks below the diagonal, and the 2 diagonal pairs
      // of the first step computed whole and masked (2·cp + 1 pairs for 2·cp pairs' work);
      // backward recomputes the probabilities (2.5 times the forward's FLOPs).
      const double work = attn_flops * (1 + 1 / (2 * cp));
      attn_f = Op(work, d.gemm_fwd[pi], 2 * cp, d);
      attn_b = Op(2.5 * work, d.gemm_bwd[pi], 2 * cp, d);
    } else if (cp > 1) {  // the fused kernel a block at a time: two launches a ring step
      attn_f = Op(attn_flops, d.attention_fwd[pi], 2 * cp, d);
      attn_b = Op(2.5 * attn_flops, d.attention_bwd[pi], 2 * cp, d);
    } else if (unfused) {  // the scores as GEMMs over the whole T x T, probabilities kept (fp32)
      const double scores = N * s * nh / t;
      attn_f = Op(2 * attn_flops, d.gemm_fwd[pi], 2, d) + Op(scores * (2 * e + 4), d.memory_bandwidth, 2, d);
      attn_b = Op(4 * attn_flops, d.gemm_bwd[pi], 4, d) + Op(scores * 12, d.memory_bandwidth, 2, d);
    } else {
      attn_f = Op(attn_flops, d.attention_fwd[pi], 1, d);
      attn_b = Op(2.5 * attn_flops, d.attention_bwd[pi], 1, d);
    }
    const double f = gemms.fwd + attn_f + mem_f;
    double b = gemms.bwd + attn_b + Op(bytes_b, d.memory_bandwidth, 2 * kernels, d);
    double recomputed_flops = 0;
    if (in.recompute == Recompute::kFull) b += f, recomputed_flops = gemm_f + 2 * attn_flops;
    if (in.recompute == Recompute::kSelective) b += attn_f, recomputed_flops = 2 * attn_flops;
    // The ring (model::RingAttention): forward, cp - 1 exchanges of a K/V block (this rank's
    // rows of the key/value heads, 1/tp of them, e bytes a value: 16-bit K/V travel as they
    // are), each while the block before it is computed,
    // a ring step being 1/cp of the attention's time (the balanced chunks make every step
    // alike); backward, cp - 1 exchanges of a K/V block with its dK/dV (fp32) while each
    // step's block backward runs, and the last dK/dV home after the last block, exposed. The
    // rule: an exchange is hidden up to its step's attention time and exposed beyond it.
    // Recomputation (full or selective) runs the forward's ring again.
    //
    // The all-gather (PlanInput::cp_exchange kAllGather; torch's _AllGatherRotater): the cp - 1
    // other blocks arrive by one all-gather, started with the local block's attention and
    // waited for after it: hidden up to one ring step's attention, the rest exposed (forward,
    // and again backward); backward's dK/dV then go round the ring as above, fp32, each hidden
    // behind the next step, the last exposed.
    if (cp > 1) {
      const double block = N * 2 * xkv * hd / t;  // floats
      const double home = SendTime(block * 4, links.cp_ring);
      double xf_total, xb_total, exp_f, exp_b;
      if (in.cp_exchange == CpExchange::kAllGather) {
        const double gather = ReduceScatterTime(cp * block * e, cp, links.cp);  // an all-gather ring moves the same
        exp_f = std::max(0.0, gather - attn_f / cp);
        exp_b = std::max(0.0, gather - attn_b / cp) + (cp - 1) * std::max(0.0, home - attn_b / cp) + home;
        xf_total = gather, xb_total = gather + cp * home;
      } else {
        const double xf = SendTime(block * e, links.cp_ring), xb = SendTime(block * (e + 4), links.cp_ring);
        exp_f = (cp - 1) * std::max(0.0, xf - attn_f / cp);
        exp_b = (cp - 1) * std::max(0.0, xb - attn_b / cp) + home;
        xf_total = (cp - 1) * xf, xb_total = (cp - 1) * xb + home;
      }
      const double again = in.recompute == Recompute::kNone ? 0 : 1;
      sc.cp += (1 + again) * exp_f + exp_b;
      sc.cp_hidden += (1 + again) * (xf_total - exp_f) + (xb_total - exp_b);
      sc.fwd_comm += exp_f;
    }
    sc.fwd += f;
    sc.bwd += b;
    // Megatron's count: attention as its whole 4·T·C a token (not the causal half).
    const double layer_f = gemm_f + 2 * attn_flops;
    sc.flops += 3 * layer_f + recomputed_flops;
    sc.model_flops += 3 * layer_f;
    // Tensor parallelism: an all-reduce (sequence parallel: a reduce-scatter and an all-gather,
    // the same bytes) after attention and after the MLP, forward, and two backward; full
    // recompute repeats the forward's.
    if (in.tp > 1) {
      const double one = AllReduceTime(N * C * w, in.tp, links.tp);
      const double fwd = 2 * one;
      sc.tp += fwd + 2 * one + (in.recompute == Recompute::kFull ? fwd : 0);
      sc.fwd_comm += fwd;
    }
    // Expert parallelism: the tokens' rows (fp32) out to their experts and back, forward and
    // backward.
    if (moe && in.ep > 1) {
      const double one = AllToAllTime(N * k * C * 4, in.ep, links.ep);
      sc.ep += 4 * one + (in.recompute == Recompute::kFull ? 2 * one : 0);
      sc.fwd_comm += 2 * one;
    }
  }
  if (shard.first()) {  // the embedding: rows gathered (wte, wpe), and scattered back
    sc.fwd += Op(N * C * 12, d.memory_bandwidth, 1, d);
    sc.bwd += Op(N * C * 12, d.memory_bandwidth, 2, d);
    if (in.tp > 1) {  // the vocabulary-parallel lookup's sum
      const double ar = AllReduceTime(N * C * 4, in.tp, links.tp);
      sc.tp += ar, sc.fwd_comm += ar;
    }
  }
  if (shard.last()) {  // the final norm, the classifier and its fused softmax + cross-entropy
    const double gemm_f = 2 * N * C * V / t;
    Gemms classifier(d, pi);
    classifier.Add(N, C, V / t);
    sc.fwd += Op(N * C * (4 + e), d.memory_bandwidth, 1, d) + classifier.fwd +
              Op(N * V / t * (2 * e + 4), d.memory_bandwidth, 2, d);
    sc.bwd += classifier.bwd + Op(2 * N * C * (4 + e), d.memory_bandwidth, 1, d);
    sc.flops += 3 * gemm_f;
    sc.model_flops += 3 * gemm_f;
    if (in.tp > 1) {  // the softmax's statistics (small), and the classifier's input gradient
      const double stats = ReduceScatterTime(N * 8 * t, in.tp, links.tp);
      const double ar = AllReduceTime(N * C * 4, in.tp, links.tp);
      sc.tp += stats + ar, sc.fwd_comm += stats;
    }
  }
  // Pipeline: the activation forward and its gradient back, each blocking both neighbours; the
  // interleaved schedule's chunks each receive and send their own (the first chunk of stage 0
  // receives nothing, the last of stage pp - 1 sends nothing).
  // (Each rank sends its rows of the residual stream: 1/tp of them under sequence parallelism,
  // as the trainer's stage_floats.)
  if (in.pp > 1) {
    const double one = SendTime(rows * C * w, links.pp);
    const int hops = 2 * shard.num_chunks() - (shard.first() ? 1 : 0) - (shard.last() ? 1 : 0);
    sc.pp = 2 * hops * one;
    sc.fwd_comm += hops * one;
  }
  // Hidden ring traffic costs compute where the collectives share the compute's cores.
  sc.cp += d.comm_compute_cost * sc.cp_hidden;
  for (const ParamTensor& p : ParameterLayout(c, shard)) {
    sc.params += static_cast<double>(p.numel);
    if (p.gemm) sc.gemm_params += static_cast<double>(p.numel);
    if (in.ep > 1 && p.name.find(".mlp.experts.") != std::string::npos) sc.expert_params += static_cast<double>(p.numel);
  }
  sc.units = static_cast<int>(held.size()) + (shard.first() ? 1 : 0) + (shard.last() ? 1 : 0);
  // ZeRO 3 in 16 bits: each gathered unit's GEMM weights cast to their working copy (read fp32,
  // write 16 bits) before its forward and again before its backward (model::WorkingWeights).
  if (in.zero >= 3 && in.precision == Precision::kAutocast) {
    const double recast = Op(sc.gemm_params * 6, d.memory_bandwidth, sc.units, d);
    sc.fwd += recast, sc.bwd += recast;
  }
  return sc;
}

// Data parallelism's time over a step on one stage, and the part of it the step waits for.
struct DpCost {
  double total = 0, exposed = 0, bytes = 0;
};

DpCost CostOfDp(const PlanInput& in, const ClusterSpec& cluster, const Links& links, const StageCost& sc) {
  DpCost r;
  const int D = in.dp * in.cp;  // the gradients are summed over dp x cp (each cp rank saw part of the sequences)
  if (D <= 1) return r;
  const double gw = in.precision == Precision::kMixed || in.bf16_grad_reduce ? 2 : 4;
  const double pw = in.precision == Precision::kMixed ? 2 : 4;
  const double m = in.microbatches;
  const double dense = sc.params - sc.expert_params, expert = sc.expert_params;
  const int edp = D / in.ep;
  // Gradients: an all-reduce (ZeRO 0) or reduce-scatter of every bucket, dense over dp and the
  // experts' over edp; parameters: an all-gather of the same split. `pieces` collectives move
  // `params` between them, each paying its latency: the buckets (parallel.bucket_mb), or
  // under ZeRO 3 the units.
  auto reduce = [&](double params, double pieces) {
    const double bytes = params * gw / pieces;
    if (in.zero == 0) {
      return pieces * (AllReduceTime(bytes * dense / sc.params, D, links.dp) +
                       AllReduceTime(bytes * expert / sc.params, edp, links.edp));
    }
    return pieces * (ReduceScatterTime(bytes * dense / sc.params, D, links.dp) +
                     ReduceScatterTime(bytes * expert / sc.params, edp, links.edp));
  };
  auto gather = [&](double params, double pieces) {
    const double bytes = params * pw / pieces;
    return pieces * (ReduceScatterTime(bytes * dense / sc.params, D, links.dp) +
                     ReduceScatterTime(bytes * expert / sc.params, edp, links.edp));
  };
  // Moved per GPU: a ring sends (n-1)/n of the buffer per pass (all-reduce: two passes).
  const double d = D, frac = (d - 1) / d;
  const double bucket_share = std::min(1.0, in.bucket_mb * 1e6 / (sc.params * gw));
  const double unit_share = 1.0 / std::max(1, sc.units);
  const double pieces = in.zero == 3 ? std::max(1, sc.units) : std::ceil(1 / bucket_share);
  const double grads = reduce(sc.params, pieces), params = gather(sc.params, pieces);
  if (in.zero <= 1) {  // once per step, during the last micro-batch's backward
    const double last = reduce(sc.params * bucket_share, 1);
    r.exposed = std::max(last, grads - sc.bwd * (1 - bucket_share));
    r.total = grads;
    r.bytes = sc.params * gw * frac * (in.zero == 0 ? 2 : 1);
    if (in.zero == 1) r.exposed += params, r.total += params, r.bytes += sc.params * pw * frac;
  } else if (in.zero == 2) {  // every micro-batch; the updated parameters gathered after the step
    const double last = reduce(sc.params * bucket_share, 1);
    r.exposed = m * std::max(last, grads - sc.bwd * (1 - bucket_share)) + params;
    r.total = m * grads + params;
    r.bytes = m * sc.params * gw * frac + sc.params * pw * frac;
  } else {  // ZeRO 3: each unit gathered before its forward and its backward, the next prefetched
    double gather_time = params;
    if (in.offload_params) gather_time += sc.params / d * 4 / cluster.device.host_link;  // the shard comes up
    const double fwd = std::max(gather_time * unit_share, gather_time - sc.fwd * (1 - unit_share));
    const double bwd_comm = gather_time + grads;
    const double bwd = std::max(bwd_comm * unit_share, bwd_comm - sc.bwd * (1 - unit_share));
    r.exposed = m * (fwd + bwd);
    r.total = m * (gather_time + bwd_comm);
    r.bytes = m * sc.params * (2 * pw + gw) * frac;
  }
  // Hidden traffic is not free where the collectives share the compute's resources: its
  // measured share of compute time is lost (DeviceProfile::comm_compute_cost).
  r.exposed += cluster.device.comm_compute_cost * std::max(0.0, r.total - r.exposed);
  return r;
}

// Clipping and AdamW over the rank's shard.
double CostOfOptimizer(const PlanInput& in, const DeviceProfile& d, const StageCost& sc) {
  const double D = static_cast<double>(in.dp) * in.cp;  // ZeRO shards over dp x cp
  const double shard = in.zero >= 1 ? sc.params / D : sc.params;
  const double grads = in.zero >= 2 ? sc.params / D : sc.params;
  const double norm = Op(grads * 4, d.memory_bandwidth, 2, d);
  // The 16-bit working copy of the GEMM weights, recast after the update (ZeRO 0-2).
  const double recast =
      in.precision == Precision::kAutocast && in.zero <= 2 ? Op(sc.gemm_params * 6, d.memory_bandwidth, 1, d) : 0;
  if (in.offload_optimizer && in.zero >= 1 && d.host_adamw > 0 && d.host_link > 0) {
    // Gradients down, AdamW on the host, parameters up, pipelined in 16 MB chunks.
    const double down = shard * 4 / d.host_link, adam = shard / d.host_adamw, up = shard * 4 / d.host_link;
    const double chunk = std::min(1.0, 4e6 / std::max(1.0, shard));
    return norm + recast + std::max({down, adam, up}) + chunk * (down + adam + up);
  }
  return norm + recast + Op(shard * 28, d.memory_bandwidth, 1, d);
}

}  // namespace

absl::StatusOr<StepCost> PredictStep(const PlanInput& in, const ClusterSpec& cluster) {
  if (!in.model) return absl::InvalidArgumentError("the step's cost needs the model's shape");
  if (in.pp > in.model->n_layer) return absl::InvalidArgumentError("pp exceeds the layers");
  if (static_cast<int64_t>(in.pp) * std::max(1, in.vp) > in.model->n_layer) {  // a chunk holds a layer at least
    return absl::InvalidArgumentError(absl::StrCat("vp ", in.vp, " with pp ", in.pp, ": ", in.pp * in.vp,
                                                   " chunks of one layer at least, and the model has ",
                                                   in.model->n_layer, " layers"));
  }
  if (in.cp < 1 || in.seq_len % (2 * in.cp) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cp ", in.cp, ": the sequence length ", in.seq_len, " is not a multiple of 2 x cp"));
  }
  const DeviceProfile& d = cluster.device;
  if (d.memory_bandwidth <= 0 || d.gemm_fwd[0] <= 0 || d.gemm_bwd[0] <= 0 || d.gemm_fwd[1] <= 0 ||
      d.gemm_bwd[1] <= 0 || d.peak_flops <= 0 ||
      (!d.unfused_attention && (d.attention_fwd[0] <= 0 || d.attention_bwd[0] <= 0))) {
    return absl::InvalidArgumentError(absl::StrCat("device profile '", d.name, "' lacks a rate"));
  }
  if (cluster.intra.bandwidth <= 0 || cluster.inter.bandwidth <= 0 || cluster.gpus_per_node < 1) {
    return absl::InvalidArgumentError(absl::StrCat("cluster '", cluster.name, "' lacks a link's bandwidth"));
  }
  const Links links = LinksOf(in, cluster);
  const double m = in.microbatches, p = in.pp;
  StepCost r;
  double slowest = 0, slowest_compute = 0, slowest_comm = 0, tail = 0, flops = 0, model_flops = 0;
  double tail_opt = 0, tail_dp = 0;
  for (int stage = 0; stage < in.pp; ++stage) {
    ModelShard shard = ShardOf(*in.model, in.tp, 0, in.pp, stage, in.stage_layers, in.vp);
    shard.sequence_parallel = in.sequence_parallel && in.tp > 1;
    shard.ep = in.ep;
    const StageCost sc = CostOfStage(in, cluster, links, shard);
    const DpCost dp = CostOfDp(in, cluster, links, sc);
    const double opt = CostOfOptimizer(in, d, sc);
    const double comm = sc.tp + sc.ep + sc.pp + sc.cp;
    const double per_micro = sc.fwd + sc.bwd + comm;
    if (per_micro > slowest) {
      slowest = per_micro, slowest_compute = sc.fwd + sc.bwd, slowest_comm = comm;
      r.tp_comm = m * sc.tp, r.ep_comm = m * sc.ep, r.pp_comm = m * sc.pp, r.cp_comm = m * sc.cp;
    }
    // ZeRO 2-3's per-micro-batch collectives lengthen each micro-batch of the stage; ZeRO 0-1's
    // and the optimizer come after the pipeline drains: the step ends with the slowest stage's.
    if (dp.exposed + opt > tail) tail = dp.exposed + opt, tail_opt = opt, tail_dp = dp.exposed;
    r.dp_comm_total = std::max(r.dp_comm_total, dp.total);
    r.dp_bytes = std::max(r.dp_bytes, dp.bytes);
    flops += sc.flops;
    model_flops += sc.model_flops;
  }
  r.compute = m * slowest_compute;
  // The fill and drain: p - 1 micro-batches' time of the slowest stage, a chunk's under the
  // interleaved schedule (1/vp of a stage's).
  r.bubble = (p - 1) * slowest / in.vp;
  r.dp_comm = tail_dp;
  r.optimizer = tail_opt;
  r.exposed_comm = m * slowest_comm + tail_dp;
  r.step = r.compute + r.bubble + r.exposed_comm + r.optimizer;
  const double world = static_cast<double>(in.dp) * in.cp * in.tp * in.pp;
  r.tokens = static_cast<double>(in.micro_batch) * in.microbatches * in.dp * in.seq_len;
  r.tokens_per_s = r.tokens / r.step;
  r.tokens_per_s_per_gpu = r.tokens_per_s / world;
  // Each stage's FLOPs are per tp rank and micro-batch: every replica does the same.
  r.flops_per_gpu = flops * m / (p * r.step);
  r.mfu = model_flops * m / (p * r.step) / d.peak_flops;
  return r;
}

absl::StatusOr<std::vector<RankedLayout>> RankLayouts(PlanInput in, const ClusterSpec& cluster, int gpus,
                                                      int global_batch, int top,
                                                      const std::function<bool(const PlanInput&)>& admit) {
  if (!in.model) return absl::InvalidArgumentError("ranking layouts needs the model's shape");
  if (gpus < 1 || global_batch < 1 || top < 1) {
    return absl::InvalidArgumentError("ranking layouts needs gpus, a global batch and a count >= 1");
  }
  const GPTConfig& c = *in.model;
  in.device_memory = cluster.device.memory;
  in.fused_attention = !cluster.device.unfused_attention;  // the activations the device's attention keeps
  in.grouped_attention = GroupedAttentionOf(in);
  struct Candidate {
    PlanInput in;
    StepCost cost;
  };
  std::vector<Candidate> all;
  // Context parallelism and the interleaved schedule, bounded (RankLayouts' comment in
  // cost_model.h gives the rule): cp powers of two up to kMaxCp, only at micro-batch 1, with
  // 2·cp dividing T and T/cp at least kMinCpRows; vp 2 and 4 with pp > 1, the micro-batches a
  // multiple of pp and a layer at least a chunk.
  constexpr int kMaxCp = 32, kMinCpRows = 1024;
  std::map<std::pair<int, int>, std::vector<int>> splits;
  auto split = [&](int pp, int vp) -> const std::vector<int>& {
    std::vector<int>& layers = splits[{pp, vp}];
    if (layers.empty()) {
      const std::vector<int> bounds = vp > 1 ? BalanceChunks(c, pp, vp) : BalanceStages(c, pp);
      for (size_t i = 0; i + 1 < bounds.size(); ++i) layers.push_back(bounds[i + 1] - bounds[i]);
    }
    return layers;
  };
  std::vector<int> cps = {1};
  for (int cp = 2; cp <= kMaxCp && in.seq_len % (2 * cp) == 0 && in.seq_len / cp >= kMinCpRows; cp *= 2) {
    cps.push_back(cp);
  }
  for (int tp = 1; tp <= std::min(gpus, cluster.gpus_per_node); tp *= 2) {
    if (gpus % tp != 0 || c.n_head % tp != 0 || c.kv_heads() % tp != 0 || c.ffn() % tp != 0) continue;
    for (int cp : cps) {
      if ((gpus / tp) % cp != 0) continue;
      for (int pp = 1; pp <= std::min(gpus / (tp * cp), c.n_layer); ++pp) {
        if ((gpus / (tp * cp)) % pp != 0) continue;  // (pp up to the layers: uneven stages split them, BalanceStages)
        const int dp = gpus / (tp * cp * pp);
        if (in.ep > 1 && dp % in.ep != 0) continue;
        for (int zero = 0; zero <= 3; ++zero) {
          if (pp > 1 && zero >= 2) continue;  // the job spec refuses ZeRO 2-3 with pp
          if (in.offload_optimizer && zero == 0) continue;
          if (in.offload_params && zero < 3) continue;
          for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
            for (bool sp : {false, true}) {
              if (sp && tp == 1) continue;
              for (int mb = 1; mb <= 64; mb *= 2) {
                if (global_batch % (mb * dp) != 0) continue;
                if (cp > 1 && mb > 1) continue;  // (mb 2 at cp 2 is mb 1 at dp x 2 plus a ring)
                const int m = global_batch / (mb * dp);
                for (int vp : {1, 2, 4}) {
                  if (vp > 1 && (pp == 1 || in.schedule != Schedule::k1F1B || m % pp != 0 || pp * vp > c.n_layer)) {
                    continue;
                  }
                  PlanInput x = in;
                  x.tp = tp, x.pp = pp, x.dp = dp, x.cp = cp, x.vp = vp, x.zero = zero, x.recompute = rc;
                  x.micro_batch = mb, x.sequence_parallel = sp, x.microbatches = m;
                  // A stated split is of its own pp x vp chunks; other layouts split by cost, the
                  // split computed once (BalanceStages is quadratic in the layers) and given to the
                  // cost and the plan as stated layers (the same bounds ShardOf would find).
                  if (x.stage_layers.size() != static_cast<size_t>(pp * vp)) x.stage_layers = split(pp, vp);
                  if (admit && !admit(x)) continue;
                  auto cost = PredictStep(x, cluster);
                  if (!cost.ok()) continue;
                  all.push_back({x, *cost});
                }
              }
            }
          }
        }
      }
    }
  }
  // Fastest first (ties: less model parallelism, then lower ZeRO stage); memory is checked in
  // that order until `top` fit.
  std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    if (a.cost.tokens_per_s != b.cost.tokens_per_s) return a.cost.tokens_per_s > b.cost.tokens_per_s;
    const int ma = a.in.tp * a.in.pp * a.in.cp, mb = b.in.tp * b.in.pp * b.in.cp;
    if (ma != mb) return ma < mb;
    if (a.in.vp != b.in.vp) return a.in.vp < b.in.vp;
    return a.in.zero < b.in.zero;
  });
  std::vector<RankedLayout> out;
  for (const Candidate& x : all) {
    auto plan = MakePlan(x.in);
    if (!plan.ok() || !plan->fits) continue;
    out.push_back({x.in, *plan, x.cost});
    if (in.stage_layers.empty()) out.back().in.stage_layers.clear();  // (split by cost, as given)
    if (static_cast<int>(out.size()) >= top) break;
  }
  if (all.empty()) {
    return absl::NotFoundError(absl::StrFormat(
        "no layout of %d GPUs divides the model and global batch %d (tp up to %d dividing the heads, pp the "
        "layers, cp a power of two with 2 x cp dividing the sequence, dp x a micro-batch of a power of two the "
        "global batch)",
        gpus, global_batch, cluster.gpus_per_node));
  }
  if (out.empty()) {
    std::string least;  // the layout that needs the least memory, and how much
    double least_bytes = 0;
    for (const Candidate& x : all) {
      auto plan = MakePlan(x.in);
      if (!plan.ok() || (!least.empty() && plan->total() >= least_bytes)) continue;
      least_bytes = plan->total();
      least = absl::StrFormat(
          "; the least any needs is %.3g GB per GPU (tp %d, cp %d, pp %d, vp %d, dp %d, ZeRO %d, recompute %s, "
          "micro_batch %d)",
          least_bytes / 1e9, x.in.tp, x.in.cp, x.in.pp, x.in.vp, x.in.dp, x.in.zero,
          x.in.recompute == Recompute::kFull ? "full" : x.in.recompute == Recompute::kSelective ? "selective" : "none",
          x.in.micro_batch);
    }
    return absl::NotFoundError(absl::StrFormat(
        "no layout of %d GPUs fits 90%% of %.2f GB each at global batch %d (%zu layouts tried, up to tp %d: a "
        "node)%s",
        gpus, cluster.device.memory / 1e9, global_batch, all.size(), cluster.gpus_per_node, least));
  }
  return out;
}

}  // namespace gantry::jobspec
