// Just enough of CUDA's execution model to run device code on the CPU, for testing kernel
// logic where there is no GPU: every thread of a block is a std::thread; __syncthreads is a
// barrier over the block; a warp shuffle is a barrier over the warp's 32 lanes around an
// exchange slot; the block's dynamic shared memory is one buffer. Blocks run one after the
// other, so a function's `__shared__` array (a static here) is the running block's. A thread
// that returns drops out of its barriers, as an exited CUDA thread stops counting. A shuffle
// or __syncthreads that only some threads reach deadlocks here (the test times out) where a
// GPU would be undefined: the emulation checks that too.
//
// Not emulated: memory ordering beyond the barriers, timing, occupancy, shared-memory
// limits (launchers check those). Include this before the device code.
#pragma once

#include <barrier>
#include <cmath>
#include <cstddef>
#include <memory>
#include <thread>
#include <vector>

namespace gantry::emu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct Warp {
  std::barrier<> bar{32};
  float slot[32] = {};
};

struct Block {
  explicit Block(int threads, size_t shared_bytes)
      : bar(threads), shared((shared_bytes + sizeof(float) - 1) / sizeof(float)) {
    for (int w = 0; w < (threads + 31) / 32; ++w) warps.push_back(std::make_unique<Warp>());
  }
  std::barrier<> bar;
  std::vector<float> shared;
  std::vector<std::unique_ptr<Warp>> warps;
};

struct Thread {
  Dim3 tid, bid, bdim, gdim;
  Block* block = nullptr;
  unsigned linear() const { return tid.x + tid.y * bdim.x; }  // warps are runs of 32 of these
  Warp& warp() const { return *block->warps[linear() / 32]; }
  unsigned lane() const { return linear() % 32; }
};
inline thread_local Thread self;

// Runs kernel() as a grid of (grid.x, grid.y) blocks of (block.x, block.y) threads (a
// multiple of 32 in all).
template <typename Kernel>
void Launch(Dim3 grid, Dim3 block_dim, size_t shared_bytes, Kernel kernel) {
  const int threads = static_cast<int>(block_dim.x * block_dim.y);
  for (unsigned by = 0; by < grid.y; ++by) {
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      Block block(threads, shared_bytes);
      std::vector<std::thread> ts;
      ts.reserve(static_cast<size_t>(threads));
      for (int t = 0; t < threads; ++t) {
        ts.emplace_back([&, t] {
          const Dim3 tid{static_cast<unsigned>(t) % block_dim.x, static_cast<unsigned>(t) / block_dim.x, 1};
          self = Thread{tid, {bx, by, 1}, block_dim, grid, &block};
          kernel();
          self.warp().bar.arrive_and_drop();
          block.bar.arrive_and_drop();
        });
      }
      for (auto& t : ts) t.join();
    }
  }
}

inline float Exchange(float v, unsigned src) {
  Warp& w = self.warp();
  w.slot[self.lane()] = v;
  w.bar.arrive_and_wait();
  const float r = w.slot[src % 32];
  w.bar.arrive_and_wait();  // every lane has read before the next exchange writes
  return r;
}

template <typename Kernel>
void Launch(Dim3 grid, int threads, size_t shared_bytes, Kernel kernel) {
  Launch(grid, Dim3{static_cast<unsigned>(threads), 1, 1}, shared_bytes, kernel);
}

}  // namespace gantry::emu

struct float2 {
  float x, y;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

#define __global__
#define __device__
#define __shared__ static
#define threadIdx (::gantry::emu::self.tid)
#define blockIdx (::gantry::emu::self.bid)
#define blockDim (::gantry::emu::self.bdim)
#define gridDim (::gantry::emu::self.gdim)
#define GANTRY_DYNAMIC_SHARED(name) float* name = ::gantry::emu::self.block->shared.data()

inline void __syncthreads() { ::gantry::emu::self.block->bar.arrive_and_wait(); }
inline void __syncwarp() { ::gantry::emu::self.warp().bar.arrive_and_wait(); }
inline float __shfl_sync(unsigned, float v, int src) { return ::gantry::emu::Exchange(v, static_cast<unsigned>(src)); }
inline float __shfl_xor_sync(unsigned, float v, int mask) {
  return ::gantry::emu::Exchange(v, ::gantry::emu::self.lane() ^ static_cast<unsigned>(mask));
}
using std::min;
