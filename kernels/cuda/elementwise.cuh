// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// The one-thread-per-element launch of the elementwise ops (gelu.cu, residual.cu, cast.cu,
// grad_norm.cu's scaling): blocks of kBlock threads, the element count checked.
#pragma once

#include "kernels/cuda/ns.h"

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/check.h"

namespace gantry::GANTRY_CUDA_NS {
namespace {  // one translation unit each

constexpr int kBlock = 256;

inline unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + kBlock - 1) / kBlock); }

inline absl::Status CheckLength(int64_t n) {
  if (n < 0 || n > (int64_t{1} << 40)) return absl::InvalidArgumentError("bad element count");
  return absl::OkStatus();
}

// One thread per element: kernel(args..., n) over Blocks(n) blocks of kBlock.
template <typename... Params, typename... Args>
absl::Status Elementwise(void (*kernel)(Params...), int64_t n, cudaStream_t stream, Args... args) {
  if (auto s = CheckLength(n); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  GANTRY_LAUNCH(kernel, Blocks(n), kBlock, 0, stream)(args..., n);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace
}  // namespace gantry::GANTRY_CUDA_NS
