// The CUDA emulator itself (kernels/emulated/emulator.{h,cc}, device.h): its warp exchanges,
// the xor tree that stands for a loop of xor shuffles, the ballot, and its fiber stacks. The
// kernels' tests (flash_attention_emulated_test, backend_ops_test, ...) run device code on it;
// these check what those take for granted.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "kernels/emulated/device.h"
// (after the emulator)
#include "kernels/cuda/reduce.cuh"

#include "common/rng.h"

namespace gantry::cuda {
namespace {

unsigned Bits(float x) {
  unsigned u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

// What a loop of xor shuffles gives (each level one Exchange), against XorTree (one exchange
// for all levels), bit for bit, over sums of values of very different sizes (where the order of
// the additions shows in the bits) and maxima with NaNs (fmaxf takes the other operand), at
// both widths the kernels use (16: a warp; 8: flash attention's half-warp rows), over blocks of
// several warps; and against a host computation of the butterfly, level by level.
TEST(EmulatorTest, XorTreeGivesTheBitsOfTheShuffleLoop) {
  constexpr unsigned kThreads = 96, kBlocks = 3, n = kThreads * kBlocks;
  Rng r(7);
  std::vector<float> sum_in(n), max_in(n);
  for (size_t i = 0; i < n; ++i) {
    sum_in[i] = max_in[i] = static_cast<float>(r.Normal() * std::pow(10.0, static_cast<int>(i % 9) - 4));
    if (i % 37 == 5) max_in[i] = NAN;
  }
  for (int first : {16, 8}) {
    for (bool max : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "first " << first << (max ? " max" : " sum"));
      const std::vector<float>& in = max ? max_in : sum_in;
      std::vector<float> loop(n), tree(n);
      emu::Launch(emu::Dim3(kBlocks), emu::Dim3(kThreads), 0, [&] {
        const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
        float v = in[i];
        for (int o = first; o > 0; o >>= 1) {
          const float other = __shfl_xor_sync(0xffffffffu, v, o);
          v = max ? fmaxf(v, other) : v + other;
        }
        loop[i] = v;
        tree[i] = max ? XorTree(in[i], first, MaxOp{}) : XorTree(in[i], first, AddOp{});
      });
      // The host's butterfly: every lane's value after each level, from the level before.
      std::vector<float> host = in;
      for (int o = first; o > 0; o >>= 1) {
        std::vector<float> next(n);
        for (unsigned i = 0; i < n; ++i) {
          const float a = host[i], b = host[i ^ static_cast<unsigned>(o)];
          next[i] = max ? std::fmax(a, b) : a + b;
        }
        host = next;
      }
      int sums_that_differ_by_order = 0;
      for (unsigned i = 0; i < n; ++i) {
        ASSERT_EQ(Bits(tree[i]), Bits(loop[i])) << "thread " << i;
        ASSERT_EQ(Bits(tree[i]), Bits(host[i])) << "thread " << i;
        // The group's sum in lane order has other bits for some groups: the values show the
        // order of the additions, so the checks above would see a tree in another order.
        const unsigned group = i & ~(2u * first - 1);
        float in_order = 0.f;
        for (unsigned l = 0; l < 2u * first; ++l) in_order += in[group + l];
        if (!max && Bits(tree[i]) != Bits(in_order)) ++sums_that_differ_by_order;
      }
      if (!max) {
        EXPECT_GT(sums_that_differ_by_order, 0);
      }
    }
  }
}

// Exchanges in a row, each lane taking another lane's offer: every exchange returns the offers
// of its own round (the two sets of slots taken in turn; with one set and one barrier a lane
// would read a faster lane's next offer). And ballots between them.
TEST(EmulatorTest, ExchangesInARowEachTakeTheirOwnRoundsOffers) {
  constexpr unsigned kThreads = 64, kRounds = 100;
  std::vector<int> wrong(kThreads, 0), wrong_ballots(kThreads, 0);
  emu::Launch(emu::Dim3(2), emu::Dim3(kThreads), 0, [&] {
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (unsigned k = 0; k < kRounds; ++k) {
      const unsigned src = (lane * 5 + k) % 32;
      const float got = __shfl_sync(0xffffffffu, static_cast<float>(warp * 100000 + lane * 1000 + k), src);
      if (got != static_cast<float>(warp * 100000 + src * 1000 + k)) ++wrong[threadIdx.x];
      if (k % 7 == 0) {
        unsigned want = 0;
        for (unsigned l = 0; l < 32; ++l) want |= (l * 3 + k) % 4 == 0 ? 1u << l : 0u;
        if (__ballot_sync(0xffffffffu, (lane * 3 + k) % 4 == 0) != want) ++wrong_ballots[threadIdx.x];
      }
    }
  });
  for (unsigned t = 0; t < kThreads; ++t) {
    EXPECT_EQ(wrong[t], 0) << "thread " << t;
    EXPECT_EQ(wrong_ballots[t], 0) << "thread " << t;
  }
}

// Threads that launch and end one after the other take the stacks the ended ones left (a
// pool), with blocks of other sizes: every block still runs whole, its stacks' canaries intact
// (the launch checks them after each block and stops the process if one is overwritten).
TEST(EmulatorTest, ThreadsThatEndLeaveTheirStacksToTheNextOnes) {
  for (unsigned threads : {32u, 1024u, 64u, 1024u}) {
    std::vector<float> out(threads, 0.f);
    std::thread t([&] {
      emu::Launch(emu::Dim3(2), emu::Dim3(threads), 0, [&] {
        float deep[256];  // a frame of 1 KiB on the fiber's stack
        for (int i = 0; i < 256; ++i) deep[i] = static_cast<float>(threadIdx.x + i);
        __syncthreads();
        if (blockIdx.x == 1) out[threadIdx.x] = WarpSum(deep[threadIdx.x % 256]);
      });
    });
    t.join();
    for (unsigned i = 0; i < threads; ++i) {
      float want = 0;
      for (unsigned l = 0; l < 32; ++l) want += static_cast<float>((i / 32 * 32 + l) + (i / 32 * 32 + l) % 256);
      ASSERT_EQ(out[i], want) << "block of " << threads << ", thread " << i;
    }
  }
}

// The emulator's fibers never return from their last frames: under ASan those frames' redzones
// stay poisoned, and when the OS thread ends its fiber stacks are unmapped. The next mapping
// at those addresses (a token file's, seen in ModelParallelTest under tests/sanitize.sh
// address) then read as a stack redzone. A thread that ran a launch ends, and mappings of its
// stacks' size are read whole. (This checks anything only in the ASan build.)
TEST(EmulatorTest, AnEndedThreadsFiberStacksLeaveNothingPoisonedBehind) {
  constexpr unsigned kThreads = 64;
  const size_t bytes = kThreads * (size_t{64} << 10);  // kStackBytes a thread
  for (int round = 0; round < 4; ++round) {
    std::thread t([] {
      emu::LaunchRaw(emu::Dim3(2, 1, 1), emu::Dim3(kThreads, 1, 1), 0, [](void*) { emu::SyncThreads(); }, nullptr);
    });
    t.join();
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    const volatile unsigned char* b = static_cast<const unsigned char*>(p);
    unsigned sum = 0;
    for (size_t i = 0; i < bytes; ++i) sum += b[i];
    EXPECT_EQ(sum, 0u);
    munmap(p, bytes);
  }
}

}  // namespace
}  // namespace gantry::cuda
