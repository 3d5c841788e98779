#include "kernels/crossentropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/elem.h"
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

// Row n of logits (N,V) as fp32: in place, or widened into the calling thread's buffer.
template <typename E>
const float* RowOf(const typename E::T* logits, int64_t n, int V) {
  const typename E::T* row = logits + n * V;
  if constexpr (E::kType == Precision::kFp32) {
    return row;
  } else {
    static thread_local std::vector<float> wide;
    wide.resize(static_cast<size_t>(V));
#pragma omp simd
    for (int i = 0; i < V; ++i) wide[static_cast<size_t>(i)] = E::Ld(row[i]);
    return wide.data();
  }
}

// dlogits of row n := (exp(x - mx) / sum - onehot(t)) * dloss, stored in E's type (t outside
// [0, V): no target among these columns). The target's value is computed in fp32 before it
// is stored, as the fp32 kernel subtracts in place.
template <typename E>
void StoreGrad(typename E::T* out, const float* x, float mx, float sum, int t, float dloss, int V) {
  const float inv = 1.0f / sum;
  if constexpr (E::kType == Precision::kFp32) {
#pragma omp simd
    for (int i = 0; i < V; ++i) out[i] = vec::Exp(x[i] - mx) * inv * dloss;
    if (t >= 0 && t < V) out[t] -= dloss;
  } else {
    const float at_t = t >= 0 && t < V ? vec::Exp(x[t] - mx) * inv * dloss - dloss : 0.f;
#pragma omp simd
    for (int i = 0; i < V; ++i) out[i] = E::St(vec::Exp(x[i] - mx) * inv * dloss);
    if (t >= 0 && t < V) out[t] = E::St(at_t);
  }
}

}  // namespace

void crossentropy_forward(float* losses, CPtr logits, const int32_t* targets, int N, int V) {
  // logits (N,V), targets (N) → losses (N)
  elem::With(logits.type, [&](auto e) {
    using E = decltype(e);
    const typename E::T* lg = elem::Of<E>(logits);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float* row = RowOf<E>(lg, n, V);
      float mx, sum;
      RowStats(row, V, &mx, &sum);
      losses[n] = std::log(sum) + mx - row[targets[n]];
    }
  });
}

void crossentropy_fused_forward_backward(float* losses, Ptr logits, const int32_t* targets, float dloss, int N,
                                         int V) {
  // logits (N,V) → losses (N), logits := dlogits (N,V)
  elem::With(logits.type, [&](auto e) {
    using E = decltype(e);
    typename E::T* lg = elem::Of<E>(logits);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float* row = RowOf<E>(lg, n, V);
      float mx, sum;
      RowStats(row, V, &mx, &sum);
      const int32_t tgt = targets[n];
      losses[n] = std::log(sum) + mx - row[tgt];
      StoreGrad<E>(lg + static_cast<int64_t>(n) * V, row, mx, sum, tgt, dloss, V);
    }
  });
}

void crossentropy_shard_stats(float* stats, CPtr logits, const int32_t* targets, int N, int V, int v_begin) {
  elem::With(logits.type, [&](auto e) {
    using E = decltype(e);
    const typename E::T* lg = elem::Of<E>(logits);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float* row = RowOf<E>(lg, n, V);
      float* s = stats + static_cast<int64_t>(n) * 3;
      RowStats(row, V, &s[0], &s[1]);
      const int t = targets[n] - v_begin;
      s[2] = t >= 0 && t < V ? row[t] : 0.f;
    }
  });
}

void crossentropy_shard_finish(float* losses, Ptr logits, const float* all_stats, int ranks, const int32_t* targets,
                               float dloss, int N, int V, int v_begin) {
  elem::With(logits.type, [&](auto e) {
    using E = decltype(e);
    typename E::T* lg = elem::Of<E>(logits);
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
      StoreGrad<E>(lg + static_cast<int64_t>(n) * V, RowOf<E>(lg, n, V), mx, sum, targets[n] - v_begin, dloss, V);
    }
  });
}

}  // namespace gantry::kernels
