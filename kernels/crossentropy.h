// Softmax + cross-entropy over the vocabulary, fused with its gradient. The logits may be fp32
// or 16-bit (a mixed-precision model's): read exactly, softmax and loss in fp32, and the
// gradient written in place rounded to their type.
#pragma once
#include <cstdint>

#include "kernels/types.h"

namespace gantry::kernels {

// logits (N,V), targets (N) → losses (N) = logsumexp(logits[n]) - logits[n, targets[n]]
void crossentropy_forward(float* losses, CPtr logits, const int32_t* targets, int N,
                          int V);

// One pass per row: the loss, and logits replaced in place by their gradient
// dlogits[n] = (softmax(logits[n]) - onehot(targets[n])) * dloss.
// logits (N,V) → losses (N), logits (N,V) := dlogits
void crossentropy_fused_forward_backward(float* losses, Ptr logits, const int32_t* targets,
                                         float dloss, int N, int V);

// Vocabulary-parallel: a rank holds columns [v_begin, v_begin + V) of the logits. First,
// per row, stats (N,3) = (max, sum of exp(x - max), the target's logit or 0 where another
// rank holds it); the group all-gathers them. Then from every rank's stats (ranks,N,3):
// losses (N) and, with dloss != 0, logits := dlogits as the fused kernel. Every rank
// combines the stats in rank order, so all get the same losses.
void crossentropy_shard_stats(float* stats, CPtr logits, const int32_t* targets, int N, int V,
                              int v_begin);
void crossentropy_shard_finish(float* losses, Ptr logits, const float* all_stats, int ranks,
                               const int32_t* targets, float dloss, int N, int V, int v_begin);

}  // namespace gantry::kernels
