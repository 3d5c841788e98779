// What each emulated device is doing, for its metrics (worker/gpu_metrics reads it as NVML is
// read on a GPU): the device a host thread runs on (cudaSetDevice), the time its kernels ran and
// the bytes cudaMalloc holds on it.
//
// Busy time is NVML's utilisation's numerator: the time during which one or more kernels ran on
// the device. A launch (emulator.cc LaunchRaw) and each library stand-in's work (cuBLAS, cuBLASLt,
// cuDNN) hold a BusyScope on the calling thread's device; scopes nest (the outer one counts) and
// scopes on several threads of one device overlap as kernels on several streams do: the device
// is busy while at least one is open, never counted twice.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gantry::emu {

constexpr int kDeviceCount = 8;
constexpr size_t kDeviceBytes = size_t{80} << 30;  // each device's memory, as cudaMemGetInfo says: an H100's
constexpr const char* kDeviceModel = "emulated CUDA device";

// The calling thread's device (0 until set; cudaSetDevice checks the range before it sets).
int CurrentDevice();
void SetCurrentDevice(int device);

// Marks the calling thread's current device busy from construction to destruction.
class BusyScope {
 public:
  BusyScope();
  ~BusyScope();
  BusyScope(const BusyScope&) = delete;
  BusyScope& operator=(const BusyScope&) = delete;

 private:
  int device_;
  bool outer_;  // the thread's outermost scope: the one that counts
};

// cudaMalloc (+bytes) and cudaFree (-bytes) on a device.
void AddAllocated(int device, int64_t bytes);

struct DeviceUsage {
  uint64_t busy_ns = 0;         // since the process started, the open interval included
  uint64_t kernels = 0;         // scopes closed (launches and library calls)
  int64_t allocated_bytes = 0;  // held by cudaMalloc now
};
// A device's usage now; an out-of-range device reads all zeros.
DeviceUsage UsageOf(int device);

}  // namespace gantry::emu
