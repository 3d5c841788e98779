// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// CUDA twins of the CPU ops in kernels/*.h. Pointers are device pointers; each launcher
// checks its arguments and the launch and returns a Status. The CPU versions are the
// reference: tests/gpu compares each against its CPU twin.
//
// Typed tensors (kernels::Ptr, CPtr: fp32, bf16 or fp16, kernels/types.h) follow the backend's
// contract (kernels/backend.h): 16-bit values read exactly, fp32 inside, what is stored into a
// 16-bit tensor rounded to nearest, ties to even. Each launcher checks the type combination it
// takes (INVALID_ARGUMENT naming the op otherwise).
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime.h"

#include "absl/status/status.h"
#include "kernels/adamw.h"
#include "kernels/attention_block.h"
#include "kernels/cuda/context.h"
#include "kernels/types.h"
#include "kernels/matmul.h"

namespace gantry::GANTRY_CUDA_NS {

// inp (N) → out (N), GELU tanh form; both of one type
absl::Status GeluForward(kernels::Ptr out, kernels::CPtr inp, int64_t N, cudaStream_t stream);
// inp (N), dout (N) → dinp (N); all of one type
absl::Status GeluBackward(kernels::Ptr dinp, kernels::CPtr inp, kernels::CPtr dout, int64_t N,
                          cudaStream_t stream);
// a (N), b (N) → out (N)
absl::Status ResidualForward(float* out, const float* a, const float* b, int64_t N,
                             cudaStream_t stream);
// dout (N) → da (N) +=, db (N) +=
absl::Status ResidualBackward(float* da, float* db, const float* dout, int64_t N, cudaStream_t stream);
// in (N) → out (N) of out's type, any two of fp32, bf16, fp16: widened exactly, rounded to
// nearest, ties to even (a NaN stays a quiet NaN), copied when the types agree (in place: nothing).
absl::Status Convert(kernels::Ptr out, kernels::CPtr in, int64_t N, cudaStream_t stream);
// in (N) → out (N) rounded to bf16 (bits 16) or fp16 (bits 10: the significand bits kept), held
// as fp32; in == out allowed. The twin of kernels/cast.h's RoundToBf16 / RoundToFp16.
absl::Status RoundTo(float* out, const float* in, int64_t N, int bits, cudaStream_t stream);
// params, grads, m, v (N) → updated in place (fp32): AdamWSpans of one span
absl::Status AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t N,
                         const kernels::AdamWParams& hp, cudaStream_t stream);
// AdamW over spans (Backend::AdamWSpans): a launch per 32 spans of one working-copy type.
absl::Status AdamWSpans(const kernels::AdamWSpan* spans, int count, const kernels::AdamWParams& hp,
                        cudaStream_t stream);

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

// inp (N,C) → out (N,C) (fp32 or 16-bit: rounded), mean (N), rstd (N)
absl::Status LayerNormForward(Context& ctx, kernels::Ptr out, float* mean, float* rstd, const float* inp,
                              const float* weight, const float* bias, int N, int C);
// a (N,C) + b (N,C) → residual (N,C), then LayerNormForward of it in the same pass: the same bits
// as ResidualForward then LayerNormForward.
absl::Status ResidualLayerNormForward(Context& ctx, float* residual, kernels::Ptr out, float* mean, float* rstd,
                                      const float* a, const float* b, const float* weight, const float* bias, int N,
                                      int C);
// → dinp (N,C) +=, dweight (C) +=, dbias (C) += (deterministic: fixed-order partial sums);
// dout fp32, or 16-bit with dinp16 (null or of dout's type) = dinp's new values rounded.
absl::Status LayerNormBackward(Context& ctx, float* dinp, float* dweight, float* dbias, kernels::CPtr dout,
                               const float* inp, const float* weight, const float* mean, const float* rstd, int N,
                               int C, kernels::Ptr dinp16 = nullptr);

