#include "model/moe_layer.h"

#include <utility>

#include "kernels/moe.h"

namespace gantry::model {

namespace k = kernels;

MoeLayers::MoeLayers(const jobspec::GPTConfig& config, const jobspec::ModelShard& shard, int Fm,
                     kernels::Backend* backend, MoeHost* host)
    : config_(config),
      shard_(shard),
      Fm_(Fm),
      expert_stride_(2 * static_cast<size_t>(config.n_embd) * static_cast<size_t>(Fm) + static_cast<size_t>(Fm) +
                     static_cast<size_t>(config.n_embd)),
      be_(backend),
      host_(host) {}

void MoeLayers::BeginForward(float dloss_scale) {
  dloss_ = dloss_scale;
  fwd_aux_ = fwd_z_ = 0;
}

void MoeLayers::EndForward() {
  const double aux = fwd_aux_, z = fwd_z_;
  last_loss_ = static_cast<float>(config_.moe.aux_loss_coeff * aux + config_.moe.z_loss_coeff * z);
  if (counting() && config_.moe.num_experts > 0) {
    stats_.aux += aux;
    stats_.z += z;
    ++stats_.forwards;
  }
}

const std::vector<int32_t>& MoeLayers::Offsets(const MoeActivations& a) {
  const int E = config_.moe.num_experts;
  counts_host_.resize(static_cast<size_t>(kernels::MoeCountsSize(E)));
  be_->CopyToHost(counts_host_.data(), a.counts, counts_host_.size() * sizeof(int32_t));
  be_->CopyToHost(layer_stats_, a.stats, sizeof(layer_stats_));
  host_->Sync();  // the experts' GEMMs need the row counts on the host
  return counts_host_;
}

int64_t MoeLayers::ReduceOverCp(const MoeActivations& a, int BT) {
  // The micro-batch's N = cp·BT rows are spread over the group. Its load-balancing loss is
  // aux = E · Σ_e f_e · P_e with f_e = routed_e / (k N) and P_e = Σ_n probs[n, e] / N over all
  // of them: the group's sums of each rank's routed counts and column sums. Its z-loss is the
  // mean of the ranks' means (equal rows). Summed as one buffer of 2E + 2 floats (the counts,
  // integers below 2^24, exactly): [routed (E) | column sums (E) | kept | z].
  const int E = config_.moe.num_experts, K = config_.moe.top_k, cp = cp_size();
  const size_t ne = static_cast<size_t>(E);
  probs_host_.resize(static_cast<size_t>(BT) * ne);
  be_->CopyToHost(probs_host_.data(), a.probs, probs_host_.size() * sizeof(float));
  host_->Sync();
  std::vector<float> sums(2 * ne + 2);
  for (size_t e = 0; e < ne; ++e) {
    double P = 0;  // (in the kernel's order: rows in turn, in double)
    for (size_t n = 0; n < static_cast<size_t>(BT); ++n) P += probs_host_[n * ne + e];
    sums[e] = static_cast<float>(counts_host_[e]);
    sums[ne + e] = static_cast<float>(P);
  }
  sums[2 * ne] = static_cast<float>(counts_host_[2 * ne]);  // offset[E]: the kept assignments
  sums[2 * ne + 1] = layer_stats_[1];
  absl::Status s =
      cp_->Wait(cp_->Submit([&sums](comm::Communicator& c) { return c.AllReduceSum(sums.data(), sums.size()); }));
  if (!s.ok()) {
    host_->Fail(std::move(s));
    return counts_host_[2 * ne];
  }
  const double N = static_cast<double>(BT) * cp;
  double aux = 0;
  for (size_t e = 0; e < ne; ++e) {
    counts_host_[e] = static_cast<int32_t>(sums[e]);
    aux += static_cast<double>(sums[e]) / (static_cast<double>(K) * N) * (static_cast<double>(sums[ne + e]) / N);
  }
  layer_stats_[0] = static_cast<float>(E * aux);
  layer_stats_[1] = sums[2 * ne + 1] / static_cast<float>(cp);
  // The router's backward reads the routed counts: the group's.
  be_->CopyToDevice(a.counts, counts_host_.data(), ne * sizeof(int32_t));
  return static_cast<int64_t>(sums[2 * ne]);
}

MoeLayers::Rows MoeLayers::ExpertRows(const MoeActivations& a, const int32_t* offset, bool exchange) {
  const int E = config_.moe.num_experts, ep = shard_.ep;
  Rows r;
  if (ep == 1) {
    for (int e = 0; e < E; ++e) r.segments.push_back({e, offset[e], offset[e + 1] - offset[e]});
    return r;
  }
  const int Eh = E / ep;
  const size_t C = static_cast<size_t>(config_.n_embd);
  int32_t* counts = a.rcounts;  // [kept (E) | received (E)]
  rcounts_host_.resize(static_cast<size_t>(2 * E));
  int32_t* kept = rcounts_host_.data();
  const int32_t* got = kept + E;
  for (int e = 0; e < E; ++e) kept[e] = offset[e + 1] - offset[e];
  if (exchange) {
    // Each peer's block of kept counts (its experts', peer-major as the dispatch is) goes to
    // it; the counts are int32 moved as 4-byte words, unchanged.
    be_->CopyToDevice(counts, kept, static_cast<size_t>(E) * sizeof(int32_t));
    host_->Sync();
    absl::Status s = ep_comm_ != nullptr
                         ? ep_comm_->AllToAll(reinterpret_cast<const float*>(counts),
                                              reinterpret_cast<float*>(counts + E), static_cast<size_t>(Eh))
                         : absl::FailedPreconditionError("expert parallelism without an expert-parallel group");
    if (!s.ok()) host_->Fail(std::move(s));
  }
  be_->CopyToHost(rcounts_host_.data() + E, counts + E, static_cast<size_t>(E) * sizeof(int32_t));
  host_->Sync();
  int row = 0;
  for (int q = 0; q < ep; ++q) {
    size_t sent = 0, received = 0;
    for (int j = 0; j < Eh; ++j) {
      sent += static_cast<size_t>(kept[q * Eh + j]);
      const int n = got[q * Eh + j];
      received += static_cast<size_t>(n);
      if (n > 0) r.segments.push_back({j, row, n});
      row += n;
    }
    r.send.push_back(sent * C);
    r.recv.push_back(received * C);
  }
  return r;
}

void MoeLayers::AllToAllV(const float* in, const std::vector<size_t>& send, float* out,
                          const std::vector<size_t>& recv) {
  host_->Sync();  // the collective reads what the queued ops write
  absl::Status s = ep_comm_ != nullptr
                       ? ep_comm_->AllToAllV(in, send, out, recv)
                       : absl::FailedPreconditionError("expert parallelism without an expert-parallel group");
  if (!s.ok()) host_->Fail(std::move(s));
}

void MoeLayers::Forward(const MoeActivations& a, const MoeScratch& s, const float* gate, const float* experts,
                        kernels::CPtr ln2, int BT, float* proj, const char* tag) {
  const int C = config_.n_embd, Fm = Fm_, E = config_.moe.num_experts, K = config_.moe.top_k;
  auto name = [tag](const char* op) { return *tag ? tag : op; };
  const bool bias_here = shard_.tp_rank == 0;
  // The router: logits (B·T, E) into probs, then the choice, the weights and the capacity.
  host_->RunOp(name("moe router fwd"), [&] {
    be_->MatmulForward(a.probs, ln2, gate, nullptr, BT, C, E, k::WeightLayout::kOutIn);
    be_->MoeRoute(a.probs, a.lse, a.choice, a.weight, a.slot, a.counts, a.stats, a.probs, BT, E, K,
                  jobspec::MoeCapacity(config_.moe, BT));
  });
  const std::vector<int32_t>& c = Offsets(a);
  const int32_t* offset = c.data() + E;
  // (Context parallelism: the statistics of the cp group's rows, a recomputation's too: its
  // routing rewrote the counts the backward reads.)
  const int64_t kept = cp_ != nullptr ? ReduceOverCp(a, BT) : offset[E];
  if (*tag == '\0') {  // the forward's loss terms (a recomputation's are the same, not added again)
    fwd_aux_ += layer_stats_[0];
    fwd_z_ += layer_stats_[1];
  }
  if (*tag == '\0' && counting()) {  // training forwards; a recomputation counts nothing again
    if (stats_.tokens_per_expert.empty()) stats_.tokens_per_expert.assign(static_cast<size_t>(E), 0);
    for (int e = 0; e < E; ++e) stats_.tokens_per_expert[static_cast<size_t>(e)] += c[static_cast<size_t>(e)];
    const int64_t assigned = static_cast<int64_t>(BT) * K * cp_size();
    stats_.assignments += assigned;
    stats_.dropped += assigned - kept;
  }
  host_->RunOp(name("moe dispatch"),
               [&] { be_->MoeDispatch(a.x, static_cast<const float*>(ln2.data), a.slot, BT, K, C); });
  // Expert parallelism: the rows go to their experts' ranks (the peers' rows come here).
  const bool ep = shard_.ep > 1;
  const Rows rows = ExpertRows(a, offset, /*exchange=*/true);
  float* in = a.x;
  float* out = a.y;
  if (ep) {
    in = a.xr;
    out = s.yr;
    host_->RunOp(name("ep all-to-all"), [&] { AllToAllV(a.x, rows.send, in, rows.recv); });
  }
  // Each expert on its rows: the dense MLP's two GEMMs (tensor-parallel partial sums, rank 0
  // adding c_proj's bias), then (back on the rows' ranks) the weighted combine into proj.
  for (const Rows::Segment& sg : rows.segments) {
    const size_t o = static_cast<size_t>(sg.row);
    const int n = sg.rows;
    if (n == 0) continue;
    const Expert<const float> x = ExpertOf(experts, sg.expert);
    host_->RunOp(name("matmul+gelu fwd"), [&] {
      be_->MatmulBiasGeluForward(a.fch + o * Fm, a.gelu + o * Fm, in + o * C, x.fcw, x.fcb, n, C, Fm);
    });
    host_->RunOp(name("matmul fwd"), [&] {
      be_->MatmulForward(out + o * C, a.gelu + o * Fm, x.projw, bias_here ? x.projb : nullptr, n, Fm, C);
    });
  }
  if (ep) host_->RunOp(name("ep all-to-all"), [&] { AllToAllV(out, rows.recv, a.y, rows.send); });
  host_->RunOp(name("moe combine"), [&] { be_->MoeCombine(proj, a.y, a.slot, a.weight, BT, K, C); });
}

void MoeLayers::Backward(const MoeActivations& a, const MoeScratch& s, const float* gate, const float* experts,
                         float* dgate, float* dexperts, kernels::CPtr ln2, kernels::CPtr dout, int BT, float* dln) {
  const int C = config_.n_embd, Fm = Fm_, E = config_.moe.num_experts, K = config_.moe.top_k;
  host_->RunOp("moe combine bwd", [&] {
    be_->MoeCombineBackward(s.dy, s.dw, static_cast<const float*>(dout.data), a.y, a.slot, a.weight, BT, K, C);
  });
  // The weights' gradient reads the experts' outputs, partial over tensor-parallel ranks.
  host_->RunOp("tp all-reduce", [&] { host_->TpAllReduce(s.dw, static_cast<size_t>(BT) * K); });
  const std::vector<int32_t>& c = Offsets(a);
  const int32_t* offset = c.data() + E;
  // Expert parallelism: the outputs' gradients go to the experts' ranks, the inputs' come back.
  const bool ep = shard_.ep > 1;
  const Rows rows = ExpertRows(a, offset, /*exchange=*/false);
  const float* in = a.x;
  float* dout_rows = s.dy;
  float* din_rows = s.dx;
  if (ep) {
    in = a.xr;
    dout_rows = s.dyr;
    din_rows = s.dxr;
    host_->RunOp("ep all-to-all", [&] { AllToAllV(s.dy, rows.send, dout_rows, rows.recv); });
  }
  for (const Rows::Segment& sg : rows.segments) {
    const size_t o = static_cast<size_t>(sg.row);
    const int n = sg.rows;
    if (n == 0) continue;  // an expert without tokens: a zero gradient
    const Expert<const float> w = ExpertOf(experts, sg.expert);
    const Expert<float> d = ExpertOf(dexperts, sg.expert);
    host_->RunOp("matmul+gelu bwd", [&] {
      be_->MatmulBackward(s.dfch + o * Fm, d.projw, d.projb, dout_rows + o * C, a.gelu + o * Fm, w.projw, n, Fm, C,
                          k::WeightLayout::kInOut, a.fch + o * Fm);
    });
    host_->RunOp("matmul bwd", [&] {
      be_->MatmulBackward(din_rows + o * C, d.fcw, d.fcb, s.dfch + o * Fm, in + o * C, w.fcw, n, C, Fm);
    });
  }
  if (ep) host_->RunOp("ep all-to-all", [&] { AllToAllV(din_rows, rows.recv, s.dx, rows.send); });
  // The router: its logits' gradient from the weights' and the two losses' (scaled as the
  // micro-batch's loss is), then its GEMM. Its part of d(ln_2 out) is the same on every
  // tensor-parallel rank: rank 0 adds it, so that the group's sum counts it once.
  host_->RunOp("moe router bwd", [&] {
    // (Context parallelism: the counts are the group's, cp times this rank's rows' share, so
    // the load-balancing term's coefficient is 1/cp of it.)
    be_->MoeRouterBackward(s.dlogits, s.dw, a.probs, a.lse, a.choice, a.weight, a.counts, BT, E, K,
                           dloss_ * static_cast<float>(config_.moe.aux_loss_coeff) / static_cast<float>(cp_size()),
                           dloss_ * static_cast<float>(config_.moe.z_loss_coeff));
    const bool here = shard_.tp_rank == 0;
    be_->MatmulBackward(here ? dln : nullptr, dgate, nullptr, s.dlogits, ln2, gate, BT, C, E,
                        k::WeightLayout::kOutIn);
    if (!here) be_->Zero(dln, static_cast<size_t>(BT) * C * sizeof(float));
  });
  host_->RunOp("moe dispatch bwd", [&] { be_->MoeDispatchBackward(dln, s.dx, a.slot, BT, K, C); });
}

}  // namespace gantry::model
