#include "kernels/encoder.h"

#include "kernels/cpu/column_blocks.h"

namespace gantry::kernels {

void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe,
                     int B, int T, int C) {
  // inp (B,T), wte (V,C), wpe (maxT,C) → out (B,T,C)
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; ++bt) {
    const int t = bt % T;
    const float* te = wte + static_cast<int64_t>(inp[bt]) * C;
    const float* pe = wpe + static_cast<int64_t>(t) * C;
    float* o = out + static_cast<int64_t>(bt) * C;
    for (int c = 0; c < C; ++c) o[c] = te[c] + pe[c];
  }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                      int B, int T, int C) {
  // dout (B,T,C) → dwte (V,C) +=, dwpe (maxT,C) +=
  ParallelColumnBlocks<16>(C, [&](int c0, int c1) {
    for (int bt = 0; bt < B * T; ++bt) {
      const float* d = dout + static_cast<int64_t>(bt) * C;
      float* w = dwte + static_cast<int64_t>(inp[bt]) * C;
      for (int c = c0; c < c1; ++c) w[c] += d[c];
    }
  });
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t) {
    float* p = dwpe + static_cast<int64_t>(t) * C;
    for (int b = 0; b < B; ++b) {
      const float* d = dout + (static_cast<int64_t>(b) * T + t) * C;
      for (int c = 0; c < C; ++c) p[c] += d[c];
    }
  }
}

}  // namespace gantry::kernels
