// The namespace of kernels/cuda's code: gantry::cuda when nvcc builds it for a GPU, and
// gantry::cuda_emulated when the host compiler builds the same sources for the emulator
// (kernels/emulated; the build defines GANTRY_CUDA_NS), so that one binary can hold both.
#pragma once

#ifndef GANTRY_CUDA_NS
#define GANTRY_CUDA_NS cuda
#endif
