// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// Errors of the CUDA runtime and cuBLAS(Lt) for GPU_RETURN_IF_ERROR (common/gpu_check.h, the
// one check macro of every GPU library): a failed call becomes an absl::Status carrying
// file:line, the call and the library's name for the error. cuDNN's overloads are in
// cudnn_attention.cc (the one file that includes it), NCCL's in comm/nccl.
#pragma once

#include "kernels/cuda/runtime.h"

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/gpu_check.h"

namespace gantry::GANTRY_CUDA_NS {

inline bool GpuOk(cudaError_t e) { return e == cudaSuccess; }
inline std::string GpuErrorText(cudaError_t e) {
  return absl::StrCat(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}
inline bool GpuOk(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }
inline std::string GpuErrorText(cublasStatus_t s) { return cublasGetStatusName(s); }

// A launcher's dimensions: each positive and within a launch's int range; else "op: bad
// dimension d".
absl::Status CheckDims(const char* op, std::initializer_list<int64_t> dims);

}  // namespace gantry::GANTRY_CUDA_NS
