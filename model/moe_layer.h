// The model's mixture-of-experts MLPs (GPT-2 blocks with config.moe): the router's choice and
// capacity, the dispatch of rows to the experts (over the expert-parallel group's all-to-all
// when ep > 1), each expert's dense MLP, the weighted combine, and their backward
// (kernels/moe.h states each op). MoeLayers owns what the routing adds up (MoeStats, the loss
// terms of a forward) and the expert-parallel exchange; the model hands it each layer's
// activations and weights, and the few things it needs of the model (MoeHost).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "comm/comm_thread.h"
#include "comm/communicator.h"
#include "jobspec/model_layout.h"
#include "kernels/backend.h"

namespace gantry::model {

// What the forwards routed since the last TakeStats (summed over the MoE layers and the
// forwards), and the loss terms they added.
struct MoeStats {
  int forwards = 0;                        // micro-batch forwards counted
  double aux = 0, z = 0;                   // Σ over layers and forwards, before the coefficients
  int64_t assignments = 0, dropped = 0;    // token-expert assignments, and those over capacity
  std::vector<int64_t> tokens_per_expert;  // routed (before drops), summed over layers
};

// What an MoE layer asks of the model that runs it.
class MoeHost {
 public:
  virtual ~MoeHost() = default;
  // Runs f as the op `name` (timed when the model profiles).
  virtual void RunOp(const char* name, const std::function<void()>& f) = 0;
  // Sums a partial result over the tensor-parallel group.
  virtual void TpAllReduce(float* data, size_t n) = 0;
  // Waits for the backend's queued ops; the first error is the model's.
  virtual void Sync() = 0;
  // An error of the layer's (an exchange): kept as the model's first error.
  virtual void Fail(absl::Status s) = 0;
};

// One MoE layer's activations (kernels/moe.h's shapes; jobspec::ActivationLayout's moe_*
// entries): those kept from forward to backward, and the working rows shared by the layers.
struct MoeActivations {
  float *probs, *lse, *weight, *stats;  // router: probabilities (then logits), log-sum-exp, weights, (aux, z)
  int32_t *choice, *slot, *counts;      // the choice, each assignment's slot, the counts and offsets
  float *x, *y;                         // dispatched rows and the experts' outputs
  float *fch, *gelu;                    // the experts' c_fc output and its GELU
  float* xr;                            // ep > 1: the rows received for the experts here
  int32_t* rcounts;                     // ep > 1: [kept (E) | received (E)] counts
};
struct MoeScratch {
  float *yr;                        // ep > 1: the outputs of the rows received
  float *dy, *dw, *dx, *dlogits;    // backward: d(Y), d(weights), d(X), d(router logits)
  float *dfch;                      // d(c_fc output)
  float *dyr, *dxr;                 // ep > 1: the received rows' d(Y) and d(X)
};

class MoeLayers {
 public:
  // Fm: the experts' MLP width on this rank.
  MoeLayers(const jobspec::GPTConfig& config, const jobspec::ModelShard& shard, int Fm, kernels::Backend* backend,
            MoeHost* host);
  // Expert parallelism (shard.ep > 1): the group whose ranks hold the other experts.
  void set_ep_comm(comm::Communicator* comm) { ep_comm_ = comm; }
  // Context parallelism: the communication thread of the cp group (not owned; null: cp 1),
  // whose ranks hold the other rows of each micro-batch. The load-balancing loss is the
  // micro-batch's: each layer's routed counts, its router probabilities' column sums and its
  // z-loss are summed over the group, and each rank's router backward reads the group's counts
  // (at 1/cp of the coefficient: the gradients are averaged over the group). The capacity
  // stays each rank's own: ceil(capacity_factor · rows · top_k / E) of its rows (Megatron-Core's
  // rule; docs/decisions.md). What TakeStats counts is the group's.
  void set_cp(comm::CommThread* cp) { cp_ = cp; }
  // Floats of one expert's tensors on this rank (c_fc weight and bias, c_proj weight and bias).
  size_t expert_stride() const { return expert_stride_; }

