// The ops of Llama-family blocks that GPT-2's lack, as Hugging Face's LlamaForCausalLM runs
// them: RMSNorm, rotary position embeddings (RoPE, rotate-half form) and the SwiGLU MLP's
// gate. CPU references, checked against PyTorch (tests/reference/make_fixtures.py --only
// llama_ops); deterministic and independent of the thread count.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/dtype.h"

namespace gantry::kernels {

// RMSNorm: out = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps), per row.
// inp (N,C), weight (C) → out (N,C) (fp32, or rounded to 16 bits), rstd (N)
void rmsnorm_forward(Ptr out, float* rstd, const float* inp, const float* weight, int N, int C, float eps);
// dout (N,C), inp, weight, rstd → dinp (N,C) +=, dweight (C) += (rows summed in order)
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C);

// RoPE's inverse frequencies as HF computes them, in fp32: 1 / theta^(2i / head_dim), i <
// head_dim / 2.
void rope_inv_freq(float* inv_freq, int head_dim, float theta);
// In place on the query and key heads of qkv rows (B*T rows of (NH + 2 NKV) * hd: NH query
// heads, NKV key heads, NKV value heads, each hd wide), the row of position t = row % T rotated
// by angles t * inv_freq: for i < hd/2, (x_i, x_{i+hd/2}) -> (x_i cos - x_{i+hd/2} sin,
// x_{i+hd/2} cos + x_i sin). The angle is t * inv_freq in fp32, its cos and sin in fp32, as
// HF's cos/sin caches hold them. inverse: the transposed rotation (the backward).
void rope_apply(Ptr qkv, int B, int T, int NH, int NKV, int hd, const float* inv_freq, bool inverse);

// SwiGLU's gate: h = silu(g) * u, gu rows (N, 2F) = [g | u] → h (N, F).
void swiglu_forward(Ptr h, CPtr gu, int N, int F);
// dh (N,F), gu (N,2F) → dgu (N,2F) overwritten: [dh * u * silu'(g) | dh * silu(g)]
void swiglu_backward(Ptr dgu, CPtr dh, CPtr gu, int N, int F);

// The heads of grouped-query attention: positive, and the query heads a multiple of the
// key/value heads. An error names op.
inline absl::Status CheckGroups(const char* op, int NH, int NKV, int hd) {
  if (NH > 0 && NKV > 0 && hd > 0 && NH % NKV == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", NH, " query heads over ", NKV, " key/value heads of ", hd,
                                                 " (the query heads must be a multiple of the key/value heads)"));
}

// Grouped-query attention through the multi-head attention ops, as HF's repeat_kv: rows of
// qkv ((NH + 2 NKV) * hd) → rows of (3 NH * hd): the query heads, then each key and each value
// head repeated NH / NKV times (query head h reads key/value head h / (NH / NKV)). Exact.
void gqa_expand(Ptr out, CPtr qkv, int64_t rows, int NH, int NKV, int hd);
// The gradient back: dqkv3 rows (3 NH * hd) → dqkv rows ((NH + 2 NKV) * hd), overwritten: the
// query heads' as they are, each key/value head's the sum over the query heads that read it (in
// head order, in fp32, rounded once).
void gqa_reduce(Ptr dqkv, CPtr dqkv3, int64_t rows, int NH, int NKV, int hd);

}  // namespace gantry::kernels
