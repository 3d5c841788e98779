// CUDA twins of the CPU ops in kernels/*.h. Pointers are device pointers; each launcher
// checks its arguments and the launch and returns a Status. The CPU versions are the
// reference: tests/gpu compares each against its CPU twin.
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime.h"

#include "absl/status/status.h"
#include "kernels/adamw.h"
#include "kernels/cuda/context.h"
#include "kernels/matmul.h"

namespace gantry::GANTRY_CUDA_NS {

// inp (N) → out (N), GELU tanh form
absl::Status GeluForward(float* out, const float* inp, int64_t N, cudaStream_t stream);
// inp (N), dout (N) → dinp (N)
absl::Status GeluBackward(float* dinp, const float* inp, const float* dout, int64_t N,
                          cudaStream_t stream);
// a (N), b (N) → out (N)
absl::Status ResidualForward(float* out, const float* a, const float* b, int64_t N,
                             cudaStream_t stream);
// dout (N) → da (N) +=, db (N) +=
absl::Status ResidualBackward(float* da, float* db, const float* dout, int64_t N, cudaStream_t stream);
// in (N) fp32 → out (N) bf16 (uint16_t), nearest with ties to even; and back (exact)
absl::Status CastToBf16(uint16_t* out, const float* in, int64_t N, cudaStream_t stream);
absl::Status CastFromBf16(float* out, const uint16_t* in, int64_t N, cudaStream_t stream);
// in (N) → out (N) rounded to bf16 (bits 16) or fp16 (bits 10: the significand bits kept), held
// as fp32; in == out allowed. The twin of kernels/cast.h's RoundToBf16 / RoundToFp16.
absl::Status RoundTo(float* out, const float* in, int64_t N, int bits, cudaStream_t stream);
// params, grads, m, v (N) → updated in place (fp32)
absl::Status AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t N,
                         const kernels::AdamWParams& hp, cudaStream_t stream);

// The ops below run on ctx's stream and use its handles and scratch; they mirror the CPU
// signatures of kernels/*.h (same layouts, same accumulate-or-overwrite contract).

// inp (B,T) token ids, wte (V,C), wpe (maxT,C) → out (B,T,C)
absl::Status EncoderForward(Context& ctx, float* out, const int32_t* inp, const float* wte, const float* wpe, int B,
                            int T, int C);
// Vocabulary-parallel: wte holds rows [v_begin, v_end) (other tokens embed 0), wpe may be null.
absl::Status EncoderForwardShard(Context& ctx, float* out, const int32_t* inp, const float* wte, int v_begin,
                                 int v_end, const float* wpe, int B, int T, int C);
// dout (B,T,C), inp (B,T) → dwte (V,C) +=, dwpe (maxT,C) +=. Deterministic: each column's
// rows are summed in (b, t) order.
absl::Status EncoderBackward(Context& ctx, float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B,
                             int T, int C);
// Rows [v_begin, v_end) of dwte only; dwpe null: skipped.
absl::Status EncoderBackwardShard(Context& ctx, float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                                  int v_begin, int v_end, int B, int T, int C);

// inp (N,C) → out (N,C), mean (N), rstd (N)
absl::Status LayerNormForward(Context& ctx, float* out, float* mean, float* rstd, const float* inp,
                              const float* weight, const float* bias, int N, int C);
// → dinp (N,C) +=, dweight (C) +=, dbias (C) += (deterministic: fixed-order partial sums)
absl::Status LayerNormBackward(Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* mean, const float* rstd, int N,
                               int C);

// cuBLASLt in fp32 (no TF32), bias in the epilogue. inp (N,C), weight (C,OC) kInOut or
// (OC,C) kOutIn, bias (OC) or null → out (N,OC)
absl::Status MatmulForward(Context& ctx, float* out, const float* inp, const float* weight, const float* bias, int N,
                           int C, int OC, kernels::WeightLayout layout = kernels::WeightLayout::kInOut);
