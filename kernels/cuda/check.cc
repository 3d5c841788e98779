#include "kernels/cuda/check.h"
#include "kernels/cuda/ns.h"

#include "absl/strings/str_cat.h"

namespace gantry::GANTRY_CUDA_NS {

absl::Status CudaStatus(cudaError_t err, const char* expr, const char* file, int line) {
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", expr, " failed: ",
                                          cudaGetErrorName(err), " (",
                                          cudaGetErrorString(err), ")"));
}

}  // namespace gantry::GANTRY_CUDA_NS
