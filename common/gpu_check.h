// One check for the status codes of every GPU library (the CUDA runtime, cuBLAS(Lt), cuDNN and
// its frontend, NCCL): a failed call becomes an absl::Status naming file:line, the call, and
// the library's own name for the error, as NCCL's NCCLCHECK does.
//
//   GPU_RETURN_IF_ERROR(cudaMemcpyAsync(...));
//
// Each library's result type has two overloads beside the code that includes the library:
//   bool GpuOk(Result r);               // the call succeeded
//   std::string GpuErrorText(Result r); // "cudaErrorInvalidValue (invalid argument)"
// (kernels/cuda/check.h for the runtime, cuBLAS and cuDNN; comm/nccl/nccl_communicator.cc for
// NCCL). The macro finds them by ordinary lookup from the calling namespace. This header
// includes no GPU library: common code and CPU-only builds include it freely.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gantry {

// The Status of a failed GPU call: INTERNAL, "file:line: expr failed: text".
inline absl::Status GpuCallError(const std::string& text, const char* expr, const char* file, int line) {
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", expr, " failed: ", text));
}

}  // namespace gantry

#define GPU_RETURN_IF_ERROR(expr)                                                                  \
  do {                                                                                             \
    const auto gantry_gpu_result_ = (expr);                                                        \
    if (!GpuOk(gantry_gpu_result_))                                                                \
      return ::gantry::GpuCallError(GpuErrorText(gantry_gpu_result_), #expr, __FILE__, __LINE__); \
  } while (0)
