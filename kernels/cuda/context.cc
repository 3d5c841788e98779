// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
#include "kernels/cuda/context.h"
#include "kernels/cuda/ns.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"

namespace gantry::GANTRY_CUDA_NS {

absl::StatusOr<std::unique_ptr<Context>> Context::Create(int device) {
  std::unique_ptr<Context> c(new Context());
  c->device_ = device;
  GPU_RETURN_IF_ERROR(cudaSetDevice(device));
  GPU_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&c->own_stream_, cudaStreamNonBlocking));
  c->stream_ = c->own_stream_;
  GPU_RETURN_IF_ERROR(cublasCreate(&c->blas_));
  GPU_RETURN_IF_ERROR(cublasSetStream(c->blas_, c->stream_));
  // fp32 GEMMs stay fp32 (no TF32): the CPU twins are the reference.
  GPU_RETURN_IF_ERROR(cublasSetMathMode(c->blas_, CUBLAS_DEFAULT_MATH));
  GPU_RETURN_IF_ERROR(cublasLtCreate(&c->lt_));
  GPU_RETURN_IF_ERROR(cudaMalloc(&c->lt_workspace_, kLtWorkspaceBytes));
  GPU_RETURN_IF_ERROR(cudaMalloc(&c->scratch_, kScratchFloats * sizeof(float)));
  return c;
}

Context::~Context() {
  if (own_stream_) cudaStreamSynchronize(own_stream_);
  DeleteMatmulPlans(matmul_plans_);
  if (scratch_) cudaFree(scratch_);
  if (lt_workspace_) cudaFree(lt_workspace_);
  if (lt_) cublasLtDestroy(lt_);
  if (blas_) cublasDestroy(blas_);
  if (own_stream_) cudaStreamDestroy(own_stream_);
}

absl::Status Context::SetStream(cudaStream_t s) {
  cudaStream_t next = s != nullptr ? s : own_stream_;
  GPU_RETURN_IF_ERROR(cublasSetStream(blas_, next));
  stream_ = next;
  return absl::OkStatus();
}

absl::Status Context::Synchronize() const {
  GPU_RETURN_IF_ERROR(cudaStreamSynchronize(own_stream_));
  return absl::OkStatus();
}

void Context::Notice(const std::string& key, const std::string& text) {
  std::lock_guard<std::mutex> l(notices_mu_);
  if (!noticed_.insert(key).second) return;
  std::fprintf(stderr, "%s\n", text.c_str());
  untaken_.push_back(text);
}

std::vector<std::string> Context::TakeNotices() {
  std::lock_guard<std::mutex> l(notices_mu_);
  return std::exchange(untaken_, {});
}

}  // namespace gantry::GANTRY_CUDA_NS
