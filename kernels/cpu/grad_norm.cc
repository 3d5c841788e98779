#include "kernels/grad_norm.h"

#include <algorithm>
#include <vector>

namespace gantry::kernels {
namespace {
constexpr int64_t kChunk = 4096;
}

double sum_squares(const float* g, int64_t N) {
  // g (N) → scalar
  const int64_t nchunks = (N + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(nchunks), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < nchunks; ++c) {
    const int64_t i0 = c * kChunk;
    const int64_t i1 = std::min(N, i0 + kChunk);
    double acc = 0.0;
    for (int64_t i = i0; i < i1; ++i) acc += static_cast<double>(g[i]) * g[i];
    partial[static_cast<size_t>(c)] = acc;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

void scale_inplace(float* g, int64_t N, float s) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) g[i] *= s;
}

}  // namespace gantry::kernels
