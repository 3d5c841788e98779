#include "kernels/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace gantry::kernels {

void moe_route(float* probs, float* lse, int32_t* choice, float* weight, int32_t* slot, int32_t* counts, float* stats,
               const float* logits, int N, int E, int k, int capacity) {
  // Softmax and the top k of each row (independent rows).
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* l = logits + static_cast<int64_t>(n) * E;
    float* p = probs + static_cast<int64_t>(n) * E;
    float mx = l[0];
    for (int e = 1; e < E; ++e) mx = std::max(mx, l[e]);
    float sum = 0.f;
    for (int e = 0; e < E; ++e) {
      p[e] = std::exp(l[e] - mx);
      sum += p[e];
    }
    lse[n] = mx + std::log(sum);
    const float inv = 1.f / sum;
    for (int e = 0; e < E; ++e) p[e] *= inv;
    // Rank by probability, the lower index first among equals: k passes of the largest not
    // yet taken.
    int32_t* c = choice + static_cast<int64_t>(n) * k;
    float chosen = 0.f;
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int e = 0; e < E; ++e) {
        bool taken = false;
        for (int i = 0; i < j; ++i) taken |= c[i] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      c[j] = best;
      chosen += p[best];
    }
    for (int j = 0; j < k; ++j) weight[static_cast<int64_t>(n) * k + j] = p[c[j]] / chosen;
  }
  // Capacity in priority order (rank 0 of every token, then rank 1, ...): an expert keeps its
  // first `capacity` assignments.
  int32_t* routed = counts;
  int32_t* offset = counts + E;
  std::vector<int32_t> kept(static_cast<size_t>(E), 0);
  std::fill(routed, routed + E, 0);
  for (int j = 0; j < k; ++j) {
    for (int n = 0; n < N; ++n) {
      const int e = choice[static_cast<int64_t>(n) * k + j];
      ++routed[e];
      slot[static_cast<int64_t>(n) * k + j] = kept[static_cast<size_t>(e)] < capacity ? kept[static_cast<size_t>(e)]++ : -1;
    }
  }
  offset[0] = 0;
  for (int e = 0; e < E; ++e) offset[e + 1] = offset[e] + kept[static_cast<size_t>(e)];
  for (int64_t a = 0; a < static_cast<int64_t>(N) * k; ++a) {
    if (slot[a] >= 0) slot[a] += offset[choice[a]];
  }
  // The losses, summed in a fixed order (double).
  double aux = 0, z = 0;
  for (int e = 0; e < E; ++e) {
    double P = 0;
    for (int n = 0; n < N; ++n) P += probs[static_cast<int64_t>(n) * E + e];
    aux += static_cast<double>(routed[e]) / (static_cast<double>(k) * N) * (P / N);
  }
  for (int n = 0; n < N; ++n) z += static_cast<double>(lse[n]) * lse[n];
  stats[0] = static_cast<float>(E * aux);
  stats[1] = static_cast<float>(z / N);
}

void moe_dispatch(float* X, const float* x, const int32_t* slot, int N, int k, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    for (int j = 0; j < k; ++j) {
      const int32_t s = slot[static_cast<int64_t>(n) * k + j];
      if (s >= 0) std::memcpy(X + static_cast<int64_t>(s) * C, x + static_cast<int64_t>(n) * C, C * sizeof(float));
    }
  }
}

void moe_combine(float* y, const float* Y, const int32_t* slot, const float* weight, int N, int k, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* out = y + static_cast<int64_t>(n) * C;
    std::fill(out, out + C, 0.f);
    for (int j = 0; j < k; ++j) {
      const int32_t s = slot[static_cast<int64_t>(n) * k + j];
      if (s < 0) continue;
      const float w = weight[static_cast<int64_t>(n) * k + j];
      const float* in = Y + static_cast<int64_t>(s) * C;
      for (int c = 0; c < C; ++c) out[c] += w * in[c];
    }
  }
}

void moe_combine_backward(float* dY, float* dweight, const float* dy, const float* Y, const int32_t* slot,
                          const float* weight, int N, int k, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* d = dy + static_cast<int64_t>(n) * C;
    for (int j = 0; j < k; ++j) {
      const int64_t a = static_cast<int64_t>(n) * k + j;
      const int32_t s = slot[a];
      if (s < 0) {
        dweight[a] = 0.f;
        continue;
      }
      const float w = weight[a];
      float* out = dY + static_cast<int64_t>(s) * C;
      const float* in = Y + static_cast<int64_t>(s) * C;
      float dot = 0.f;
      for (int c = 0; c < C; ++c) {
        out[c] = w * d[c];
        dot += d[c] * in[c];
      }
      dweight[a] = dot;
    }
  }
}

void moe_dispatch_backward(float* dx, const float* dX, const int32_t* slot, int N, int k, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* out = dx + static_cast<int64_t>(n) * C;
    for (int j = 0; j < k; ++j) {
      const int32_t s = slot[static_cast<int64_t>(n) * k + j];
      if (s < 0) continue;
      const float* in = dX + static_cast<int64_t>(s) * C;
      for (int c = 0; c < C; ++c) out[c] += in[c];
    }
  }
}

void moe_router_backward(float* dlogits, const float* dweight, const float* probs, const float* lse,
                         const int32_t* choice, const float* weight, const int32_t* counts, int N, int E, int k,
                         float aux_scale, float z_scale) {
  const int32_t* routed = counts;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* p = probs + static_cast<int64_t>(n) * E;
    const int32_t* c = choice + static_cast<int64_t>(n) * k;
    const float* w = weight + static_cast<int64_t>(n) * k;
    const float* dw = dweight + static_cast<int64_t>(n) * k;
    float* dl = dlogits + static_cast<int64_t>(n) * E;
    // d probs: the load-balancing term on every expert, the renormalisation's on the chosen:
    // w_j = p_j / S, S = Σ_chosen p → dp_i = (dw_i − Σ_j dw_j w_j) / S.
    float S = 0.f, wdw = 0.f;
    for (int j = 0; j < k; ++j) {
      S += p[c[j]];
      wdw += dw[j] * w[j];
    }
    for (int e = 0; e < E; ++e) dl[e] = aux_scale * E * (static_cast<float>(routed[e]) / (static_cast<float>(k) * N)) / N;
    for (int j = 0; j < k; ++j) dl[c[j]] += (dw[j] - wdw) / S;
    // Through the softmax: dlogit_e = p_e (dp_e − Σ p dp); the z-loss's on the logits.
    float dot = 0.f;
    for (int e = 0; e < E; ++e) dot += p[e] * dl[e];
    const float zl = z_scale * 2.f * lse[n] / N;
    for (int e = 0; e < E; ++e) dl[e] = p[e] * (dl[e] - dot) + zl * p[e];
  }
}

}  // namespace gantry::kernels
