// Enough of CUDA's execution model to run device code on the CPU (the cuda-emulated backend,
// and the kernels' tests in CI, which has no GPU). A launch runs its blocks one after the
// other on the calling thread; a block's threads are fibers on that thread, switched only at
// barriers, so a kernel without barriers costs about a function call per thread.
//   __syncthreads     a barrier over the block's threads
//   __syncwarp        a barrier over the warp's lanes
//   a warp shuffle    a write to the warp's exchange slots, a barrier, a read
//   a warp's xor tree a write, a barrier, and the tree's sums from the 32 values read
//                     (XorTree: what a loop of xor shuffles computes, in one exchange)
// A thread that returns drops out of its barriers, as an exited CUDA thread stops counting.
// A barrier that only some threads reach is undefined on a GPU; here the launch stops the
// process naming the kernel's block and the threads left waiting (a test fails, not hangs).
// A block's dynamic shared memory is one buffer, and a `__shared__` array is a thread-local
// static: the running block's, on this thread.
//
// Not emulated: memory ordering beyond the barriers, timing, occupancy, shared-memory
// limits (the launchers check those), gridDim.z and blockDim.z (must be 1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gantry::emu {

struct Dim3 {
  Dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  unsigned x, y, z;
};

struct Block;
struct Thread {
  Dim3 tid, bid, bdim, gdim;
  Block* block = nullptr;
  unsigned linear = 0;  // tid.x + tid.y * bdim.x: warps are runs of 32 of these
};
// The thread running now (set by the scheduler before it resumes a fiber). Initial-exec TLS,
// so that threadIdx and friends cost a load.
extern __thread const Thread* gantry_emu_self;
inline const Thread& Self() { return *gantry_emu_self; }
// The running block's dynamic shared memory.
float* DynamicShared();

void SyncThreads();
void SyncWarp();
// Every lane of the warp offers v; after the warp's barrier, the warp's 32 offers in lane
// order (valid until this lane's exchange after next). A lane that does not exist offers 0.
const float* ExchangeAll(float v);
// A warp shuffle: every lane offers v and takes lane src's offer.
float Exchange(float v, unsigned src);

// Lane `lane`'s value after the xor butterfly's levels first, first/2, ..., o:
// op(its value after the level before, its partner lane ^ o's), from the warp's offers.
template <typename Op>
float XorTreeAt(const float* offers, unsigned lane, unsigned o, unsigned first, const Op& op) {
  if (o > first) return offers[lane];
  return op(XorTreeAt(offers, lane, 2 * o, first, op), XorTreeAt(offers, lane ^ o, 2 * o, first, op));
}
// What `for (o = first; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(full, v, o))` gives each
// lane (first a power of two, at most 16): the same operations on the same operands, so the
// same bits, from one exchange and one barrier rather than one of each per level.
template <typename Op>
float XorTree(float v, unsigned first, const Op& op) {
  return XorTreeAt(ExchangeAll(v), Self().linear % 32, 1, first, op);
}

// Runs call(ctx) as every thread of a (grid.x, grid.y) grid of (block.x, block.y) blocks.
void LaunchRaw(Dim3 grid, Dim3 block, size_t shared_bytes, void (*call)(void*), void* ctx);

template <typename Kernel>
void Launch(Dim3 grid, Dim3 block, size_t shared_bytes, Kernel kernel) {
  LaunchRaw(grid, block, shared_bytes, [](void* k) { (*static_cast<Kernel*>(k))(); }, &kernel);
}

// kernel(args...) launched as the real runtime would: GANTRY_LAUNCH (kernels/cuda/runtime.h)
// expands to Launcher(grid, block, shared, stream).Bind(kernel)(args...).
template <typename F>
struct BoundKernel {
  F* kernel;
  Dim3 grid, block;
  size_t shared;
  template <typename... Args>
  void operator()(Args... args) const {
    Launch(grid, block, shared, [&] { kernel(args...); });
  }
};
struct Launcher {
  Launcher(Dim3 g, Dim3 b, size_t s = 0, const void* /*stream: launches run at once*/ = nullptr)
      : grid(g), block(b), shared(s) {}
  template <typename F>
  BoundKernel<F> Bind(F* kernel) const {
    return {kernel, grid, block, shared};
  }
  Dim3 grid, block;
  size_t shared;
};

}  // namespace gantry::emu