  // A forward of a micro-batch begins; dloss_scale is the model's (0: an evaluation, whose
  // routing is not counted).
  void BeginForward(float dloss_scale);
  // A layer's MLP forward from ln_2's output (all rows) into proj (the experts' weighted
  // outputs, partial over tensor-parallel ranks). gate (E, C) and experts: the layer's fp32
  // tensors. tag: non-empty in a recomputation (named so, and counted nothing again).
  void Forward(const MoeActivations& a, const MoeScratch& s, const float* gate, const float* experts,
               kernels::CPtr ln2, int BT, float* proj, const char* tag);
  // Its backward from dout (all rows) into dln (d ln_2's output, partial over tensor-parallel
  // ranks) and the layer's gradients dgate, dexperts.
  void Backward(const MoeActivations& a, const MoeScratch& s, const float* gate, const float* experts, float* dgate,
                float* dexperts, kernels::CPtr ln2, kernels::CPtr dout, int BT, float* dln);
  // The forward's layers are done: its loss terms (aux_loss_coeff · Σ aux + z_loss_coeff · Σ z),
  // counted into the stats when it trains.
  void EndForward();
  float last_loss() const { return last_loss_; }
  MoeStats TakeStats() {
    MoeStats s = std::move(stats_);
    stats_ = MoeStats{};
    return s;
  }

 private:
  // Expert e's tensors from the layer's experts pointer (its weights, or its gradients).
  template <typename F>
  struct Expert {
    F *fcw, *fcb, *projw, *projb;
  };
  template <typename F>
  Expert<F> ExpertOf(F* experts, int e) const {
    F* x = experts + static_cast<size_t>(e) * expert_stride_;
    const size_t C = static_cast<size_t>(config_.n_embd), Fm = static_cast<size_t>(Fm_);
    return {x, x + C * Fm, x + C * Fm + Fm, x + 2 * C * Fm + Fm};
  }
  // The dispatch offsets of the layer's last routing (E + 1), read back to the host with its stats.
  const std::vector<int32_t>& Offsets(const MoeActivations& a);
  // Where the experts held here find their rows: segments of (held expert, first row, rows)
  // in the rows they read (ep 1: the dispatch buffer, by expert; ep > 1: the rows received,
  // by peer, then expert), and under ep the floats exchanged with each peer (send: this
  // rank's dispatched rows for the peer's experts; recv: the peer's rows for the experts
  // here). `offset` is Offsets' (E + 1). exchange: the forward's (the kept counts go to their
  // experts' ranks); else the counts the forward received are read back.
  struct Rows {
    struct Segment {
      int expert, row, rows;
    };
    std::vector<Segment> segments;
    std::vector<size_t> send, recv;
  };
  Rows ExpertRows(const MoeActivations& a, const int32_t* offset, bool exchange);
  // The ep group's all-to-all of rows (an error goes to the host).
  void AllToAllV(const float* in, const std::vector<size_t>& send, float* out, const std::vector<size_t>& recv);
  // A training forward (dloss != 0) counts its routing; an evaluation's is not counted.
  bool counting() const { return dloss_ != 0.f; }
  // Context parallelism: the layer's routing statistics (Offsets' routed counts, layer_stats_)
  // made the cp group's, the counts written back to a.counts for the router's backward; the
  // group's kept assignments. BT: this rank's rows.
  int64_t ReduceOverCp(const MoeActivations& a, int BT);
  int cp_size() const { return cp_ != nullptr ? cp_->comm().size() : 1; }

  const jobspec::GPTConfig config_;
  const jobspec::ModelShard shard_;
  const int Fm_;
  const size_t expert_stride_;
  kernels::Backend* be_;
  MoeHost* host_;
  comm::Communicator* ep_comm_ = nullptr;
  comm::CommThread* cp_ = nullptr;
  std::vector<float> probs_host_;    // cp: the router's probabilities, read back for their column sums
  float dloss_ = 0.f;                // the micro-batch's dloss_scale, for the losses' backward
  std::vector<int32_t> counts_host_;
  std::vector<int32_t> rcounts_host_;
  float layer_stats_[2] = {};        // the last routing's aux and z, read back with its offsets
  double fwd_aux_ = 0, fwd_z_ = 0;   // the forward's, summed over its layers
  float last_loss_ = 0.f;
  MoeStats stats_;
};

}  // namespace gantry::model