// Llama-family ops (kernels/rmsnorm.h, rope.h, swiglu.h, gqa.h): RMSNorm, RoPE in place on qkv rows (inv_freq on
// the device), the SwiGLU gate.
absl::Status RMSNormForward(Context& ctx, kernels::Ptr out, float* rstd, const float* inp, const float* weight, int N,
                            int C, float eps);
absl::Status ResidualRMSNormForward(Context& ctx, float* residual, kernels::Ptr out, float* rstd, const float* a,
                                    const float* b, const float* weight, int N, int C, float eps);
absl::Status RMSNormBackward(Context& ctx, float* dinp, float* dweight, kernels::CPtr dout, const float* inp,
                             const float* weight, const float* rstd, int N, int C, kernels::Ptr dinp16 = nullptr);
absl::Status RopeApply(Context& ctx, kernels::Ptr qkv, int B, int T, int NH, int NKV, int hd, const float* inv_freq,
                       bool inverse);
absl::Status SwigluForward(Context& ctx, kernels::Ptr h, kernels::CPtr gu, int N, int F);
absl::Status SwigluBackward(Context& ctx, kernels::Ptr dgu, kernels::CPtr dh, kernels::CPtr gu, int N, int F);
// RopeApply at given positions (kernels/rope.h rope_apply_at): positions (L int32, device).
absl::Status RopeApplyAt(Context& ctx, kernels::Ptr qkv, int B, int L, const int32_t* positions, int NH, int NKV,
                         int hd, const float* inv_freq, bool inverse);
absl::Status GqaExpand(Context& ctx, kernels::Ptr out, kernels::CPtr qkv, int64_t rows, int NH, int NKV, int hd);
absl::Status GqaReduce(Context& ctx, kernels::Ptr dqkv, kernels::CPtr dqkv3, int64_t rows, int NH, int NKV, int hd);

// Mixture-of-experts ops (kernels/moe.h; fp32), deterministic. The routing's integers (choice,
// slot, counts) are the CPU's exactly. MoeRoute uses the context's scratch: N k E / 256 + 256 (E +
// 1) floats at most, within Context::kScratchFloats (INVALID_ARGUMENT beyond: N k E about 1e9).
absl::Status MoeRoute(Context& ctx, float* probs, float* lse, int32_t* choice, float* weight, int32_t* slot,
                      int32_t* counts, float* stats, const float* logits, int N, int E, int k, int capacity);
absl::Status MoeDispatch(Context& ctx, float* X, const float* x, const int32_t* slot, int N, int k, int C);
absl::Status MoeCombine(Context& ctx, float* y, const float* Y, const int32_t* slot, const float* weight, int N, int k,
                        int C);
absl::Status MoeCombineBackward(Context& ctx, float* dY, float* dweight, const float* dy, const float* Y,
                                const int32_t* slot, const float* weight, int N, int k, int C);
absl::Status MoeDispatchBackward(Context& ctx, float* dx, const float* dX, const int32_t* slot, int N, int k, int C);
absl::Status MoeRouterBackward(Context& ctx, float* dlogits, const float* dweight, const float* probs,
                               const float* lse, const int32_t* choice, const float* weight, const int32_t* counts,
                               int N, int E, int k, float aux_scale, float z_scale);

// cuBLASLt with fp32 accumulation (CUBLAS_COMPUTE_32F; fp32 inputs: no TF32). The inputs
// (inp, weight, bias; dout, inp, weight, gelu_pre) all fp32 or all of one 16-bit type, whose
// products are exact in fp32; an output fp32 or of the inputs' type, rounded once, after the
// bias is added in fp32: an fp32 output in cuBLASLt's bias epilogue (an fp32 bias) or by a
// kernel after (a 16-bit one); a 16-bit output through scratch32, MatmulForwardScratch floats
// (the product in fp32, then a kernel adds the bias and rounds), unless ctx.bias_epilogue():
// then cuBLASLt's bias epilogue, which rounds the product and then the sum (two roundings).
// inp (N,C), weight (C,OC) kInOut or (OC,C) kOutIn, bias (OC) or null → out (N,OC)
size_t MatmulForwardScratch(int N, int OC, kernels::Precision out, bool bias);
absl::Status MatmulForward(Context& ctx, kernels::Ptr out, kernels::CPtr inp, kernels::CPtr weight,
                           kernels::CPtr bias, int N, int C, int OC,
                           kernels::WeightLayout layout = kernels::WeightLayout::kInOut, float* scratch32 = nullptr);
