// Deterministic column sums over rows (dbias, LayerNorm's dweight and dbias): a fixed grid of
// row chunks writes partial sums to scratch, then one thread per column adds the chunks in
// order. F is a functor: __device__ float2 operator()(int row, int col) const, the two
// quantities summed (the second may be 0).
#pragma once

#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/reduce.cuh"

namespace gantry::cuda {

template <typename F>
__global__ void ColumnPartialsKernel(float2* partial, F f, int N, int C, int rows_per_chunk) {
  __shared__ float2 acc[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int r0 = blockIdx.y * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
  float2 s = make_float2(0.f, 0.f);
  if (c < C) {
    for (int r = r0 + threadIdx.y; r < r1; r += 8) {
      const float2 v = f(r, c);
      s.x += v.x;
      s.y += v.y;
    }
  }
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float2 t = acc[0][threadIdx.x];
    for (int y = 1; y < 8; ++y) {
      t.x += acc[y][threadIdx.x].x;
      t.y += acc[y][threadIdx.x].y;
    }
    partial[static_cast<int64_t>(blockIdx.y) * C + c] = t;
  }
}

static __global__ void ColumnFinishKernel(float* out0, float* out1, const float2* partial, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float2 t = make_float2(0.f, 0.f);
  for (int k = 0; k < chunks; ++k) {
    t.x += partial[static_cast<int64_t>(k) * C + c].x;
    t.y += partial[static_cast<int64_t>(k) * C + c].y;
  }
  if (out0) out0[c] += t.x;
  if (out1) out1[c] += t.y;
}

// out0[c] += sum_r f(r, c).x, out1[c] += sum_r f(r, c).y (null: skipped).
template <typename F>
absl::Status ColumnSums(Context& ctx, float* out0, float* out1, F f, int N, int C) {
  if (N <= 0 || C <= 0) return absl::OkStatus();
  const int64_t room = static_cast<int64_t>(Context::kScratchFloats / 2) / C;
  if (room < 1) return absl::InvalidArgumentError("ColumnSums: too many columns for the scratch buffer");
  const int chunks = static_cast<int>(std::min<int64_t>({64, N, room}));
  const int rows_per_chunk = (N + chunks - 1) / chunks;
  const int used = (N + rows_per_chunk - 1) / rows_per_chunk;
  auto* partial = reinterpret_cast<float2*>(ctx.scratch());
  ColumnPartialsKernel<<<dim3(CeilDiv(C, 32), used), dim3(32, 8), 0, ctx.stream()>>>(partial, f, N, C, rows_per_chunk);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  ColumnFinishKernel<<<CeilDiv(C, 256), 256, 0, ctx.stream()>>>(out0, out1, partial, used, C);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace gantry::cuda
