// How the CPU GEMMs cut their output among threads.
//
// OpenBLAS 0.3.21's Haswell and Zen sgemm give an output element different bits depending on
// the extent of the call that computes it (rows near a call's edge when the edge is not a
// multiple of 24; any split of the columns; docs/perf/cpu.md, "bf16 GEMM on the CPU"). So the
// sgemm calls are cut by the shape alone, into ShapeBlocks blocks whatever the thread count,
// and the blocks are shared out over the threads: a result then has the same bits at any
// thread count on every OpenBLAS kernel.
#pragma once

#include <algorithm>
#include <cstdint>

namespace gantry::kernels {

// The part [i0, i1) of `total` rows (or columns) that part t of n is. Edges fall on multiples
// of `align` (whole cache lines of output rows; whole kernel tiles of columns).
inline void Slice(int total, int t, int n, int align, int* i0, int* i1) {
  auto edge = [&](int i) {
    return i == n ? total : std::min(total, static_cast<int>(int64_t{total} * i / n) / align * align);
  };
  *i0 = edge(t);
  *i1 = edge(t + 1);
}

// The blocks a dimension of `total` is cut into: 6 per 6144, which balance 1, 2, 3 and 6
// threads; below 1536, 2 (the demo model's 768 tokens: each call is small already). Finer
// cuts made the fp32 step 2% slower (smaller calls, more packing; docs/perf/cpu.md).
inline int ShapeBlocks(int total) { return total < 1536 ? 2 : 6 * ((total + 6143) / 6144); }

}  // namespace gantry::kernels