// → pre (N,OC) = inp @ W + bias, out (N,OC) = gelu(pre); all of one type (16-bit: pre rounded,
// then gelu of the rounded pre rounded; scratch32 as MatmulForward's). With ctx.gelu_epilogue()
// and OC a multiple of 8, cuBLASLt's GELU_AUX_BIAS: pre and out from the fp32 sum, each rounded once.
absl::Status MatmulBiasGeluForward(Context& ctx, kernels::Ptr pre, kernels::Ptr out, kernels::CPtr inp,
                                   kernels::CPtr weight, kernels::CPtr bias, int N, int C, int OC,
                                   float* scratch32 = nullptr);
// dout (N,OC) → dinp (N,C) overwritten (null: skipped; times gelu'(gelu_pre) when given; a
// 16-bit dinp is rounded before and after that product), dweight (fp32) +=, dbias (OC, fp32)
// += (null: skipped). 16-bit inputs: this call's weight and bias gradients are rounded to the
// type before they are added (autocast's 16-bit gradients, accumulated in fp32); the weight's
// goes through scratch16, room for OC x C 16-bit values (MatmulBackwardScratch16 floats).
// gelu_dbias (C, fp32; needs dinp and gelu_pre) += dinp's column sums, as dbias takes dout's.
// With ctx.gelu_epilogue(), cuBLASLt's epilogues where they take the call (matmul.cu): DGELU or
// DGELU_BGRAD (dinp and its sums from the fp32 products: one rounding) and BGRADA/BGRADB (dbias).
size_t MatmulBackwardScratch16(int C, int OC);
absl::Status MatmulBackward(Context& ctx, kernels::Ptr dinp, float* dweight, float* dbias, kernels::CPtr dout,
                            kernels::CPtr inp, kernels::CPtr weight, int N, int C, int OC,
                            kernels::WeightLayout layout = kernels::WeightLayout::kInOut,
                            kernels::CPtr gelu_pre = nullptr, void* scratch16 = nullptr,
                            float* gelu_dbias = nullptr);

// Causal self-attention through cuBLAS batched GEMMs (fp32). qkv (B,T,3C) → out (B,T,C), att
// (B,NH,T,T) probabilities (zero above the diagonal). scratch: AttentionForwardScratch floats.
// round_bits 16 (bf16) or 10 (fp16): mixed precision, each exp(s - max) rounded to that type
// before it is normalised (kernels/attention.h); 0: fp32. qkv and out both fp32 or both of one
// 16-bit type (widened into the fp32 scratch, out rounded); att fp32.
size_t AttentionForwardScratch(int B, int T, int C, int NH);
absl::Status AttentionForward(Context& ctx, kernels::Ptr out, float* att, float* scratch, kernels::CPtr qkv, int B,
                              int T, int C, int NH, int round_bits = 0);
// dout (B,T,C), qkv, att → dqkv (B,T,3C) overwritten. scratch: AttentionBackwardScratch.
// dqkv, dout and qkv all of one type.
size_t AttentionBackwardScratch(int B, int T, int C, int NH);
absl::Status AttentionBackward(Context& ctx, kernels::Ptr dqkv, float* scratch, kernels::CPtr dout, kernels::CPtr qkv,
                               const float* att, int B, int T, int C, int NH);

