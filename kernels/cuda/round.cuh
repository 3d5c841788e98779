// fp32 rounded to bf16 or fp16 and held as fp32 (device code): the twins of kernels/cast.h's
// RoundToBf16 and RoundToFp16 (ties to even; fp16: inf from 65520 on, subnormals below
// 2^-14; NaN kept). bits: 16 bf16, 10 fp16 (the significand bits kept), 0 none.
#pragma once

#include "kernels/cuda/ns.h"

#include <cstdint>

namespace gantry::GANTRY_CUDA_NS {

__device__ inline float RoundBf16(float x) {
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __uint_as_float(u | 0x00400000u);
  return __uint_as_float(((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16);
}

__device__ inline float RoundFp16(float x) {
  const uint32_t u = __float_as_uint(x);
  const uint32_t sign = u & 0x80000000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return __uint_as_float(u | 0x00400000u);
  if (a >= 0x477ff000u) return __uint_as_float(sign | 0x7f800000u);
  if (a >= 0x38800000u) return __uint_as_float(sign | ((a + 0xfffu + ((a >> 13) & 1u)) & ~0x1fffu));
  const uint32_t e = a >> 23;
  uint32_t q = 0;
  if (e > 0 && 126u - e < 32u) {
    const uint32_t m = (a & 0x7fffffu) | 0x800000u, s = 126u - e;
    q = m >> s;
    const uint32_t rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
    q += (rem > half || (rem == half && (q & 1u))) ? 1u : 0u;
  }
  return __uint_as_float(sign | __float_as_uint(static_cast<float>(q) * 5.9604644775390625e-8f));
}

__device__ inline float RoundBits(float x, int bits) {
  return bits == 16 ? RoundBf16(x) : bits == 10 ? RoundFp16(x) : x;
}

}  // namespace gantry::GANTRY_CUDA_NS
