// The ops of a mixture-of-experts MLP (docs/architecture.md, "Mixture of experts"): the
// router's softmax, top-k choice, renormalised weights and capacity; the dispatch of token rows
// to the experts' contiguous blocks and the weighted combine of their outputs; and the
// backward of each. CPU references, checked against PyTorch (tests/reference/make_fixtures.py
// --only moe); deterministic and independent of the thread count. fp32.
//
// Layout. N tokens (rows), E experts, k choices a token. An assignment (n, j) is token n's
// rank-j choice (j = 0 the most probable). The dispatch buffer holds the kept assignments'
// rows grouped by expert: expert e's at rows [offset[e], offset[e+1]), in priority order (every
// token's rank-0 choice in token order, then the rank-1 choices, ...). slot[n, j] is the
// assignment's row there, or -1 where it was dropped.
#pragma once

#include <cstdint>

namespace gantry::kernels {

// The routing statistics `counts` holds (2E + 1 int32): routed[e] (assignments that chose e,
// before capacity drops) at [0, E), then the dispatch offsets at [E, 2E + 1) (offset[E] is the
// number of kept assignments). `stats` (2 floats): the load-balancing loss aux =
// E · Σ_e f_e · P_e (f_e = routed[e] / (k N), P_e the mean of probs[:, e]) and the z-loss
// z = mean_n lse_n².
inline int MoeCountsSize(int E) { return 2 * E + 1; }

// logits (N,E) → probs (N,E) = softmax (probs == logits allowed), lse (N) the logsumexp,
// choice (N,k) the experts by rank (equal probabilities: the lower index first), weight (N,k)
// the chosen probabilities over their sum, slot (N,k), counts, stats.
void moe_route(float* probs, float* lse, int32_t* choice, float* weight, int32_t* slot, int32_t* counts, float* stats,
               const float* logits, int N, int E, int k, int capacity);
// x (N,C) → X (rows, C): X[slot[n,j]] = x[n] for each kept assignment.
void moe_dispatch(float* X, const float* x, const int32_t* slot, int N, int k, int C);
// Y (rows, C) → y (N,C) overwritten: y[n] = Σ_j weight[n,j] · Y[slot[n,j]] over the kept
// assignments, in rank order (0 where all were dropped).
void moe_combine(float* y, const float* Y, const int32_t* slot, const float* weight, int N, int k, int C);
// dy (N,C) → dY (rows, C) overwritten: dY[slot[n,j]] = weight[n,j] · dy[n]; dweight (N,k)
// overwritten: dy[n] · Y[slot[n,j]] (0 where dropped).
void moe_combine_backward(float* dY, float* dweight, const float* dy, const float* Y, const int32_t* slot,
                          const float* weight, int N, int k, int C);
// dX (rows, C) → dx (N,C) +=: Σ_j dX[slot[n,j]] over the kept assignments, in rank order.
void moe_dispatch_backward(float* dx, const float* dX, const int32_t* slot, int N, int k, int C);
// The router's backward: dlogits (N,E) overwritten, through the softmax, from the combine's
// dweight (through the renormalisation w_j = p_j / Σ_chosen p), the load-balancing loss
// (aux_scale · d aux / d probs = aux_scale · E · f_e / N) and the z-loss (z_scale · 2 lse_n /
// N · probs[n,e] on the logits).
void moe_router_backward(float* dlogits, const float* dweight, const float* probs, const float* lse,
                         const int32_t* choice, const float* weight, const int32_t* counts, int N, int E, int k,
                         float aux_scale, float z_scale);

}  // namespace gantry::kernels
