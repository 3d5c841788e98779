// Deterministic column reductions: the columns [0, C) are cut into blocks of kCols and the
// blocks are shared out over the OpenMP threads. One thread owns each column and adds the
// rows in order, so a sum over rows has the same bits whatever the thread count.
#pragma once

#include <algorithm>

namespace gantry::kernels {

// Calls f(c0, c1) for each column block [c0, c1), blocks in parallel.
template <int kCols, typename F>
void ParallelColumnBlocks(int C, F&& f) {
  const int nblocks = (C + kCols - 1) / kCols;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; ++blk) {
    const int c0 = blk * kCols;
    f(c0, std::min(C, c0 + kCols));
  }
}

}  // namespace gantry::kernels
