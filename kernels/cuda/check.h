// CUDA error checking: a failed CUDA call becomes an absl::Status carrying file:line.
#pragma once

#include "kernels/cuda/runtime.h"

#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"

namespace gantry::GANTRY_CUDA_NS {

absl::Status CudaStatus(cudaError_t err, const char* expr, const char* file, int line);
// A launcher's dimensions: each positive and within a launch's int range; else "op: bad
// dimension d".
absl::Status CheckDims(const char* op, std::initializer_list<int64_t> dims);

}  // namespace gantry::GANTRY_CUDA_NS

#define CUDA_RETURN_IF_ERROR(expr)                                                  \
  do {                                                                              \
    cudaError_t gantry_cuda_err_ = (expr);                                          \
    if (gantry_cuda_err_ != cudaSuccess)                                            \
      return ::gantry::GANTRY_CUDA_NS::CudaStatus(gantry_cuda_err_, #expr, __FILE__, __LINE__); \
  } while (0)
