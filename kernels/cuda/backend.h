// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// The cuda backend (kernels/backend.h) over kernels/cuda/ops.h. The same source builds the
// real one (namespace gantry::cuda, nvcc's runtime) and the cuda-emulated one (namespace
// gantry::cuda_emulated, kernels/emulated's runtime): kernels/cuda/runtime.h.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/cuda/ns.h"

namespace gantry::GANTRY_CUDA_NS {

// On device ordinal `device`: UNAVAILABLE when it is not there.
absl::StatusOr<std::unique_ptr<kernels::Backend>> NewBackend(int device, const kernels::BackendOptions& options);
// Devices visible to this process (0 when the runtime cannot tell).
int DeviceCount();

}  // namespace gantry::GANTRY_CUDA_NS
