// What the model's parts share while a forward or backward runs: the backend, this shard's
// dimensions, the current slot's activations (addressed by jobspec::ActivationLayout), the
// precision, the per-op profile and the first error. The stack (GPT) owns one; its blocks
// (model/block.h) and the tensor-parallel helper (model/tensor_parallel.h) work through it.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "jobspec/model_layout.h"
#include "kernels/backend.h"

namespace gantry::model {

class RingAttention;

// The sizes of one shard's share of the model (tensor parallel: per rank).
struct ShardDims {
  int C = 0;            // n_embd (the residual stream's width, never split)
  int Ca = 0, NH = 0;   // attention width and query heads on this rank
  int NKV = 0, hd = 0;  // key/value heads on this rank, head_dim
  int Fm = 0;           // MLP width on this rank (Llama: each of gate and up)
  int v0 = 0, Vl = 0;   // this rank's vocabulary rows: [v0, v0 + Vl)
  int lb = 0, le = 0;   // this shard's layers: [lb, le)
  static ShardDims Of(const jobspec::GPTConfig& config, const jobspec::ModelShard& shard);
};

class RunContext {
 public:
  RunContext(const jobspec::GPTConfig& config, const jobspec::ModelShard& shard, kernels::Backend* backend)
      : be_(backend), config_(config), shard_(shard), dims_(ShardDims::Of(config, shard)) {}
  RunContext(const RunContext&) = delete;
  RunContext& operator=(const RunContext&) = delete;

  kernels::Backend& be() const { return *be_; }
  const jobspec::GPTConfig& config() const { return config_; }
  const jobspec::ModelShard& shard() const { return shard_; }
  const ShardDims& dims() const { return dims_; }
  // The interleaved pipeline: the layers [lb, le) of the chunk that runs next (dims().lb, le).
  void set_layers(int lb, int le) {
    dims_.lb = lb;
    dims_.le = le;
  }

  // The activations: their layout (for the current (B,T)), the buffer that holds them and the
  // current slot (micro-batch in flight). An offset in the stage's region (below off().shared)
  // addresses the buffer's one copy of it; one in the micro-batch's region, the current slot's
  // (jobspec::ActivationLayout: the slots follow the stage's region, off().kept floats each).
  const jobspec::ActivationLayout& off() const { return off_; }
  void set_layout(const jobspec::ActivationLayout& o) { off_ = o; }
  void set_base(float* base, int slot = 0) { set_bases(base, base + static_cast<size_t>(slot) * off_.kept); }
  // The stage's region at `stage`, and the address the current slot's offsets are from (the
  // interleaved pipeline's chunks lay their slots out apart from their layouts: GPT::Select).
  void set_bases(float* stage, float* slot) {
    stage_ = stage;
    slot_ = slot;
  }
  float* A(size_t off) const { return (off < off_.shared ? stage_ : slot_) + off; }
  // Layer l's activation at offset `off` of a layer's block: under full recompute the layers
  // are recomputed into one block of the stage's; under selective recompute the attention's
  // probabilities (att) are the stage's.
  float* LayerAct(int l, size_t off) const {
    l -= dims_.lb;
    if (off_.recompute == jobspec::Recompute::kFull) return stage_ + off_.scratch + off;
    if (off_.recompute == jobspec::Recompute::kSelective && off == off_.att) return stage_ + off_.scratch;
    return slot_ + off_.layer0 + static_cast<size_t>(l) * off_.layer_stride + off;
  }
  // Layer l's output (the next layer's input): kept for the micro-batch, except the last
  // layer's on a stage that sends it (the stage's, until sent).
  float* LayerOutput(int l) const {
    if (off_.output_shared && l == dims_.le - 1) return stage_ + off_.output;
    return slot_ + off_.outputs + static_cast<size_t>(l - dims_.lb) * off_.output_stride;
  }

