// The element types of the device kernels (kernels/dtype.h: fp32, bf16, fp16), the twin of
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
#include "kernels/dtype.h"

namespace gantry::GANTRY_CUDA_NS {

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
