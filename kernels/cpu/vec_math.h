// exp and tanh written so that the compiler vectorises loops that call them (no libm call,
// no branch): range reduction plus minimax polynomials (the classic Cephes single-precision
// coefficients), accurate to about 1-2 ulp. Used by the CPU kernels' elementwise loops
// under `#pragma omp simd`.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace gantry::kernels::vec {

// exp(x) for x <= 88; below -87.3 it returns ~1e-38 rather than a subnormal or 0.
inline float Exp(float x) {
  x = std::min(88.0f, std::max(-87.33654f, x));
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  return y * std::bit_cast<float>(bits);
}

inline float Tanh(float x) {
  const float a = std::fabs(x);
  // |x| < 0.625: odd polynomial; otherwise (1 - e) / (1 + e) with e = exp(-2|x|) in (0, 1].
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float e = Exp(-2.0f * a);
  const float large = std::copysign((1.0f - e) / (1.0f + e), x);
  return a < 0.625f ? small : large;
}

// GELU, tanh form, and its derivative: shared by the GELU kernel and the fused matmul
// epilogues so that both compute the same bits.
inline float Gelu(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kCubic = 0.044715f;
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return 0.5f * x * (1.0f + Tanh(u));
}

inline float GeluGrad(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kCubic = 0.044715f;
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  const float th = Tanh(u);
  const float sech2 = 1.0f - th * th;
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * du;
}

}  // namespace gantry::kernels::vec
