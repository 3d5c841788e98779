#include "worker/train/device.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#ifdef GANTRY_WITH_CUDA
#include <cuda_runtime.h>

#include "worker/train/cuda_model.h"
#endif

namespace gantry::train {

namespace {
// -1 for "cpu", else the CUDA ordinal.
absl::StatusOr<int> ParseDevice(const std::string& device) {
  if (device == "cpu") return -1;
  if (device == "cuda") return 0;
  int n = -1;
  if (device.rfind("cuda:", 0) == 0 && absl::SimpleAtoi(device.substr(5), &n) && n >= 0) return n;
  return absl::InvalidArgumentError(absl::StrCat("device '", device, "': expected cpu, cuda or cuda:N"));
}
}  // namespace

int CudaDeviceCount() {
#ifdef GANTRY_WITH_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

absl::Status ValidateDevice(const std::string& device) { return ParseDevice(device).status(); }

absl::StatusOr<std::unique_ptr<DeviceModel>> CreateDeviceModel(const std::string& device,
                                                               const model::GPTConfig& config, int B, int T,
                                                               const DeviceOptions& options) {
  auto ordinal = ParseDevice(device);
  if (!ordinal.ok()) return ordinal.status();
  if (*ordinal < 0) return std::unique_ptr<DeviceModel>();
#ifdef GANTRY_WITH_CUDA
  return CreateCudaModel(*ordinal, config, B, T, options);
#else
  return absl::UnimplementedError(
      absl::StrCat("device ", device, ": this build has no CUDA (nvcc was not found when it was configured)"));
#endif
}

}  // namespace gantry::train
