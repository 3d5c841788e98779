// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// fp32 rounded to bf16 or fp16 (device code): held as fp32, the twins of kernels/cast.h's
// RoundToBf16 and RoundToFp16, or as the 16-bit type's bits (uint16_t), the twins of Bf16Of
// and Fp16Of, with the exact widenings FloatOfBf16 and FloatOfFp16. Ties to even; fp16: inf
// from 65520 on, subnormals below 2^-14; a NaN stays a quiet NaN of its sign. Integer
// arithmetic on the bits only (no __float2bfloat16_rn: its NaN is canonical, not the input's),
// so that nvcc and the emulator's host compiler give the same bits as kernels/cast.h.
// bits: 16 bf16, 10 fp16 (the significand bits kept), 0 none.
#pragma once

#include "kernels/cuda/ns.h"

#include <cstdint>

namespace gantry::GANTRY_CUDA_NS {

__device__ inline float RoundBf16(float x) {
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __uint_as_float(u | 0x00400000u);
  return __uint_as_float(((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16);
}

// |x| (bits a, below fp16's smallest normal 2^-14) in units of 2^-24, to nearest, ties to
// even: fp16's subnormal significand (0x400 when it rounds up to 2^-14).
__device__ inline uint32_t Fp16SubnormalUnits(uint32_t a) {
  const uint32_t e = a >> 23;
  uint32_t q = 0;
  if (e > 0 && 126u - e < 32u) {  // else below 2^-32: rounds to 0
    const uint32_t m = (a & 0x7fffffu) | 0x800000u, s = 126u - e;  // |x| 2^24 = m 2^-s
    q = m >> s;
    const uint32_t rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
    q += (rem > half || (rem == half && (q & 1u))) ? 1u : 0u;
  }
  return q;
}

__device__ inline float RoundFp16(float x) {
  const uint32_t u = __float_as_uint(x);
  const uint32_t sign = u & 0x80000000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return __uint_as_float(u | 0x00400000u);
  if (a >= 0x477ff000u) return __uint_as_float(sign | 0x7f800000u);
  if (a >= 0x38800000u) return __uint_as_float(sign | ((a + 0xfffu + ((a >> 13) & 1u)) & ~0x1fffu));
  const uint32_t q = Fp16SubnormalUnits(a);
  return __uint_as_float(sign | __float_as_uint(static_cast<float>(q) * 5.9604644775390625e-8f));
}

__device__ inline float RoundBits(float x, int bits) {
  return bits == 16 ? RoundBf16(x) : bits == 10 ? RoundFp16(x) : x;
}

// The bf16 bits nearest x (kernels/cast.h: Bf16Of), and the value of bf16 bits (exact).
__device__ inline uint16_t Bf16Bits(float x) {
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ inline float FloatOfBf16Bits(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

// The IEEE fp16 bits nearest x (kernels/cast.h: Fp16Of), and the value of fp16 bits (exact).
__device__ inline uint16_t Fp16Bits(float x) {
  const uint32_t u = __float_as_uint(x);
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN, quiet
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);                          // inf
  if (a >= 0x38800000u) {  // normal: 10 significand bits kept, the exponent rebiased (127 - 15)
    const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((r - 0x38000000u) >> 13));
  }
  return static_cast<uint16_t>(sign | Fp16SubnormalUnits(a));
}
__device__ inline float FloatOfFp16Bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return __uint_as_float(sign | 0x7f800000u | (m << 13));  // inf, NaN
  if (e != 0) return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
  return __uint_as_float(sign | __float_as_uint(static_cast<float>(m) * 5.9604644775390625e-8f));  // m 2^-24
}

}  // namespace gantry::GANTRY_CUDA_NS
