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

DeviceInventory InventoryOf(const DeviceName& device) {
  DeviceInventory inv;
  if (device.kind == kernels::BackendKind::kCudaEmulated) {
    inv.count = 1;  // the emulated runtime offers any ordinal up to 8
    inv.name = absl::StrCat(kernels::BackendKindName(device.kind), ":", device.ordinal);
    struct sysinfo si;
    if (sysinfo(&si) == 0) inv.memory_bytes = static_cast<int64_t>(si.totalram) * si.mem_unit;
    return inv;
  }
#ifdef GANTRY_WITH_CUDA
  if (device.kind == kernels::BackendKind::kCuda) {
    inv.count = CudaDeviceCount();
    cudaDeviceProp prop{};
    if (inv.count > device.ordinal && cudaGetDeviceProperties(&prop, device.ordinal) == cudaSuccess) {
      inv.name = prop.name;
      inv.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    }
  }
#endif
  return inv;
}


absl::StatusOr<std::unique_ptr<DeviceModel>> CreateDeviceModel(const std::string& device,
                                                               const model::GPTConfig& config, int B, int T,
                                                               const DeviceOptions& options) {
  auto name = ParseDevice(device);
  if (!name.ok()) return name.status();
  if (name->kind == kernels::BackendKind::kCpu) return std::unique_ptr<DeviceModel>();
  kernels::BackendOptions bo;
  bo.fused_attention = options.fused_attention;
  auto backend = kernels::CreateBackend(name->kind, name->ordinal, bo);
  if (!backend.ok()) return backend.status();
  return CreateBackendModel(std::move(*backend), config, B, T);
}

}  // namespace gantry::train
