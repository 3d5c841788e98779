// Softmax + cross-entropy over the vocabulary, fused with its gradient.
#pragma once
#include <cstdint>

namespace gantry::kernels {

// logits (N,V), targets (N) → losses (N) = logsumexp(logits[n]) - logits[n, targets[n]]
void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N,
                          int V);

// One pass per row: the loss, and logits replaced in place by their gradient
// dlogits[n] = (softmax(logits[n]) - onehot(targets[n])) * dloss.
// logits (N,V) → losses (N), logits (N,V) := dlogits
void crossentropy_fused_forward_backward(float* losses, float* logits, const int32_t* targets,
                                         float dloss, int N, int V);

}  // namespace gantry::kernels
