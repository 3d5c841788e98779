#include "kernels/llama_ops.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/column_blocks.h"
#include "kernels/cpu/elem.h"

namespace gantry::kernels {
namespace {

template <typename E>
void RMSNormForward(typename E::T* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<int64_t>(n) * C;
    typename E::T* o = out + static_cast<int64_t>(n) * C;
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; ++c) ss += x[c] * x[c];
    const float r = 1.0f / std::sqrt(ss / static_cast<float>(C) + eps);
    for (int c = 0; c < C; ++c) o[c] = E::St(x[c] * r * weight[c]);
    rstd[n] = r;
  }
}

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

void rmsnorm_forward(Ptr out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) {
  elem::With(out.type, [&](auto e) {
    using E = decltype(e);
    RMSNormForward<E>(elem::Of<E>(out), rstd, inp, weight, N, C, eps);
  });
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C) {
  // y = x r w, r = (mean(x^2) + eps)^-1/2: dx = r (w dy) - x r^3 mean(w dy x).
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* dy = dout + static_cast<int64_t>(n) * C;
    const float* x = inp + static_cast<int64_t>(n) * C;
    float* dx = dinp + static_cast<int64_t>(n) * C;
    const float r = rstd[n];
    float dot = 0.f;
#pragma omp simd reduction(+ : dot)
    for (int c = 0; c < C; ++c) dot += weight[c] * dy[c] * x[c];
    const float k = dot / static_cast<float>(C) * r * r * r;
    for (int c = 0; c < C; ++c) dx[c] += r * weight[c] * dy[c] - k * x[c];
  }
  constexpr int kCols = 16;
  ParallelColumnBlocks<kCols>(C, [&](int c0, int c1) {
    float dw[kCols] = {0};
    for (int n = 0; n < N; ++n) {
      const float* dy = dout + static_cast<int64_t>(n) * C;
      const float* x = inp + static_cast<int64_t>(n) * C;
      const float r = rstd[n];
      for (int c = c0; c < c1; ++c) dw[c - c0] += x[c] * r * dy[c];
    }
    for (int c = c0; c < c1; ++c) dweight[c] += dw[c - c0];
  });
}

void rope_inv_freq(float* inv_freq, int head_dim, float theta) {
  // HF: 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)), each step in fp32.
  for (int i = 0; i < head_dim / 2; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq[i] = 1.0f / std::pow(theta, expo);
  }
}

void rope_apply(Ptr qkv, int B, int T, int NH, int NKV, int hd, const float* inv_freq, bool inverse) {
  const int half = hd / 2, rotated = (NH + NKV) * hd, row = (NH + 2 * NKV) * hd;
  elem::With(qkv.type, [&](auto e) {
    using E = decltype(e);
    typename E::T* base = elem::Of<E>(qkv);
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; ++bt) {
      const float t = static_cast<float>(bt % T);
      typename E::T* x = base + static_cast<int64_t>(bt) * row;
      for (int i = 0; i < half; ++i) {
        const float angle = t * inv_freq[i];
        const float c = std::cos(angle), s = inverse ? -std::sin(angle) : std::sin(angle);
        for (int h = 0; h < rotated; h += hd) {
          const float a = E::Ld(x[h + i]), b = E::Ld(x[h + i + half]);
          x[h + i] = E::St(a * c - b * s);
          x[h + i + half] = E::St(b * c + a * s);
        }
      }
    }
  });
}

void swiglu_forward(Ptr h, CPtr gu, int N, int F) {
  elem::With(h.type, [&](auto e) {
    using E = decltype(e);
    typename E::T* out = elem::Of<E>(h);
    const typename E::T* in = elem::Of<E>(gu);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      const typename E::T* g = in + static_cast<int64_t>(n) * 2 * F;
      typename E::T* o = out + static_cast<int64_t>(n) * F;
      for (int f = 0; f < F; ++f) {
        const float x = E::Ld(g[f]);
        o[f] = E::St(x * Sigmoid(x) * E::Ld(g[F + f]));
      }
    }
  });
}

void swiglu_backward(Ptr dgu, CPtr dh, CPtr gu, int N, int F) {
  elem::With(dgu.type, [&](auto e) {
    using E = decltype(e);
    typename E::T* out = elem::Of<E>(dgu);
    const typename E::T* d = elem::Of<E>(dh);
    const typename E::T* in = elem::Of<E>(gu);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      const typename E::T* g = in + static_cast<int64_t>(n) * 2 * F;
      const typename E::T* dy = d + static_cast<int64_t>(n) * F;
      typename E::T* o = out + static_cast<int64_t>(n) * 2 * F;
      for (int f = 0; f < F; ++f) {
        const float x = E::Ld(g[f]), u = E::Ld(g[F + f]), dyf = E::Ld(dy[f]);
        const float sg = Sigmoid(x);
        o[f] = E::St(dyf * u * sg * (1.0f + x * (1.0f - sg)));
        o[F + f] = E::St(dyf * x * sg);
      }
    }
  });
}

void gqa_expand(Ptr out, CPtr qkv, int64_t rows, int NH, int NKV, int hd) {
  const int64_t in_w = static_cast<int64_t>(NH + 2 * NKV) * hd, out_w = static_cast<int64_t>(3) * NH * hd;
  const int group = NH / NKV;
  elem::With(out.type, [&](auto e) {
    using E = decltype(e);
    typename E::T* o = elem::Of<E>(out);
    const typename E::T* in = elem::Of<E>(qkv);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const typename E::T* x = in + r * in_w;
      typename E::T* y = o + r * out_w;
      std::copy(x, x + static_cast<int64_t>(NH) * hd, y);
      for (int part = 1; part <= 2; ++part) {  // keys, then values
        const typename E::T* src = x + static_cast<int64_t>(NH + (part - 1) * NKV) * hd;
        typename E::T* dst = y + static_cast<int64_t>(part) * NH * hd;
        for (int h = 0; h < NH; ++h) std::copy(src + (h / group) * hd, src + (h / group + 1) * hd, dst + h * hd);
      }
    }
  });
}

void gqa_reduce(Ptr dqkv, CPtr dqkv3, int64_t rows, int NH, int NKV, int hd) {
  const int64_t out_w = static_cast<int64_t>(NH + 2 * NKV) * hd, in_w = static_cast<int64_t>(3) * NH * hd;
  const int group = NH / NKV;
  elem::With(dqkv.type, [&](auto e) {
    using E = decltype(e);
    typename E::T* o = elem::Of<E>(dqkv);
    const typename E::T* in = elem::Of<E>(dqkv3);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const typename E::T* x = in + r * in_w;
      typename E::T* y = o + r * out_w;
      std::copy(x, x + static_cast<int64_t>(NH) * hd, y);
      for (int part = 1; part <= 2; ++part) {
        const typename E::T* src = x + static_cast<int64_t>(part) * NH * hd;
        typename E::T* dst = y + static_cast<int64_t>(NH + (part - 1) * NKV) * hd;
        for (int k = 0; k < NKV; ++k) {
          for (int d = 0; d < hd; ++d) {
            float s = 0.f;
            for (int h = k * group; h < (k + 1) * group; ++h) s += E::Ld(src[h * hd + d]);
            dst[k * hd + d] = E::St(s);
          }
        }
      }
    }
  });
}

}  // namespace gantry::kernels
