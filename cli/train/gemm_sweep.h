// gantry-train calibrate --gemm-sweep: a device's GEMM rate per shape (jobspec::GemmTable) for
// the step cost model, measured through Gantry's own backend GEMMs (kernels/backend.h
// MatmulForward and MatmulBackward: cuBLASLt on the cuda backend) over a grid of shapes: m
// (the rows: tokens per micro-batch), n and k (the widths: C, 3C, 4C, the vocabulary) each over
// the same sizes, 768 to 16,384 by default, in bf16 and fp32. The rest of the profile (attention,
// memory bandwidth, peak) comes from a base profile.
//
// Each shape: forward MatmulForward(out, inp, weight, no bias, m, k, n), out in the inputs' type
// (the weights in (k, n) layout, GPT-2's); backward MatmulBackward(dinp in that type, dweight
// fp32, no bias gradient). Each is run once to warm up (cuBLASLt's plan), once timed alone to
// size a batch of back-to-back calls lasting at least `min_batch_s`, then `repeats` such
// batches are timed (each ended by Synchronize): the median batch over its calls is the call's
// time. Inputs are uniform in [-0.5, 0.5) (so no zero data runs faster or cooler).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "jobspec/cluster.h"
#include "kernels/backend.h"

namespace gantry::calibrate {

struct SweepOptions {
  kernels::BackendKind kind = kernels::BackendKind::kCuda;
  int device = 0;
  // m, n and k each over these (a grid of size^3 shapes), per precision; empty: not measured.
  std::vector<int64_t> bf16_sizes = {768, 1536, 3072, 6144, 12288, 16384};
  // fp32 GEMMs run at a fifteenth of bf16's on an H100: a smaller grid keeps the sweep within a
  // minute there (the sizes beyond it take the largest's rate: GemmTable's clamp).
  std::vector<int64_t> fp32_sizes = {768, 1536, 3072, 6144};
  int repeats = 3;
  double min_batch_s = 2e-3;
};

struct SweepProgress {
  // A line a shape (and one at the start): for the terminal.
  std::function<void(const std::string&)> line;
  // The profile so far, after each precision's grid is complete (so that a run cut short keeps
  // the grids it finished). Its error ends the sweep.
  std::function<absl::Status(const jobspec::DeviceProfile&)> grid_done;
};

// The base profile with its gemm_table measured on `o`'s device, named "<base>-sweep", and its
// single GEMM rates (gemm_fwd, gemm_bwd: what a precision without a grid takes, and the unfused
// attention's) set to the median of the table's rates in each measured precision. base null:
// the built-in profile the device's description names (BuiltinProfileOf), or INVALID_ARGUMENT.
absl::StatusOr<jobspec::DeviceProfile> GemmSweep(const SweepOptions& o, const jobspec::DeviceProfile* base,
                                                 const SweepProgress& progress = {});

// The built-in profile a device's description names ("cuda:0 (NVIDIA H200)": h200; H100,
// A100 likewise), or NOT_FOUND.
absl::StatusOr<std::string> BuiltinProfileOf(const std::string& description);

}  // namespace gantry::calibrate
