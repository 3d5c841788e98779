// CUDA's device-side language on the CPU, over kernels/emulated/emulator.h: include this
// before device code (kernels/cuda/*.cuh) to compile it as C++ for the emulator. The names
// live in namespace gantry, where all of the device code does.
#pragma once

#include <algorithm>
#include <cmath>

#include "kernels/emulated/emulator.h"

namespace gantry {

struct float2 {
  float x, y;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
using dim3 = emu::Dim3;
using std::max;
using std::min;

inline unsigned __float_as_uint(float x) {
  unsigned u;
  __builtin_memcpy(&u, &x, sizeof(u));
  return u;
}
inline float __uint_as_float(unsigned u) {
  float x;
  __builtin_memcpy(&x, &u, sizeof(x));
  return x;
}

inline void __syncthreads() { emu::SyncThreads(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::SyncWarp(); }
inline float __shfl_sync(unsigned, float v, int src) { return emu::Exchange(v, static_cast<unsigned>(src)); }
inline float __shfl_xor_sync(unsigned, float v, int mask) {
  return emu::Exchange(v, (emu::Self().linear % 32) ^ static_cast<unsigned>(mask));
}
// An int through the same exchange, its bits carried in a float's (moved, never computed on).
inline int __shfl_sync(unsigned m, int v, int src) {
  return static_cast<int>(__float_as_uint(__shfl_sync(m, __uint_as_float(static_cast<unsigned>(v)), src)));
}
// Bit i: lane i's predicate (every lane of the warp takes part, as with a full mask), the
// votes through the warp's exchange.
inline unsigned __ballot_sync(unsigned, int pred) {
  const float* votes = emu::ExchangeAll(pred != 0 ? 1.f : 0.f);
  unsigned mask = 0;
  for (unsigned i = 0; i < 32; ++i) mask |= votes[i] != 0.f ? 1u << i : 0u;
  return mask;
}
inline int __ffs(unsigned x) { return __builtin_ffs(static_cast<int>(x)); }

}  // namespace gantry

#define __global__
#define __device__
#define __host__
#define __launch_bounds__(...)
#define __forceinline__ inline
#define __restrict__
#define __shared__ static thread_local
#define threadIdx (::gantry::emu::Self().tid)
#define blockIdx (::gantry::emu::Self().bid)
#define blockDim (::gantry::emu::Self().bdim)
#define gridDim (::gantry::emu::Self().gdim)
#define GANTRY_DYNAMIC_SHARED(name) float* name = ::gantry::emu::DynamicShared()
