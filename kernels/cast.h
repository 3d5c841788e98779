// Casts between fp32 and the 16-bit types over arrays (the cpu kernels of Backend::Convert and
// Backend::RoundTo); the scalar conversions are kernels/types.h's.
#pragma once

#include <cstdint>

#include "kernels/types.h"

namespace gantry::kernels {

// in (n) → out (n): each value rounded to the precision's nearest (kFp32: copied). in == out
// is allowed.
void round_to(float* out, const float* in, int64_t n, Precision p);

// in (n) → out (n)
void cast_to_bf16(uint16_t* out, const float* in, int64_t n);
void cast_from_bf16(float* out, const uint16_t* in, int64_t n);

// in (n) → out (n) of out's type (the cpu kernel of Backend::Convert): 16-bit values widened
// exactly, fp32 rounded to 16 bits to nearest, ties to even, fp32 copied (out == in allowed
// when the types are equal).
void convert(Ptr out, CPtr in, int64_t n);

}  // namespace gantry::kernels
