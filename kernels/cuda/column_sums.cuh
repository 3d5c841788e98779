// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// Deterministic column sums over rows (dbias, LayerNorm's dweight and dbias): a fixed grid of
// row chunks writes partial sums to scratch, then one thread per column adds the chunks in
// order. F is a functor: __device__ float2 operator()(int row, int col) const, the two
// quantities summed (the second may be 0).
#pragma once

#include "kernels/cuda/ns.h"

#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/column_sums_kernels.cuh"
#include "kernels/cuda/reduce.cuh"

namespace gantry::GANTRY_CUDA_NS {

// out0[c] += sum_r f(r, c).x, out1[c] += sum_r f(r, c).y (null: skipped); each sum rounded to
// round_bits first (16 bf16, 10 fp16: a 16-bit tensor's gradient accumulated in fp32; 0: none).
template <typename F>
absl::Status ColumnSums(Context& ctx, float* out0, float* out1, F f, int N, int C, int round_bits = 0) {
  if (N <= 0 || C <= 0) return absl::OkStatus();
  const ColumnGrid g = ColumnGridOf(N, C, static_cast<int64_t>(Context::kScratchFloats));
  if (g.used == 0) return absl::InvalidArgumentError("ColumnSums: too many columns for the scratch buffer");
  const int rows_per_chunk = g.rows_per_chunk, used = g.used;
  auto* partial = reinterpret_cast<float2*>(ctx.scratch());
  GANTRY_LAUNCH(ColumnPartialsKernel<F>, dim3(CeilDiv(C, 32), used), dim3(32, 8), 0, ctx.stream())(partial, f, N, C, rows_per_chunk);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  GANTRY_LAUNCH(ColumnFinishKernel, CeilDiv(C, 256), 256, 0, ctx.stream())(out0, out1, partial, used, C, round_bits);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace gantry::GANTRY_CUDA_NS
