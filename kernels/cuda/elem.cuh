// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// The element types of the device kernels (kernels/types.h: fp32, bf16, fp16), the twin of
// kernels/cpu/elem.h. A kernel that reads or writes a typed tensor is a template over E:
// E::T the stored type (float, or uint16_t holding bf16 or fp16 bits), E::Ld(x) its exact fp32
// value, E::St(x) the stored value nearest fp32 x, ties to even (round.cuh: the bits of
// kernels/cast.h's conversions). Sums, softmax and statistics stay fp32 in every instantiation,
// so a 16-bit output is the fp32 kernel's value on the same inputs, rounded once. Launchers
// pick the instantiation for the types found at run time with WithType, and check the types
// first (CheckType).
#pragma once

#include "kernels/cuda/ns.h"

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/round.cuh"
#include "kernels/types.h"

namespace gantry::GANTRY_CUDA_NS {

// Four consecutive floats at p (16-byte aligned, global or shared memory), and back.
__device__ inline void LoadF4(const float* p, float (&r)[4]) {
#ifdef __CUDACC__
  const float4 v = *reinterpret_cast<const float4*>(p);
  r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
#else
  for (int k = 0; k < 4; ++k) r[k] = p[k];
#endif
}
__device__ inline void StoreF4(float* p, const float (&r)[4]) {
#ifdef __CUDACC__
  *reinterpret_cast<float4*>(p) = make_float4(r[0], r[1], r[2], r[3]);
#else
  for (int k = 0; k < 4; ++k) p[k] = r[k];
#endif
}


struct F32 {
  using T = float;
  static constexpr kernels::Precision kType = kernels::Precision::kFp32;
  __device__ static float Ld(float x) { return x; }
  __device__ static float St(float x) { return x; }
};
struct Bf16 {
  using T = uint16_t;
  static constexpr kernels::Precision kType = kernels::Precision::kBf16;
  __device__ static float Ld(uint16_t h) { return FloatOfBf16Bits(h); }
  __device__ static uint16_t St(float x) { return Bf16Bits(x); }
};
struct Fp16 {
  using T = uint16_t;
  static constexpr kernels::Precision kType = kernels::Precision::kFp16;
  __device__ static float Ld(uint16_t h) { return FloatOfFp16Bits(h); }
  __device__ static uint16_t St(float x) { return Fp16Bits(x); }
};

// Eight consecutive values of E's type at p (16-byte aligned where E is 16-bit: one 16-byte
// load), widened; and eight stored, rounded.
template <typename E>
__device__ inline void Load8(const typename E::T* p, float (&r)[8]) {
#ifdef __CUDACC__
  if constexpr (sizeof(typename E::T) == 2) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
    for (int k = 0; k < 4; ++k) {
      r[2 * k] = E::Ld(static_cast<uint16_t>(w[k] & 0xffffu));
      r[2 * k + 1] = E::Ld(static_cast<uint16_t>(w[k] >> 16));
    }
  } else {
    for (int k = 0; k < 8; ++k) r[k] = E::Ld(p[k]);
  }
#else
  for (int k = 0; k < 8; ++k) r[k] = E::Ld(p[k]);
#endif
}
template <typename E>
__device__ inline void Store8(typename E::T* p, const float (&r)[8]) {
#ifdef __CUDACC__
  if constexpr (sizeof(typename E::T) == 2) {
    uint32_t w[4];
    for (int k = 0; k < 4; ++k) {
      w[k] = static_cast<uint32_t>(E::St(r[2 * k])) | (static_cast<uint32_t>(E::St(r[2 * k + 1])) << 16);
    }
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    for (int k = 0; k < 8; ++k) p[k] = E::St(r[k]);
  }
#else
  for (int k = 0; k < 8; ++k) p[k] = E::St(r[k]);
#endif
}
// Whether every pointer is 16-byte aligned (host).
inline bool Aligned16(std::initializer_list<const void*> ps) {
  for (const void* p : ps) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

// Host: f(E{}) for t's element type E.
template <typename F>
decltype(auto) WithType(kernels::Precision t, F&& f) {
  switch (t) {
    case kernels::Precision::kBf16:
      return std::forward<F>(f)(Bf16{});
    case kernels::Precision::kFp16:
      return std::forward<F>(f)(Fp16{});
    case kernels::Precision::kFp32:
      break;
  }
  return std::forward<F>(f)(F32{});
}

// Host: a typed pointer as E's stored type.
template <typename E>
typename E::T* Of(kernels::Ptr p) {
  return static_cast<typename E::T*>(p.data);
}
template <typename E>
const typename E::T* Of(kernels::CPtr p) {
  return static_cast<const typename E::T*>(p.data);
}

// Host: INVALID_ARGUMENT naming op unless every non-null tensor of ts is of type t.
inline absl::Status CheckType(const char* op, kernels::Precision t, std::initializer_list<kernels::CPtr> ts) {
  for (const kernels::CPtr& p : ts) {
    if (p && p.type != t) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": a ", kernels::PrecisionName(p.type), " tensor where ",
                                                     kernels::PrecisionName(t), " belongs"));
    }
  }
  return absl::OkStatus();
}
// ... unless out (an output that may be fp32 or of the inputs' type t) is one of those.
inline absl::Status CheckOutType(const char* op, kernels::Precision t, kernels::CPtr out) {
  if (!out || out.f32() || out.type == t) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": a ", kernels::PrecisionName(out.type), " output of ", kernels::PrecisionName(t), " inputs"));
}

}  // namespace gantry::GANTRY_CUDA_NS
