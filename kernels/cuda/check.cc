// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
#include "kernels/cuda/check.h"
#include "kernels/cuda/ns.h"

#include "absl/strings/str_cat.h"

namespace gantry::GANTRY_CUDA_NS {

absl::Status CheckDims(const char* op, std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) {
    if (d <= 0 || d > (int64_t{1} << 31) - 1) return absl::InvalidArgumentError(absl::StrCat(op, ": bad dimension ", d));
  }
  return absl::OkStatus();
}

}  // namespace gantry::GANTRY_CUDA_NS
