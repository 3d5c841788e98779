// For gpu-labelled tests: skip (with the reason printed) where no CUDA device is visible,
// except under GANTRY_REQUIRE_GPU (set by tests/gpu/run.sh on a GPU host), where a missing
// device is a failure.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>

#define GANTRY_SKIP_WITHOUT_GPU()                                                                       \
  do {                                                                                                   \
    int gantry_devices = 0;                                                                              \
    if (cudaGetDeviceCount(&gantry_devices) != cudaSuccess || gantry_devices == 0) {                     \
      if (std::getenv("GANTRY_REQUIRE_GPU")) FAIL() << "GANTRY_REQUIRE_GPU is set but no CUDA device is visible"; \
      GTEST_SKIP() << "no CUDA device on this machine (run tests/gpu/run.sh on a GPU host)";            \
    }                                                                                                    \
  } while (0)
