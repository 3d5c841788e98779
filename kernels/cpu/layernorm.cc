#include "kernels/layernorm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/column_blocks.h"
#include "kernels/cpu/elem.h"
#include "kernels/cpu/norm_rows.h"

namespace gantry::kernels {

namespace {

// inp (N,C) → out (N,C) of E's type, mean (N), rstd (N). With add: inp + add (N,C) is written
// to sum first and normalised from there, row by row (the residual add fused with the norm; the
// norm is this one code either way, so its bits are the same).
template <typename E>
void LayerNormForward(typename E::T* out, float* mean, float* rstd, float* sum, const float* inp, const float* add,
                      const float* weight, const float* bias, int N, int C) {
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
    float m = 0.f;
#pragma omp simd reduction(+ : m)
    for (int c = 0; c < C; ++c) m += x[c];
    m /= static_cast<float>(C);
    float var = 0.f;
#pragma omp simd reduction(+ : var)
    for (int c = 0; c < C; ++c) {
      const float d = x[c] - m;
      var += d * d;
    }
    var /= static_cast<float>(C);
    const float r = 1.0f / std::sqrt(var + kLayerNormEps);
    for (int c = 0; c < C; ++c) o[c] = E::St((x[c] - m) * r * weight[c] + bias[c]);
    mean[n] = m;
    rstd[n] = r;
  }
}

}  // namespace

void layernorm_forward(Ptr out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C) {
  // inp (N,C) → out (N,C), mean (N), rstd (N)
  elem::With(out.type, [&](auto e) {
    using E = decltype(e);
    LayerNormForward<E>(elem::Of<E>(out), mean, rstd, nullptr, inp, nullptr, weight, bias, N, C);
  });
}

void residual_layernorm_forward(float* residual, Ptr out, float* mean, float* rstd, const float* a,
                                const float* b, const float* weight, const float* bias, int N, int C) {
  // a (N,C), b (N,C) → residual (N,C), out (N,C), mean (N), rstd (N)
  elem::With(out.type, [&](auto e) {
    using E = decltype(e);
    LayerNormForward<E>(elem::Of<E>(out), mean, rstd, residual, a, b, weight, bias, N, C);
  });
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, CPtr dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C, Ptr dinp16) {
  // Pass 1, rows in parallel: dinp, from each row of dout copied (a 16-bit one widened) into one
  // aligned room, so that the sums below run on the same fp32 values in the same code at the
  // same alignment whatever dout is.
#pragma omp parallel
  {
    std::vector<float> wide;
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float* dy = NormRowOf(dout, n, C, &wide);
      const float* x = inp + static_cast<int64_t>(n) * C;
      float* dx = dinp + static_cast<int64_t>(n) * C;
      const float m = mean[n];
      const float r = rstd[n];
      float sum_dn = 0.f;   // mean of dnorm
      float sum_dnx = 0.f;  // mean of dnorm * norm
#pragma omp simd reduction(+ : sum_dn, sum_dnx)
      for (int c = 0; c < C; ++c) {
        const float norm = (x[c] - m) * r;
        const float dn = weight[c] * dy[c];
        sum_dn += dn;
        sum_dnx += dn * norm;
      }
      sum_dn /= static_cast<float>(C);
      sum_dnx /= static_cast<float>(C);
      for (int c = 0; c < C; ++c) {
        const float norm = (x[c] - m) * r;
        const float dn = weight[c] * dy[c];
        dx[c] += (dn - sum_dn - norm * sum_dnx) * r;
      }
      StoreNormRow(dinp16, dx, n, C);
    }
  }
  // Pass 2, column blocks in parallel: dweight, dbias summed over rows in order.
  NormParamSums<2>(
      dout, N, C,
      [&](int n, int c, float dy, float (&t)[2]) {
        t[0] = (inp[static_cast<int64_t>(n) * C + c] - mean[n]) * rstd[n] * dy;
        t[1] = dy;
      },
      {dweight, dbias});
}

}  // namespace gantry::kernels
