// kernels/cuda/attention_block.cu built for the emulator (kernels/cuda/runtime.h): the same
// launchers and device code, compiled as C++ in namespace gantry::cuda_emulated.
#include "kernels/emulated/device.h"
// (the device language first)
#include "kernels/cuda/attention_block.cu"
