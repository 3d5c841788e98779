// Causal self-attention through cuDNN's fused scaled-dot-product-attention graphs (NVIDIA's
// cudnn-frontend, tensor cores): the fast path of 16-bit calls on a GPU. The fused kernels
// (flash_attention.cuh) stay the fp32 path and the exact reference.
//
// The tensors are the model's, read and written in place through strides: qkv (B,T,3C) gives
// Q, K and V as (B,NH,T,hs) views at channel offsets 0, C and 2C; out and dout (B,T,C); dqkv
// (B,T,3C) like qkv; lse (B,NH,T) fp32, each query row's log-sum-exp of its scaled scores
// (cuDNN's softmax statistics: the fused kernels' state, so either backward reads it).
//
// cuDNN is loaded at run time (the frontend's dynamic loading), so every binary runs where it
// is absent: Create then fails, naming the library. Graphs are built once per shape and kept.
// The backward is cuDNN's deterministic one: two runs on one GPU give the same bits.
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
  static absl::StatusOr<std::unique_ptr<CudnnAttention>> Create();
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // "cuDNN 9.19.0"
  std::string Describe() const;
  // OK when this path takes a call on these tensors: qkv bf16 or fp16, the softmax weights
  // rounded to its type (weights == qkv's type: cuDNN multiplies V by 16-bit weights), a head
  // size C / NH that is a multiple of 8 up to kMaxHead, T of 2 or more (cuDNN refuses one
  // token). Else INVALID_ARGUMENT naming why.
  static absl::Status Takes(kernels::CPtr qkv, int B, int T, int C, int NH, kernels::Precision weights);
  // qkv (B,T,3C) → out (B,T,C), lse (B,NH,T). Every pointer 16-byte aligned (INVALID_ARGUMENT
  // naming the tensor otherwise).
  absl::Status Forward(cudaStream_t stream, kernels::Ptr out, float* lse, kernels::CPtr qkv, int B, int T, int C,
                       int NH);
  // dout (B,T,C), qkv, out, lse → dqkv (B,T,3C) overwritten.
  absl::Status Backward(cudaStream_t stream, kernels::Ptr dqkv, kernels::CPtr dout, kernels::CPtr qkv,
                        kernels::CPtr out, const float* lse, int B, int T, int C, int NH);
  // Graphs built so far (one per shape, type and direction).
  int graphs() const;

 private:
  struct Impl;
  explicit CudnnAttention(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gantry::GANTRY_CUDA_NS
