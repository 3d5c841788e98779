// The backend factory: every backend this build has (kernels/backend.h: CreateBackend,
// DeviceCount). A library of its own (gantry_backends), so that what needs only the interface
// and the cpu backend (the model, the CLI's sampling) links no CUDA library.
#include "kernels/backend.h"

#include "absl/strings/str_cat.h"

// kernels/cuda/backend.h, as each of its two builds declares it.
namespace gantry::cuda_emulated {
absl::StatusOr<std::unique_ptr<kernels::Backend>> NewBackend(int device, const kernels::BackendOptions& options);
int DeviceCount();
}  // namespace gantry::cuda_emulated
#if defined(GANTRY_HAVE_CUDA_BACKEND)
namespace gantry::cuda {
absl::StatusOr<std::unique_ptr<kernels::Backend>> NewBackend(int device, const kernels::BackendOptions& options);
int DeviceCount();
}  // namespace gantry::cuda
#endif

namespace gantry::kernels {

int DeviceCount(BackendKind kind) {
  switch (kind) {
    case BackendKind::kCpu:
      return 1;
    case BackendKind::kCudaEmulated:
      return cuda_emulated::DeviceCount();
    case BackendKind::kCuda:
#if defined(GANTRY_HAVE_CUDA_BACKEND)
      return cuda::DeviceCount();
#else
      return 0;
#endif
  }
  return 0;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind, int device, const BackendOptions& options) {
  switch (kind) {
    case BackendKind::kCpu:
      return absl::InvalidArgumentError("the cpu backend is shared: use kernels::CpuBackend()");
    case BackendKind::kCudaEmulated:
      return cuda_emulated::NewBackend(device, options);
    case BackendKind::kCuda:
#if defined(GANTRY_HAVE_CUDA_BACKEND)
      return cuda::NewBackend(device, options);
#else
      return absl::UnimplementedError("this build of Gantry has no CUDA backend (nvcc was not found at configure time)");
#endif
  }
  return absl::InvalidArgumentError("unknown backend kind");
}

}  // namespace gantry::kernels
