#include "kernels/crossentropy.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/vec_math.h"

namespace gantry::kernels {
namespace {

// Returns (max, sum of exp(x - max)) of one row.
inline void RowStats(const float* row, int V, float* mx_out, float* sum_out) {
  float mx = row[0];
#pragma omp simd reduction(max : mx)
  for (int i = 1; i < V; ++i) mx = std::max(mx, row[i]);
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < V; ++i) sum += vec::Exp(row[i] - mx);
  *mx_out = mx;
  *sum_out = sum;
}

}  // namespace

void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N,
                          int V) {
  // logits (N,V), targets (N) → losses (N)
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* row = logits + static_cast<int64_t>(n) * V;
    float mx, sum;
    RowStats(row, V, &mx, &sum);
    losses[n] = std::log(sum) + mx - row[targets[n]];
  }
}

void crossentropy_fused_forward_backward(float* losses, float* logits, const int32_t* targets,
                                         float dloss, int N, int V) {
  // logits (N,V) → losses (N), logits := dlogits (N,V)
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* row = logits + static_cast<int64_t>(n) * V;
    float mx, sum;
    RowStats(row, V, &mx, &sum);
    const int32_t tgt = targets[n];
    losses[n] = std::log(sum) + mx - row[tgt];
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int i = 0; i < V; ++i) row[i] = vec::Exp(row[i] - mx) * inv * dloss;
    row[tgt] -= dloss;
  }
}

void crossentropy_shard_stats(float* stats, const float* logits, const int32_t* targets, int N, int V,
                              int v_begin) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* row = logits + static_cast<int64_t>(n) * V;
    float* s = stats + static_cast<int64_t>(n) * 3;
    RowStats(row, V, &s[0], &s[1]);
    const int t = targets[n] - v_begin;
    s[2] = t >= 0 && t < V ? row[t] : 0.f;
  }
}

void crossentropy_shard_finish(float* losses, float* logits, const float* all_stats, int ranks,
                               const int32_t* targets, float dloss, int N, int V, int v_begin) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    // The row's max over every rank, then the sum of exp(x - max) rescaled to it, and the
    // target's logit (one rank holds it; the others gave 0).
    float mx = all_stats[static_cast<int64_t>(n) * 3];
    for (int r = 1; r < ranks; ++r) mx = std::max(mx, all_stats[(static_cast<int64_t>(r) * N + n) * 3]);
    float sum = 0.f, tgt = 0.f;
    for (int r = 0; r < ranks; ++r) {
      const float* s = all_stats + (static_cast<int64_t>(r) * N + n) * 3;
      sum += s[1] * vec::Exp(s[0] - mx);
      tgt += s[2];
    }
    losses[n] = std::log(sum) + mx - tgt;
    if (dloss == 0.f) continue;
    float* row = logits + static_cast<int64_t>(n) * V;
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int i = 0; i < V; ++i) row[i] = vec::Exp(row[i] - mx) * inv * dloss;
    const int t = targets[n] - v_begin;
    if (t >= 0 && t < V) row[t] -= dloss;
  }
}

}  // namespace gantry::kernels