// Fused causal self-attention (flash-attention style, fp32 inside; head size <= 128): the (T, T)
// scores are never stored. qkv (B,T,3C) → out (B,T,C), lse (B,NH,T): each query row's
// log-sum-exp of its scaled scores, which the backward recomputes the probabilities from.
// round_bits as AttentionForward's: the weights exp(s - m) that multiply V rounded, their sum not.
// qkv and out both fp32 or both of one 16-bit type (out rounded); lse fp32.
absl::Status FlashAttentionForward(Context& ctx, kernels::Ptr out, float* lse, kernels::CPtr qkv, int B, int T, int C,
                                   int NH, int round_bits = 0);
// dout (B,T,C), qkv, out, lse → dqkv (B,T,3C) overwritten. scratch: FlashAttentionBackwardScratch
// floats. Deterministic (no atomics). dqkv, dout, qkv and out all of one type (dqkv rounded).
size_t FlashAttentionBackwardScratch(int B, int T, int C, int NH);
absl::Status FlashAttentionBackward(Context& ctx, kernels::Ptr dqkv, float* scratch, kernels::CPtr dout,
                                    kernels::CPtr qkv, kernels::CPtr out, const float* lse, int B, int T, int C,
                                    int NH);

// The classifier's logits may be fp32 or 16-bit (read exactly; softmax and loss in fp32; the
// gradient stored rounded to their type). logits (N,V), targets (N) → losses (N)
absl::Status CrossEntropyForward(Context& ctx, float* losses, kernels::CPtr logits, const int32_t* targets, int N,
                                 int V);
// One pass per row: losses (N), and logits (N,V) := (softmax - onehot) * dloss
absl::Status CrossEntropyFusedForwardBackward(Context& ctx, float* losses, kernels::Ptr logits,
                                              const int32_t* targets, float dloss, int N, int V);

// Vocabulary-parallel classifier, as kernels::crossentropy_shard_stats and _finish.
absl::Status CrossEntropyShardStats(Context& ctx, float* stats, kernels::CPtr logits, const int32_t* targets, int N,
                                   int V, int v_begin);
absl::Status CrossEntropyShardFinish(Context& ctx, float* losses, kernels::Ptr logits, const float* all_stats,
                                    int ranks, const int32_t* targets, float dloss, int N, int V, int v_begin);

// sum of g[i]^2 (fp32 squares, fp64 across blocks, fixed order) → *result (device)
absl::Status SumSquares(Context& ctx, double* result, const float* g, int64_t N);
// The clip's multiplier and the unscaled norm from *sum_sq (kernels/grad_norm.h clip_multiplier).
absl::Status ClipMultiplier(Context& ctx, float* multiplier, double* norm, const double* sum_sq, float max_norm,
                            float inv_scale);
absl::Status ScaleInplace(Context& ctx, float* g, int64_t N, float s);

// Context parallelism's block attention (kernels/attention_block.h; fp32, head size up to
// 128; kernels/cuda/attention_block.cu): the forward merged into (out, lse), D, and the
// block's backward added into dq, dk, dv.
absl::Status AttentionBlockForward(Context& ctx, kernels::HeadRows<float> out, kernels::RowStats<float> lse,
                                   kernels::HeadRows<const float> q, kernels::HeadRows<const float> k,
                                   kernels::HeadRows<const float> v, const kernels::AttentionBlock& a);
absl::Status AttentionBlockDelta(Context& ctx, kernels::RowStats<float> D, kernels::HeadRows<const float> dout,
                                 kernels::HeadRows<const float> out, int B, int NH, int hd, int L);
absl::Status AttentionBlockBackward(Context& ctx, kernels::HeadRows<float> dq, kernels::HeadRows<float> dk,
                                    kernels::HeadRows<float> dv, kernels::HeadRows<const float> q,
                                    kernels::HeadRows<const float> k, kernels::HeadRows<const float> v,
                                    kernels::HeadRows<const float> dout, kernels::RowStats<const float> lse,
                                    kernels::RowStats<const float> D, const kernels::AttentionBlock& a);
// rows rows of width floats, src_stride apart → dst, dst_stride apart (Backend::CopyRows).
absl::Status CopyRows(Context& ctx, float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                      int64_t width, int64_t rows);

}  // namespace gantry::GANTRY_CUDA_NS
