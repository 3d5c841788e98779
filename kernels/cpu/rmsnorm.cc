#include "kernels/rmsnorm.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/column_blocks.h"
#include "kernels/cpu/elem.h"
#include "kernels/cpu/norm_rows.h"

namespace gantry::kernels {
namespace {

// inp (N,C) → out (N,C) of E's type, rstd (N); with add, as LayerNormForward (layernorm.cc):
// inp + add written to sum and normalised from there by the same code.
template <typename E>
void RMSNormForward(typename E::T* out, float* rstd, float* sum, const float* inp, const float* add,
                    const float* weight, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<int64_t>(n) * C;
    if (add != nullptr) {
      float* s = sum + static_cast<int64_t>(n) * C;
      const float* y = add + static_cast<int64_t>(n) * C;
      for (int c = 0; c < C; ++c) s[c] = x[c] + y[c];
      x = s;
    }
    typename E::T* o = out + static_cast<int64_t>(n) * C;
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; ++c) ss += x[c] * x[c];
    const float r = 1.0f / std::sqrt(ss / static_cast<float>(C) + eps);
    for (int c = 0; c < C; ++c) o[c] = E::St(x[c] * r * weight[c]);
    rstd[n] = r;
  }
}

}  // namespace

void rmsnorm_forward(Ptr out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) {
  elem::With(out.type, [&](auto e) {
    using E = decltype(e);
    RMSNormForward<E>(elem::Of<E>(out), rstd, nullptr, inp, nullptr, weight, N, C, eps);
  });
}

void residual_rmsnorm_forward(float* residual, Ptr out, float* rstd, const float* a, const float* b,
                              const float* weight, int N, int C, float eps) {
  elem::With(out.type, [&](auto e) {
    using E = decltype(e);
    RMSNormForward<E>(elem::Of<E>(out), rstd, residual, a, b, weight, N, C, eps);
  });
}

void rmsnorm_backward(float* dinp, float* dweight, CPtr dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C, Ptr dinp16) {
  // y = x r w, r = (mean(x^2) + eps)^-1/2: dx = r (w dy) - x r^3 mean(w dy x). Each row of dout
  // copied into one aligned room first (layernorm_backward's way).
#pragma omp parallel
  {
    std::vector<float> wide;
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float* dy = NormRowOf(dout, n, C, &wide);
      const float* x = inp + static_cast<int64_t>(n) * C;
      float* dx = dinp + static_cast<int64_t>(n) * C;
      const float r = rstd[n];
      float dot = 0.f;
#pragma omp simd reduction(+ : dot)
      for (int c = 0; c < C; ++c) dot += weight[c] * dy[c] * x[c];
      const float k = dot / static_cast<float>(C) * r * r * r;
      for (int c = 0; c < C; ++c) dx[c] += r * weight[c] * dy[c] - k * x[c];
      StoreNormRow(dinp16, dx, n, C);
    }
  }
  NormParamSums<1>(
      dout, N, C,
      [&](int n, int c, float dy, float (&t)[1]) { t[0] = inp[static_cast<int64_t>(n) * C + c] * rstd[n] * dy; },
      {dweight});
}

}  // namespace gantry::kernels
