// Casts between fp32 and bf16 (the upper 16 bits of an fp32, rounded to nearest with ties to
// even, as PyTorch's .to(torch.bfloat16); NaN stays NaN). bf16 values are held as uint16_t.
#pragma once

#include <cstdint>

namespace gantry::kernels {

// One value: the bf16 nearest x, ties to even; a NaN keeps its sign and becomes a quiet NaN.
inline uint16_t Bf16Of(float x) {
  uint32_t u;
  __builtin_memcpy(&u, &x, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  const uint32_t round = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + round) >> 16);
}
inline float FloatOfBf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float x;
  __builtin_memcpy(&x, &u, sizeof(x));
  return x;
}

// in (n) → out (n)
void cast_to_bf16(uint16_t* out, const float* in, int64_t n);
void cast_from_bf16(float* out, const uint16_t* in, int64_t n);

}  // namespace gantry::kernels
