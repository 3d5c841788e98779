// Element access for the CPU kernels over fp32 or 16-bit tensors (kernels/types.h): a kernel
// is written once as a template over E = Elem<P> (E::T the stored type, E::Ld its exact fp32
// value, E::St the nearest stored value) and instantiated for the type found at run time.
#pragma once

#include <cstdint>
#include <utility>

#include "kernels/types.h"

namespace gantry::kernels::elem {

template <Precision P>
struct Elem;
template <>
struct Elem<Precision::kFp32> {
  using T = float;
  static constexpr Precision kType = Precision::kFp32;
  static float Ld(float x) { return x; }
  static float St(float x) { return x; }
};
template <>
struct Elem<Precision::kBf16> {
  using T = uint16_t;
  static constexpr Precision kType = Precision::kBf16;
  static float Ld(uint16_t h) { return FloatOfBf16(h); }
  static uint16_t St(float x) { return Bf16Of(x); }
};
template <>
struct Elem<Precision::kFp16> {
  using T = uint16_t;
  static constexpr Precision kType = Precision::kFp16;
  static float Ld(uint16_t h) { return FloatOfFp16(h); }
  static uint16_t St(float x) { return Fp16Of(x); }
};

// f(Elem<P>{}) for t's P.
template <typename F>
decltype(auto) With(Precision t, F&& f) {
  switch (t) {
    case Precision::kBf16:
      return std::forward<F>(f)(Elem<Precision::kBf16>{});
    case Precision::kFp16:
      return std::forward<F>(f)(Elem<Precision::kFp16>{});
    case Precision::kFp32:
      break;
  }
  return std::forward<F>(f)(Elem<Precision::kFp32>{});
}

// The typed pointers as E's stored type.
template <typename E>
typename E::T* Of(Ptr p) {
  return static_cast<typename E::T*>(p.data);
}
template <typename E>
const typename E::T* Of(CPtr p) {
  return static_cast<const typename E::T*>(p.data);
}

}  // namespace gantry::kernels::elem
