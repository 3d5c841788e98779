#include "model/tensor_parallel.h"

#include <utility>

#include "absl/status/status.h"

namespace gantry::model {
namespace {

absl::Status NoGroup() {
  return absl::FailedPreconditionError("sequence parallelism without a tensor-parallel group");
}

}  // namespace

void TensorParallel::AllReduce(float* data, size_t n) {
  if (comm_ == nullptr || ctx_->shard().tp == 1) return;
  ctx_->Sync();
  ctx_->Fail(comm_->AllReduceSum(data, n));
}

void TensorParallel::ReduceScatter(const float* in, float* out, size_t n) {
  ctx_->Sync();
  ctx_->Fail(comm_ != nullptr ? comm_->ReduceScatterSum(in, out, n) : NoGroup());
}

void TensorParallel::AllGather(const float* in, float* out, size_t n) {
  ctx_->Sync();
  ctx_->Fail(comm_ != nullptr ? comm_->AllGather(in, out, n) : NoGroup());
}

kernels::Ptr TensorParallel::AllRows(kernels::Ptr rows, int BT) {
  if (!sp()) return rows;
  const kernels::Ptr all = ctx_->H(ctx_->A(ctx_->off().gathered));
  // The rows' bytes as floats: 16-bit tensors gather two elements a float (the collectives
  // move the bits; the job spec requires an even n_embd for this).
  const size_t elems = static_cast<size_t>(Rows(BT)) * ctx_->dims().C;
  if (!rows.f32() && elems % 2 != 0) {
    ctx_->Fail(absl::InvalidArgumentError("sequence parallelism in 16 bits needs an even rows x n_embd"));
    return all;
  }
  ctx_->Op("sp all-gather",
           [&] { AllGather(static_cast<const float*>(rows.data), all.as_f32(), rows.f32() ? elems : elems / 2); });
  return all;
}

float* TensorParallel::SumPartial(float* partial, int BT, const char* tag) {
  const size_t C = static_cast<size_t>(ctx_->dims().C);
  if (!sp()) {
    ctx_->Op(*tag ? tag : "tp all-reduce", [&] { AllReduce(partial, static_cast<size_t>(BT) * C); });
    ctx_->Round(partial, static_cast<size_t>(BT) * C);
    return partial;
  }
  float* rows = ctx_->A(ctx_->off().proj_rows);
  const size_t n = static_cast<size_t>(Rows(BT)) * C;
  ctx_->Op(*tag ? tag : "sp reduce-scatter", [&] { ReduceScatter(partial, rows, n); });
  ctx_->Round(rows, n);
  return rows;
}

kernels::Ptr TensorParallel::DoutAllRows(int BT) {
  const jobspec::ActivationLayout& off = ctx_->off();
  const size_t C = static_cast<size_t>(ctx_->dims().C);
  float* dres = ctx_->A(off.dres);
  if (sp()) {
    ctx_->Op("sp all-gather", [&] { AllGather(dres, ctx_->A(off.dres_all), static_cast<size_t>(Rows(BT)) * C); });
    dres = ctx_->A(off.dres_all);
  }
  if (!ctx_->mixed()) return dres;
  const kernels::Ptr dout = ctx_->H(ctx_->A(off.dres16));
  if (std::exchange(dres16_current_, false)) return dout;  // the norm's backward wrote it
  ctx_->Op("dres cast bwd", [&] { ctx_->be().Convert(dout, dres, static_cast<int64_t>(static_cast<size_t>(BT) * C)); });
  return dout;
}

bool TensorParallel::CastsFused() const {
  return ctx_->grad_casts_fused() && ctx_->mixed() && ctx_->shard().tp == 1 && ctx_->config().moe.num_experts == 0;
}

kernels::Ptr TensorParallel::Dres16Out() {
  if (!CastsFused()) return nullptr;
  dres16_current_ = true;
  return ctx_->H(ctx_->A(ctx_->off().dres16));
}

float* TensorParallel::SumNormGrad(float* dln, int BT) {
  const size_t C = static_cast<size_t>(ctx_->dims().C);
  if (!sp()) {
    ctx_->Op("tp all-reduce", [&] { AllReduce(dln, static_cast<size_t>(BT) * C); });
    if (ctx_->mixed()) ctx_->Op("dln cast bwd", [&] { ctx_->Round(dln, static_cast<size_t>(BT) * C); });
    return dln;
  }
  float* rows = ctx_->A(ctx_->off().dln_rows);
  const size_t n = static_cast<size_t>(Rows(BT)) * C;
  ctx_->Op("sp reduce-scatter", [&] { ReduceScatter(dln, rows, n); });
  if (ctx_->mixed()) ctx_->Op("dln cast bwd", [&] { ctx_->Round(rows, n); });
  return rows;
}

float* TensorParallel::NormGrads(float* g, size_t n) {
  if (!sp()) return g;
  float* scratch = ctx_->A(ctx_->off().dnorm);
  ctx_->be().Zero(scratch, n * sizeof(float));
  return scratch;
}

void TensorParallel::FinishNormGrads(float* g, size_t n) {
  if (!sp()) return;
  // This micro-batch's part from every rank's rows, summed, then accumulated (the gradient
  // buffer accumulates over micro-batches: summing it whole would count earlier ones tp times).
  float* scratch = ctx_->A(ctx_->off().dnorm);
  ctx_->Op("sp all-reduce", [&] { AllReduce(scratch, n); });
  ctx_->be().ResidualForward(g, g, scratch, static_cast<int64_t>(n));
}

}  // namespace gantry::model
