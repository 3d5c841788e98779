// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// What kernels/cuda's host code calls: the CUDA runtime, cuBLAS and cuBLASLt, and kernel
// launches. Built by nvcc these are the real ones; with GANTRY_CUDA_EMULATED they are the
// CPU emulation (kernels/emulated/cuda_api.h), and a launch runs the same device code with
// the same geometry under kernels/emulated/emulator.h.
//   GANTRY_LAUNCH(Kernel, grid, block, shared_bytes, stream)(args...)
// is Kernel<<<grid, block, shared_bytes, stream>>>(args...). A template kernel names its
// template arguments (Kernel<F>): the emulated launch cannot deduce them from args.
#pragma once

#include "kernels/cuda/ns.h"

#if defined(GANTRY_CUDA_EMULATED)
#include "kernels/emulated/cuda_api.h"
#include "kernels/emulated/emulator.h"
namespace gantry::GANTRY_CUDA_NS {
using namespace ::gantry::emucuda;  // NOLINT: the emulated API stands where the real one is global
}  // namespace gantry::GANTRY_CUDA_NS
#define GANTRY_LAUNCH(kernel, grid, block, shared, stream) \
  ::gantry::emu::Launcher(grid, block, shared, stream).Bind(kernel)
#else
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#define GANTRY_LAUNCH(kernel, grid, block, shared, stream) kernel<<<grid, block, shared, stream>>>
#endif
