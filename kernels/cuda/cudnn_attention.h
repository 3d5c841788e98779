// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// Causal self-attention through cuDNN's fused scaled-dot-product-attention graphs (NVIDIA's
// cudnn-frontend, tensor cores): the fast path of 16-bit calls on a GPU. The fused kernels
// (flash_attention.cuh) stay the fp32 path and the exact reference.
//
// The tensors are the model's, read and written in place through strides: qkv rows of
// W = (NH + 2 NKV)·hs give Q as a (B,NH,T,hs) view at channel 0, K and V as (B,NKV,T,hs) views
// at channels NH·hs and (NH + NKV)·hs (NKV = NH: the (B,T,3C) rows of multi-head attention;
// NKV < NH: grouped-query attention straight on the projection's rows, query head h reading
// key/value head h / (NH / NKV) as kernels/gqa.h repeats them: cuDNN's K and V have their own
// head count); out and dout (B,T,C) with C = NH·hs; dqkv like qkv, the key/value heads' gradients
// summed over their groups by cuDNN; lse (B,NH,T) fp32, each query row's log-sum-exp of its
// scaled scores (cuDNN's softmax statistics: the fused kernels' state, so either backward
// reads it).
//
// cuDNN is loaded at run time (the frontend's dynamic loading), so every binary runs where it
// is absent: Create then fails, naming the library. Graphs are built once per shape and kept.
// The backward is cuDNN's deterministic one unless Create is told otherwise: two runs on one
// GPU give the same bits. A graph
// cuDNN has no plan for is refused as UNIMPLEMENTED (Supports), once per shape.
//
// One source for both builds (kernels/cuda/runtime.h): with GANTRY_CUDA_EMULATED the same
// wrapper calls the emulated stand-in of the frontend (kernels/emulated/cudnn_frontend.h),
// which checks what cuDNN checks and computes with the cpu twin.
#pragma once

#include "kernels/cuda/runtime.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/types.h"

namespace gantry::GANTRY_CUDA_NS {

class CudnnAttention {
 public:
  // The largest head size cuDNN's fused attention takes (a multiple of 8 up to it).
  static constexpr int kMaxHead = 256;
  // Loads cuDNN (once a process: libcudnn.so.9 through the dynamic loader's search path, or
  // the file that GANTRY_CUDNN_LIBRARY names) and makes a handle for the current device.
  // FAILED_PRECONDITION naming the library and the loader's words where it cannot be loaded,
  // or where it is older than cuDNN 9.
  // deterministic: the backward's algorithm (cuDNN's deterministic one, or its faster one
  // whose atomics may change the bits run to run).
  static absl::StatusOr<std::unique_ptr<CudnnAttention>> Create(bool deterministic = true);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // "cuDNN 9.19.0"
  std::string Describe() const;
  // OK when this path takes a call on these tensors: qkv bf16 or fp16, the softmax weights
  // rounded to its type (weights == qkv's type: cuDNN multiplies V by 16-bit weights), a head
  // size C / NH that is a multiple of 8 up to kMaxHead, T of 2 or more (cuDNN refuses one
  // token), NKV key/value heads that divide NH. Else INVALID_ARGUMENT naming why.
  static absl::Status Takes(kernels::CPtr qkv, int B, int T, int C, int NH, int NKV, kernels::Precision weights);
  // qkv (B,T,(NH + 2 NKV)·hs) → out (B,T,C), lse (B,NH,T). Every pointer 16-byte aligned
  // (INVALID_ARGUMENT naming the tensor otherwise).
  absl::Status Forward(cudaStream_t stream, kernels::Ptr out, float* lse, kernels::CPtr qkv, int B, int T, int C,
                       int NH, int NKV);
  // dout (B,T,C), qkv, out, lse → dqkv (B,T,(NH + 2 NKV)·hs) overwritten.
  absl::Status Backward(cudaStream_t stream, kernels::Ptr dqkv, kernels::CPtr dout, kernels::CPtr qkv,
                        kernels::CPtr out, const float* lse, int B, int T, int C, int NH, int NKV);
  // OK where cuDNN builds a plan for the forward (backward false) or backward graph of these
  // shapes (head size hs, NKV key/value heads); else the refusal, UNIMPLEMENTED with cuDNN's
  // words ("no plan"). The graph is built once and kept (a refusal is remembered too), so
  // asking again, and Forward/Backward of the same shapes, costs a lookup. Forward and
  // Backward answer UNIMPLEMENTED the same way for a graph cuDNN will not plan: the caller may
  // take another path (kernels/cuda/backend.cc falls back to the fused kernels); any other
  // error is one.
  absl::Status Supports(bool backward, kernels::Precision type, int B, int T, int NH, int NKV, int hs);
  // Graphs built so far (one per shape, grouping, type and direction).
  int graphs() const;

  // Context parallelism's 16-bit blocks (AttentionBlock::values, kernels/attention_block.h): a
  // block of L query rows against a block of L key/value rows of each of B sequences, in packed
  // 16-bit tensors: q and
  // o (B, L, NH·hs) rows, kv (B, L, 2·NKV·hs) rows (each row's NKV key heads, then its value
  // heads, as the ring's blocks travel), stats (B, NH, L) fp32; causal (the diagonal block:
  // query row i sees keys j <= i) or not (every key seen); the scores times scale. The same
  // refusals as the calls above (Takes on L, Supports' UNIMPLEMENTED "no plan", remembered per
  // shape). Every pointer 16-byte aligned.
  // Forward: q, kv → o, stats (the block's own log-sum-exps).
  absl::Status BlockForward(cudaStream_t stream, kernels::Ptr o, float* stats, kernels::CPtr q, kernels::CPtr kv,
                            int B, int L, int NH, int NKV, int hs, bool causal, float scale);
  // Backward from the merged output: q, kv, o (the rows' final output over every block), dout,
  // stats (their final log-sum-exps) → dq (B, L, NH·hs), dkv (B, L, 2·NKV·hs) overwritten: the
  // block's exact share of the whole attention's gradients (cuDNN computes D = rowsum(dO·O)
  // from o and dout itself; p_ij = exp(s_ij − stats_i)), dK and dV summed over each group.
  absl::Status BlockBackward(cudaStream_t stream, kernels::Ptr dq, kernels::Ptr dkv, kernels::CPtr q,
                             kernels::CPtr kv, kernels::CPtr o, kernels::CPtr dout, const float* stats, int B, int L,
                             int NH, int NKV, int hs, bool causal, float scale);
  // Supports for a block graph: OK, or INVALID_ARGUMENT (Takes) or UNIMPLEMENTED (no plan).
  absl::Status SupportsBlock(bool backward, kernels::Precision type, int B, int L, int NH, int NKV, int hs,
                             bool causal, float scale);

 private:
  struct Impl;
  explicit CudnnAttention(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gantry::GANTRY_CUDA_NS
