// The types every op and backend shares, and nothing else: the element types (Precision) with
// the 16-bit formats' scalar conversions, typed tensor pointers (Ptr, CPtr), the weight layouts
// of the GEMMs, and AdamW's hyper-parameters. Each op's contract is its own header
// (kernels/<op>.h); kernels/backend.h, the interface over them, includes this one alone.
//
// A mixed-precision model (train.precision bf16 or fp16) keeps the tensors PyTorch autocast
// keeps in 16 bits (GEMM inputs and outputs, GELU's, attention's, the logits) in 16-bit
// memory: bf16 or IEEE fp16 bits, as uint16_t. Everything else is fp32. An op that reads a
// 16-bit tensor reads each value exactly (every bf16 and fp16 value is an fp32 value); an op
// that writes one computes its fp32 result and rounds it to nearest, ties to even (Bf16Of,
// Fp16Of below): the same bits as the fp32 op followed by RoundTo. bf16 is the upper 16 bits of
// an fp32, rounded to nearest with ties to even, as PyTorch's .to(torch.bfloat16); NaN stays NaN.
#pragma once

#include <cstddef>
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

// The working precision of a mixed-precision model (train.precision): fp32 values rounded to
// the nearest value of the 16-bit type, held in fp32 (kernels/cpu/cast.cc: RoundTo).
enum class Precision { kFp32, kBf16, kFp16 };

// x rounded to the nearest fp16 value (ties to even), as an fp32: |x| >= 65520 becomes an
// infinity of x's sign (fp16's largest finite is 65504), values below fp16's smallest normal
// 2^-14 round to its subnormals (multiples of 2^-24), NaN stays NaN.
inline float RoundToFp16(float x) {
  uint32_t u;
  __builtin_memcpy(&u, &x, sizeof(u));
  const uint32_t sign = u & 0x80000000u, a = u & 0x7fffffffu;
  uint32_t r;
  if (a > 0x7f800000u) {
    r = a | 0x00400000u;  // NaN, quiet
  } else if (a >= 0x477ff000u) {
    r = 0x7f800000u;  // 65520 and above (and inf): inf
  } else if (a >= 0x38800000u) {
    r = (a + 0xfffu + ((a >> 13) & 1u)) & ~0x1fffu;  // normal: keep 10 significand bits
  } else {
    const uint32_t e = a >> 23;  // subnormal in fp16: a multiple of 2^-24
    uint32_t q = 0;
    if (e > 0) {
      const uint32_t m = (a & 0x7fffffu) | 0x800000u, s = 126u - e;  // value = m 2^(e-150)
      if (s < 32u) {
        q = m >> s;
        const uint32_t rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
        q += (rem > half || (rem == half && (q & 1u))) ? 1u : 0u;
      }
    }
    const float f = static_cast<float>(q) * 5.9604644775390625e-8f;  // q 2^-24, exact
    __builtin_memcpy(&r, &f, sizeof(r));
  }
  r |= sign;
  float y;
  __builtin_memcpy(&y, &r, sizeof(y));
  return y;
}
inline float RoundToBf16(float x) { return FloatOfBf16(Bf16Of(x)); }

// One value: the IEEE fp16 bits nearest x, ties to even (FloatOfFp16(Fp16Of(x)) ==
// RoundToFp16(x) for every x that is not a NaN; a NaN stays a quiet NaN of x's sign).
// Integer arithmetic only, so loops over it vectorise.
inline uint16_t Fp16Of(float x) {
  uint32_t u;
  __builtin_memcpy(&u, &x, sizeof(u));
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN, quiet
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // 65520 and above: inf
  if (a >= 0x38800000u) {  // normal: keep 10 significand bits, rebias the exponent (127 - 15)
    const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((r - 0x38000000u) >> 13));
  }
  // Below fp16's smallest normal 2^-14: a multiple q of 2^-24, q = |x| 2^24 to nearest, ties
  // to even (adding 2^23 leaves a float whose last place is 1: the addition rounds). q may be
  // 0x400, which is the encoding of 2^-14.
  float ax;
  __builtin_memcpy(&ax, &a, sizeof(ax));
  const float t = ax * 16777216.0f + 8388608.0f;
  uint32_t q;
  __builtin_memcpy(&q, &t, sizeof(q));
  return static_cast<uint16_t>(sign | (q - 0x4b000000u));
}
// The fp32 value of fp16 bits h (exact).
inline float FloatOfFp16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t u;
  if (e == 0x1f) {
    u = sign | 0x7f800000u | (m << 13);  // inf, NaN
  } else if (e != 0) {
    u = sign | ((e + 112u) << 23) | (m << 13);
  } else {  // zero or subnormal: m 2^-24, exact in fp32
    const float f = static_cast<float>(m) * 5.9604644775390625e-8f;
    __builtin_memcpy(&u, &f, sizeof(u));
    u |= sign;
  }
  float x;
  __builtin_memcpy(&x, &u, sizeof(x));
  return x;
}

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

// Weight layouts: kInOut is Hugging Face GPT-2's Conv1D layout, weight (C, OC), out = inp @ W.
// kOutIn is torch.nn.Linear's and the tied embedding's, weight (OC, C), out = inp @ W^T.
enum class WeightLayout { kInOut, kOutIn };

struct AdamWParams {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;  // 0 for tensors that take no decay (biases, LayerNorm, < 2 dims)
  int step;            // 1-based, for bias correction
  // Backend memory, or null: each gradient is first multiplied by *grad_scale (the clip's and
  // the loss scale's coefficient, computed on the device: no host read inside a step). The
  // product rounds as Backend::Scale's in-place multiply does, so the update's bits are those
  // of Scale followed by AdamW; the gradients themselves are left as they are.
  const float* grad_scale = nullptr;
};

// One run of a multi-tensor AdamW (Backend::AdamWSpans): n parameters with their gradients and
// state, the run's weight decay (hp's otherwise), and where the updated parameters' 16-bit
// working copy goes (null: none), as Convert rounds them.
struct AdamWSpan {
  float* params = nullptr;
  const float* grads = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  int64_t n = 0;
  float weight_decay = 0.f;
  Ptr working;
};

// Where a flat range of fp32 parameters keeps its 16-bit working copy (mixed precision's GEMM
// operands): flat_begin's value at `at`, the rest after it.
struct WorkingCopyRange {
  size_t flat_begin = 0, flat_end = 0;
  Ptr at;
};

// A job's AdamW hyper-parameters (torch.optim.AdamW's), one definition for the trainer, the
// GPU path and the shard servers' parameter-server mode; Params gives one update's.
struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  // The update at learning rate lr, 1-based step; decay: the tensor takes weight decay.
  AdamWParams Params(double lr, int64_t step, bool decay) const {
    return {static_cast<float>(lr), static_cast<float>(beta1), static_cast<float>(beta2), static_cast<float>(eps),
            decay ? static_cast<float>(weight_decay) : 0.f, static_cast<int>(step)};
  }
};

}  // namespace gantry::kernels
