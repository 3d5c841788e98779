#include "kernels/encoder.h"

#include "kernels/cpu/column_blocks.h"

#include <limits>

namespace gantry::kernels {

void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe,
                     int B, int T, int C) {
  encoder_forward_shard(out, inp, wte, 0, std::numeric_limits<int>::max(), wpe, B, T, C);
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                      int B, int T, int C) {
  encoder_backward_shard(dwte, dwpe, dout, inp, 0, std::numeric_limits<int>::max(), B, T, C);
}

void encoder_forward_shard(float* out, const int32_t* inp, const float* wte, int v_begin, int v_end,
                           const float* wpe, int B, int T, int C) {
  // inp (B,T), wte rows [v_begin, v_end) (·,C), wpe (maxT,C) or null → out (B,T,C)
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; ++bt) {
    const int t = bt % T;
    const int tok = inp[bt];
    float* o = out + static_cast<int64_t>(bt) * C;
    const float* pe = wpe ? wpe + static_cast<int64_t>(t) * C : nullptr;
    if (tok >= v_begin && tok < v_end) {
      const float* te = wte + static_cast<int64_t>(tok - v_begin) * C;
      if (pe) {
        for (int c = 0; c < C; ++c) o[c] = te[c] + pe[c];
      } else {
        for (int c = 0; c < C; ++c) o[c] = te[c];
      }
    } else if (pe) {
      for (int c = 0; c < C; ++c) o[c] = pe[c];
    } else {
      for (int c = 0; c < C; ++c) o[c] = 0.f;
    }
  }
}

void encoder_backward_shard(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int v_begin,
                            int v_end, int B, int T, int C) {
  // dout (B,T,C) → dwte rows [v_begin, v_end) +=, dwpe (maxT,C) +=
  ParallelColumnBlocks<16>(C, [&](int c0, int c1) {
    for (int bt = 0; bt < B * T; ++bt) {
      if (inp[bt] < v_begin || inp[bt] >= v_end) continue;
      const float* d = dout + static_cast<int64_t>(bt) * C;
      float* w = dwte + static_cast<int64_t>(inp[bt] - v_begin) * C;
      for (int c = c0; c < c1; ++c) w[c] += d[c];
    }
  });
  if (dwpe == nullptr) return;
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