  // Context parallelism (cp > 1; model/context_parallel.h): the current (B, T) are this rank's
  // rows of each sequence, at the global positions positions()[0, T) (int32, the backend's
  // memory); attention runs over the whole sequence by ring(). Null ring (and positions): no
  // context parallelism.
  RingAttention* ring() const { return ring_; }
  const int32_t* positions() const { return positions_; }
  void set_context_parallel(RingAttention* ring, const int32_t* positions) {
    ring_ = ring;
    positions_ = positions;
  }
  // Mixed precision under context parallelism: fp32 copies of the ring's 16-bit operands and
  // results (the ring computes in fp32), the backend's memory kept between calls; i < 4.
  float* RingScratch(int i, size_t n) {
    kernels::DeviceBuffer& v = ring_scratch_[static_cast<size_t>(i)];
    if (v.size() < n) v.Assign(be_, n, /*zero=*/false);
    return v.data();
  }
  // Their bytes, as allocated so far (the model's memory account counts them with the ring's).
  size_t ring_scratch_bytes() const {
    size_t n = 0;
    for (const auto& v : ring_scratch_) n += v.size() * sizeof(float);
    return n;
  }

  // Mixed precision (train.precision): activations autocast holds in 16 bits are of the
  // 16-bit type (H), and fp32 results that autocast would round are rounded (Round).
  kernels::Precision precision() const { return lp_; }
  void set_precision(kernels::Precision p) { lp_ = p; }
  bool mixed() const { return lp_ != kernels::Precision::kFp32; }
  kernels::Ptr H(float* p) const { return mixed() ? kernels::Ptr(p, lp_) : kernels::Ptr(p); }
  // n values of an fp32 buffer rounded in place to the 16-bit type (nothing in fp32).
  void Round(float* p, size_t n) const {
    if (mixed()) be_->RoundTo(p, p, static_cast<int64_t>(n), lp_);
  }
  // The backward's 16-bit gradient casts fused into the ops that make the gradients, where the
  // layout allows (model::TensorParallel::CastsFused; GPT::set_fused_grad_casts).
  bool grad_casts_fused() const { return grad_casts_fused_; }
  void set_grad_casts_fused(bool on) { grad_casts_fused_ = on; }

  // Runs f as the op `name`: timed (to the backend's completion) while profiling is on.
  template <typename F>
  void Op(const char* name, F&& f) {
    if (!profiling_) {
      f();
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    f();
    if (be_->kind() != kernels::BackendKind::kCpu) Sync();  // the op's time, not its launch's
    AddOpTime(name, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  void set_profiling(bool on) { profiling_ = on; }
  const std::vector<std::pair<std::string, double>>& op_seconds() const { return op_seconds_; }
  void ResetProfile() { op_seconds_.clear(); }

  // The first error of the backend's ops or of a collective; later ones are dropped.
  void Fail(absl::Status s) {
    if (!s.ok() && status_.ok()) status_ = std::move(s);
  }
  const absl::Status& status() const { return status_; }
  // Waits for the backend's queued ops; keeps their first error.
  void Sync() { Fail(be_->Synchronize()); }

 private:
  void AddOpTime(const char* name, double seconds);

  kernels::Backend* be_;
  const jobspec::GPTConfig config_;
  const jobspec::ModelShard shard_;
  ShardDims dims_;
  jobspec::ActivationLayout off_{};
  float* stage_ = nullptr;  // the activation buffer: the stage's region
  float* slot_ = nullptr;   // the current slot's base (its offsets are from here)
  kernels::Precision lp_ = kernels::Precision::kFp32;
  bool grad_casts_fused_ = false;
  RingAttention* ring_ = nullptr;
  const int32_t* positions_ = nullptr;
  kernels::DeviceBuffer ring_scratch_[4];
  bool profiling_ = false;
  std::vector<std::pair<std::string, double>> op_seconds_;
  absl::Status status_;
};

}  // namespace gantry::model
