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
//
// Where a failure needs another code, its context, or a clean-up first, a second argument
// takes the Status above and returns what the function returns:
//
//   GPU_RETURN_IF_ERROR(ncclGetUniqueId(&id), GpuErrorAs(absl::StatusCode::kUnavailable, where));
//   GPU_RETURN_IF_ERROR(cudaSetDevice(device_), fail);  // auto fail = [&](const absl::Status& s) {...}
//
// So every check is this macro: scripts/check_deps.py rejects a result compared by hand with a
// library's success value (`!= cudaSuccess`) outside the few places it lists. Where no error is
// built (a probe whose failure is an answer, a result passed on), GpuOk(r) says "it succeeded".
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gantry {

// The Status of a failed GPU call: INTERNAL, "file:line: expr failed: text".
inline absl::Status GpuCallError(const std::string& text, const char* expr, const char* file, int line) {
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", expr, " failed: ", text));
}

// An on_error for GPU_RETURN_IF_ERROR: the failure's words after `context`, under `code`.
inline auto GpuErrorAs(absl::StatusCode code, std::string context) {
  return [code, context = std::move(context)](const absl::Status& s) {
    return absl::Status(code, absl::StrCat(context, ": ", s.message()));
  };
}

}  // namespace gantry

// GPU_RETURN_IF_ERROR(expr) or GPU_RETURN_IF_ERROR(expr, on_error): the second form returns
// on_error(the Status) instead of the Status.
#define GPU_RETURN_IF_ERROR(...) GANTRY_GPU_PICK(__VA_ARGS__, GANTRY_GPU_RETURN_2, GANTRY_GPU_RETURN_1, )(__VA_ARGS__)
#define GANTRY_GPU_PICK(_1, _2, name, ...) name
#define GANTRY_GPU_RETURN_1(expr)                                                                  \
  do {                                                                                             \
    const auto gantry_gpu_result_ = (expr);                                                        \
    if (!GpuOk(gantry_gpu_result_))                                                                \
      return ::gantry::GpuCallError(GpuErrorText(gantry_gpu_result_), #expr, __FILE__, __LINE__); \
  } while (0)
#define GANTRY_GPU_RETURN_2(expr, on_error)                                                             \
  do {                                                                                                  \
    const auto gantry_gpu_result_ = (expr);                                                             \
    if (!GpuOk(gantry_gpu_result_))                                                                     \
      return (on_error)(::gantry::GpuCallError(GpuErrorText(gantry_gpu_result_), #expr, __FILE__, __LINE__)); \
  } while (0)
