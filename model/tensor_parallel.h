// Tensor and sequence parallelism as the model's layers meet them (Megatron's scheme): where
// the ranks' partial sums are added (all-reduce), and with sequence parallelism the exchanges
// that take the place of those all-reduces, so that the norms and the residual stream hold
// 1/tp of the rows (all-gather before a column-parallel GEMM, reduce-scatter after a
// row-parallel one; jobspec::LayoutActivations keeps the rooms they use). A collective's
// failure becomes the run's first error (RunContext::Fail); the step goes on, computing
// nothing reliable, and the caller reads the status at its end.
#pragma once

#include <cstddef>

#include "comm/communicator.h"
#include "kernels/types.h"
#include "model/run_context.h"

namespace gantry::model {

class TensorParallel {
 public:
  explicit TensorParallel(RunContext* ctx) : ctx_(ctx) {}
  // The tensor-parallel group (not owned); without one (tp 1, or a test of one shard) the
  // all-reduces do nothing and the sequence-parallel exchanges fail.
  void set_comm(comm::Communicator* comm) { comm_ = comm; }
  comm::Communicator* comm() const { return comm_; }

  // Sequence parallelism is on (jobspec::ActivationLayout::sequence_parallel, for the
  // current layout), and the rows of the residual stream here: BT, or BT / tp.
  bool sp() const { return ctx_->off().sequence_parallel; }
  int Rows(int BT) const { return sp() ? BT / ctx_->shard().tp : BT; }

  // The collectives, after the backend's queued ops (they read what those write).
  void AllReduce(float* data, size_t n);
  void ReduceScatter(const float* in, float* out, size_t n);
  void AllGather(const float* in, float* out, size_t n);

  // A norm's output (this rank's rows) as a column-parallel GEMM's input (all rows): itself,
  // or gathered over the group.
  kernels::Ptr AllRows(kernels::Ptr rows, int BT);
  // A row-parallel GEMM's partial sums (all rows, fp32) summed over the group, then rounded
  // in mixed precision: in place (all-reduce), or this rank's rows (reduce-scatter). Returns
  // the summed rows. tag: the op's name in a recomputation ("" otherwise).
  float* SumPartial(float* partial, int BT, const char* tag);
  // Backward: the residual stream's gradient (dres, this rank's rows) as the GEMMs' dout over
  // all rows: gathered with sequence parallelism, and in mixed precision a 16-bit copy.
  kernels::Ptr DoutAllRows(int BT);
  // Backward: a norm's input gradient, partial over the group (all rows, at dln), summed:
  // returns the rows the norm's backward reads (dln itself, or this rank's rows).
  float* SumNormGrad(float* dln, int BT);

  // The 16-bit gradient casts fused into the ops that make the gradients (RunContext::
  // grad_casts_fused: mixed precision, one rank a group, no MoE): a norm's input gradient
  // written by its GEMM in 16 bits (NormGradOut: where the GEMM writes it; NormGradIn: what
  // the norm's backward reads, SumNormGrad's rows otherwise), and the residual gradient's 16-bit
  // copy written by the norm's backward beside dres (Dres16Out: where; null otherwise), which
  // the next DoutAllRows then takes as it is rather than converting dres again. The same bits:
  // each value rounded once from the same fp32 value, by the op that makes it rather than a
  // pass after it.
  bool CastsFused() const;
  kernels::Ptr NormGradOut(float* dln) const { return CastsFused() ? ctx_->H(dln) : kernels::Ptr(dln); }
  kernels::CPtr NormGradIn(float* dln, int BT) {
    return CastsFused() ? kernels::CPtr(ctx_->H(dln)) : kernels::CPtr(SumNormGrad(dln, BT));
  }
  kernels::Ptr Dres16Out();
  // The next DoutAllRows converts dres (a backward's start: dres came from elsewhere).
  void ForgetDres16() { dres16_current_ = false; }
  // A norm's weight gradients of n floats at g: where its backward accumulates them (g, or
  // with sequence parallelism a zeroed scratch holding its rows' part), and FinishNormGrads,
  // which adds the group's sum into g.
  float* NormGrads(float* g, size_t n);
  void FinishNormGrads(float* g, size_t n);

 private:
  RunContext* ctx_;
  comm::Communicator* comm_ = nullptr;
  bool dres16_current_ = false;  // dres16 holds dres's values rounded (Dres16Out's op wrote it)
};

}  // namespace gantry::model
