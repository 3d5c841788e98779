#include "kernels/rope.h"

#include <cmath>

#include "kernels/cpu/elem.h"

namespace gantry::kernels {

void rope_inv_freq(float* inv_freq, int head_dim, float theta) {
  // HF: 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)), each step in fp32.
  for (int i = 0; i < head_dim / 2; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq[i] = 1.0f / std::pow(theta, expo);
  }
}

namespace {

// Rotates the query and key heads of B·L rows, row bt at position pos(bt).
template <typename Position>
void Rotate(Ptr qkv, int64_t rows, Position pos, int NH, int NKV, int hd, const float* inv_freq, bool inverse) {
  const int half = hd / 2, rotated = (NH + NKV) * hd, row = (NH + 2 * NKV) * hd;
  elem::With(qkv.type, [&](auto e) {
    using E = decltype(e);
    typename E::T* base = elem::Of<E>(qkv);
#pragma omp parallel for schedule(static)
    for (int64_t bt = 0; bt < rows; ++bt) {
      const float t = static_cast<float>(pos(bt));
      typename E::T* x = base + bt * row;
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

}  // namespace

void rope_apply(Ptr qkv, int B, int T, int NH, int NKV, int hd, const float* inv_freq, bool inverse) {
  // qkv (B, T, (NH + 2 NKV) hd), in place
  Rotate(qkv, static_cast<int64_t>(B) * T, [T](int64_t bt) { return static_cast<int>(bt % T); }, NH, NKV, hd,
         inv_freq, inverse);
}

void rope_apply_at(Ptr qkv, int B, int L, const int* positions, int NH, int NKV, int hd, const float* inv_freq,
                   bool inverse) {
  // qkv (B, L, (NH + 2 NKV) hd), positions (L), in place
  Rotate(qkv, static_cast<int64_t>(B) * L, [L, positions](int64_t bt) { return positions[bt % L]; }, NH, NKV, hd,
         inv_freq, inverse);
}

}  // namespace gantry::kernels
