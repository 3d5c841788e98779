#include "worker/train/device.h"

#include <sys/sysinfo.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#ifdef GANTRY_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace gantry::train {

absl::StatusOr<DeviceName> ParseDevice(const std::string& device) {
  const size_t colon = device.find(':');
  const std::string kind = device.substr(0, colon);
  DeviceName d;
  auto k = kernels::ParseBackendKind(kind);
  int n = 0;
  if (k.ok() && (colon == std::string::npos ||
                 (*k != kernels::BackendKind::kCpu && absl::SimpleAtoi(device.substr(colon + 1), &n) && n >= 0))) {
    d.kind = *k;
    d.ordinal = n;
    return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("device '", device, "': expected cpu, cuda, cuda:N, cuda-emulated or cuda-emulated:N"));
}

namespace {
// GPUs visible from the device's ordinal on (the emulated runtime's count for cuda-emulated).
int VisibleFrom(const DeviceName& device) {
  return std::max(0, kernels::DeviceCount(device.kind) - device.ordinal);
}
}  // namespace

absl::Status CheckGpus(const DeviceName& device, int gpus) {
  if (gpus < 0) return absl::InvalidArgumentError(absl::StrCat(gpus, " GPUs"));
  if (device.kind == kernels::BackendKind::kCpu) {
    return gpus == 0 ? absl::OkStatus() : absl::InvalidArgumentError("a cpu worker offers no GPU (--gpus is for cuda kinds)");
  }
  const int visible = VisibleFrom(device);
  if (gpus > visible) {
    return absl::InvalidArgumentError(absl::StrCat(
        gpus, " GPUs from ", kernels::BackendKindName(device.kind), ":", device.ordinal, " asked, but ", visible,
        device.kind == kernels::BackendKind::kCuda ? " are visible from it (CUDA_VISIBLE_DEVICES, nvidia-smi)"
                                                   : " emulated devices exist from it"));
  }
  return absl::OkStatus();
}

DeviceInventory InventoryOf(const DeviceName& device, int gpus) {
  DeviceInventory inv;
  if (device.kind == kernels::BackendKind::kCudaEmulated) {
    inv.count = std::min(gpus > 0 ? gpus : 1, VisibleFrom(device));
    inv.name = absl::StrCat(kernels::BackendKindName(device.kind), ":", device.ordinal);
    struct sysinfo si;
    if (sysinfo(&si) == 0) inv.memory_bytes = static_cast<int64_t>(si.totalram) * si.mem_unit;
    return inv;
  }
#ifdef GANTRY_WITH_CUDA
  if (device.kind == kernels::BackendKind::kCuda) {
    inv.count = gpus > 0 ? std::min(gpus, VisibleFrom(device)) : VisibleFrom(device);
    cudaDeviceProp prop{};
    if (inv.count > 0 && cudaGetDeviceProperties(&prop, device.ordinal) == cudaSuccess) {
      inv.name = prop.name;
      inv.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    }
  }
#endif
  return inv;
}

}  // namespace gantry::train
