// Element types of a tensor's memory, and typed pointers for the backend's ops.
//
// A mixed-precision model (train.precision bf16 or fp16) keeps the tensors PyTorch autocast
// keeps in 16 bits (GEMM inputs and outputs, GELU's, attention's, the logits) in 16-bit
// memory: bf16 or IEEE fp16 bits, as uint16_t. Everything else is fp32. An op that reads a
// 16-bit tensor reads each value exactly (every bf16 and fp16 value is an fp32 value); an op
// that writes one computes its fp32 result and rounds it to nearest, ties to even
// (kernels/cast.h: Bf16Of, Fp16Of): the same bits as the fp32 op followed by RoundTo.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cast.h"

namespace gantry::kernels {

// Bytes of one element of type t.
constexpr size_t ElemBytes(Precision t) { return t == Precision::kFp32 ? 4 : 2; }
inline const char* PrecisionName(Precision t) {
  return t == Precision::kBf16 ? "bf16" : t == Precision::kFp16 ? "fp16" : "fp32";
}

// The fp32 value of a 16-bit element of type t (exact), and the 16-bit element nearest x.
inline float FloatOf16(uint16_t h, Precision t) { return t == Precision::kBf16 ? FloatOfBf16(h) : FloatOfFp16(h); }
inline uint16_t Of16(float x, Precision t) { return t == Precision::kBf16 ? Bf16Of(x) : Fp16Of(x); }

// A tensor's memory (a backend's device pointer) with its element type. A float* converts
// to an fp32 Ptr, so ops called with fp32 buffers read as before.
struct Ptr {
  void* data = nullptr;
  Precision type = Precision::kFp32;
  Ptr() = default;
  Ptr(std::nullptr_t) {}  // NOLINT: null, as a float* would be
  Ptr(float* p) : data(p) {}  // NOLINT: implicit, an fp32 tensor
  Ptr(void* p, Precision t) : data(p), type(t) {}
  explicit operator bool() const { return data != nullptr; }
  bool f32() const { return type == Precision::kFp32; }
  // Element i on (offsets in elements of the type).
  Ptr operator+(int64_t i) const { return Ptr(static_cast<char*>(data) + i * static_cast<int64_t>(ElemBytes(type)), type); }
  float* as_f32() const { return static_cast<float*>(data); }
  uint16_t* as_16() const { return static_cast<uint16_t*>(data); }
};

struct CPtr {
  const void* data = nullptr;
  Precision type = Precision::kFp32;
  CPtr() = default;
  CPtr(std::nullptr_t) {}  // NOLINT
  CPtr(const float* p) : data(p) {}  // NOLINT
  CPtr(Ptr p) : data(p.data), type(p.type) {}  // NOLINT
  CPtr(const void* p, Precision t) : data(p), type(t) {}
  explicit operator bool() const { return data != nullptr; }
  bool f32() const { return type == Precision::kFp32; }
  CPtr operator+(int64_t i) const {
    return CPtr(static_cast<const char*>(data) + i * static_cast<int64_t>(ElemBytes(type)), type);
  }
  const float* as_f32() const { return static_cast<const float*>(data); }
  const uint16_t* as_16() const { return static_cast<const uint16_t*>(data); }
};

// in (n) → out (n) of out's type (the cpu kernel of Backend::Convert): 16-bit values widened
// exactly, fp32 rounded to 16 bits to nearest, ties to even, fp32 copied (out == in allowed
// when the types are equal).
void convert(Ptr out, CPtr in, int64_t n);

}  // namespace gantry::kernels
