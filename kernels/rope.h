// Rotary position embeddings (RoPE, rotate-half form), as Hugging Face's Llama applies them.
// CPU reference in kernels/cpu/rope.cc, checked against PyTorch (tests/reference/make_fixtures.py --only
// llama_ops); deterministic and independent of the thread count.
#pragma once

#include <cstdint>

#include "kernels/types.h"

namespace gantry::kernels {

// RoPE's inverse frequencies as HF computes them, in fp32: 1 / theta^(2i / head_dim), i <
// head_dim / 2.
void rope_inv_freq(float* inv_freq, int head_dim, float theta);
// In place on the query and key heads of qkv rows (B*T rows of (NH + 2 NKV) * hd: NH query
// heads, NKV key heads, NKV value heads, each hd wide), the row of position t = row % T rotated
// by angles t * inv_freq: for i < hd/2, (x_i, x_{i+hd/2}) -> (x_i cos - x_{i+hd/2} sin,
// x_{i+hd/2} cos + x_i sin). The angle is t * inv_freq in fp32, its cos and sin in fp32, as
// HF's cos/sin caches hold them. inverse: the transposed rotation (the backward).
void rope_apply(Ptr qkv, int B, int T, int NH, int NKV, int hd, const float* inv_freq, bool inverse);
// The same at given positions: row r of each of B sequences of L rows at position
// positions[r] (L entries), as context parallelism's rows are (model::CpSharding::Positions).
// With positions[r] = r it gives rope_apply's bits.
void rope_apply_at(Ptr qkv, int B, int L, const int* positions, int NH, int NKV, int hd, const float* inv_freq,
                   bool inverse);

}  // namespace gantry::kernels