// → pre (N,OC) = inp @ W + bias, out (N,OC) = gelu(pre)
absl::Status MatmulBiasGeluForward(Context& ctx, float* pre, float* out, const float* inp, const float* weight,
                                   const float* bias, int N, int C, int OC);
// dout (N,OC) → dinp (N,C) overwritten (null: skipped; times gelu'(gelu_pre) when given),
// dweight +=, dbias (OC) += (null: skipped)
absl::Status MatmulBackward(Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, int N, int C, int OC,
                            kernels::WeightLayout layout = kernels::WeightLayout::kInOut,
                            const float* gelu_pre = nullptr);

// Causal self-attention through cuBLAS batched GEMMs. qkv (B,T,3C) → out (B,T,C), att
// (B,NH,T,T) probabilities (zero above the diagonal). scratch: AttentionForwardScratch floats.
// round_bits 16 (bf16) or 10 (fp16): mixed precision, each exp(s - max) rounded to that type
// before it is normalised (kernels/attention.h); 0: fp32.
size_t AttentionForwardScratch(int B, int T, int C, int NH);
absl::Status AttentionForward(Context& ctx, float* out, float* att, float* scratch, const float* qkv, int B, int T,
                              int C, int NH, int round_bits = 0);
// dout (B,T,C), qkv, att → dqkv (B,T,3C) overwritten. scratch: AttentionBackwardScratch.
size_t AttentionBackwardScratch(int B, int T, int C, int NH);
absl::Status AttentionBackward(Context& ctx, float* dqkv, float* scratch, const float* dout, const float* qkv,
                               const float* att, int B, int T, int C, int NH);

// Fused causal self-attention (flash-attention style, fp32; head size <= 128): the (T, T)
// scores are never stored. qkv (B,T,3C) → out (B,T,C), lse (B,NH,T): each query row's
// log-sum-exp of its scaled scores, which the backward recomputes the probabilities from.
// round_bits as AttentionForward's: the weights exp(s - m) that multiply V rounded, their sum not.
absl::Status FlashAttentionForward(Context& ctx, float* out, float* lse, const float* qkv, int B, int T, int C,
                                   int NH, int round_bits = 0);
// dout (B,T,C), qkv, out, lse → dqkv (B,T,3C) overwritten. scratch: FlashAttentionBackwardScratch
// floats. Deterministic (no atomics).
size_t FlashAttentionBackwardScratch(int B, int T, int C, int NH);
absl::Status FlashAttentionBackward(Context& ctx, float* dqkv, float* scratch, const float* dout, const float* qkv,
                                    const float* out, const float* lse, int B, int T, int C, int NH);

// logits (N,V), targets (N) → losses (N)
absl::Status CrossEntropyForward(Context& ctx, float* losses, const float* logits, const int32_t* targets, int N,
                                 int V);
// One pass per row: losses (N), and logits (N,V) := (softmax - onehot) * dloss
absl::Status CrossEntropyFusedForwardBackward(Context& ctx, float* losses, float* logits, const int32_t* targets,
                                              float dloss, int N, int V);

// Vocabulary-parallel classifier, as kernels::crossentropy_shard_stats and _finish.
absl::Status CrossEntropyShardStats(Context& ctx, float* stats, const float* logits, const int32_t* targets, int N,
                                   int V, int v_begin);
absl::Status CrossEntropyShardFinish(Context& ctx, float* losses, float* logits, const float* all_stats, int ranks,
                                    const int32_t* targets, float dloss, int N, int V, int v_begin);

// sum of g[i]^2 (fp32 squares, fp64 across blocks, fixed order) → *result (device)
absl::Status SumSquares(Context& ctx, double* result, const float* g, int64_t N);
absl::Status ScaleInplace(Context& ctx, float* g, int64_t N, float s);

}  // namespace gantry::GANTRY_CUDA_NS
