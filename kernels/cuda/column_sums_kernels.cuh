// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// The column-sum kernels of column_sums.cuh (device code only, so that
// tests/kernels/backend_ops_test.cc can run them on the CPU): a fixed grid of row chunks
// writes partial sums, then one thread per column adds the chunks in order. F is a functor:
// __device__ float2 operator()(int row, int col) const, the two quantities summed.
#pragma once

#include "kernels/cuda/ns.h"
#include "kernels/cuda/round.cuh"

#include <algorithm>
#include <cstdint>

namespace gantry::GANTRY_CUDA_NS {

// The partials' grid for N rows and C columns with room for scratch_floats: `used` chunks of
// rows_per_chunk rows (at most 64, as the scratch allows); chunks 0 when C does not fit.
struct ColumnGrid {
  int rows_per_chunk = 0, used = 0;
};
inline ColumnGrid ColumnGridOf(int N, int C, int64_t scratch_floats) {
  const int64_t room = scratch_floats / 2 / C;
  if (room < 1) return {};
  const int chunks = static_cast<int>(std::min<int64_t>({64, N, room}));
  const int rows_per_chunk = (N + chunks - 1) / chunks;
  return {rows_per_chunk, (N + rows_per_chunk - 1) / rows_per_chunk};
}

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

// out0/out1 += the column totals, each rounded first to round_bits (kernels/cuda/round.cuh:
// RoundBits; 0: not rounded).
static __global__ void ColumnFinishKernel(float* out0, float* out1, const float2* partial, int chunks, int C,
                                          int round_bits) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float2 t = make_float2(0.f, 0.f);
  for (int k = 0; k < chunks; ++k) {
    t.x += partial[static_cast<int64_t>(k) * C + c].x;
    t.y += partial[static_cast<int64_t>(k) * C + c].y;
  }
  if (out0) out0[c] += RoundBits(t.x, round_bits);
  if (out1) out1[c] += RoundBits(t.y, round_bits);
}

}  // namespace gantry::GANTRY_CUDA_NS
