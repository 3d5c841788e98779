#include "kernels/cuda/check.h"

#include "absl/strings/str_cat.h"

namespace gantry::cuda {

absl::Status CudaStatus(cudaError_t err, const char* expr, const char* file, int line) {
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", expr, " failed: ",
                                          cudaGetErrorName(err), " (",
                                          cudaGetErrorString(err), ")"));
}

}  // namespace gantry::cuda
