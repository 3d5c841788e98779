#include "kernels/emulated/emulator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <memory>
#include <string>

namespace gantry::emu {

#if !defined(__x86_64__)
#error "the CUDA emulator's fibers switch stacks in x86-64 assembly"
#endif

// Saves the callee-saved registers, MXCSR and the x87 control word on the current stack,
// stores the stack pointer in *save, loads `load` and restores what is saved there.
extern "C" void gantry_emu_switch(void** save, void* load);
asm(R"(
  .text
  .globl gantry_emu_switch
  .type gantry_emu_switch, @function
gantry_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw 12(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr 8(%rsp)
  fldcw 12(%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size gantry_emu_switch, .-gantry_emu_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");

namespace {

constexpr size_t kStackBytes = 256 << 10;  // per thread; kernels keep small arrays in "registers"

struct Barrier {
  int expected = 0, arrived = 0;
  uint64_t generation = 0;
  // One more thread arrived (or, with drop, left for good). True when that released it.
  bool Arrive(bool drop) {
    if (drop) {
      --expected;
    } else {
      ++arrived;
    }
    if (arrived > 0 && arrived >= expected) {
      arrived = 0;
      ++generation;
      return true;
    }
    return false;
  }
};

struct Fiber {
  void* sp = nullptr;
  Thread thread;
  bool done = false;
  const Barrier* waiting = nullptr;  // and the generation it waits to pass
  uint64_t wait_generation = 0;
};

// A stack per thread slot, mapped once per OS thread and reused by every block.
class Stacks {
 public:
  ~Stacks() {
    for (void* s : stacks_) munmap(s, kStackBytes + page_);
  }
  // The top (highest address) of stack i.
  char* Top(size_t i) {
    while (stacks_.size() <= i) {
      void* s = mmap(nullptr, kStackBytes + page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
      if (s == MAP_FAILED) {
        std::fprintf(stderr, "CUDA emulator: cannot map a thread stack\n");
        std::abort();
      }
      mprotect(s, page_, PROT_NONE);  // a guard page below: an overflow faults
      stacks_.push_back(s);
    }
    return static_cast<char*>(stacks_[i]) + page_ + kStackBytes;
  }

 private:
  const size_t page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<void*> stacks_;
};

}  // namespace

struct Block {
  Barrier block_barrier;
  std::vector<Barrier> warp_barriers;
  std::vector<float> slots;  // 32 a warp
  std::vector<float> shared;
};

namespace {

struct Scheduler {
  void* main_sp = nullptr;
  std::vector<Fiber> fibers;
  size_t current = 0;
  void (*call)(void*) = nullptr;
  void* ctx = nullptr;
  Block* block = nullptr;
  Stacks stacks;
};

thread_local Scheduler* tls_scheduler = nullptr;
thread_local Thread tls_self;

Scheduler& Sched() {
  if (tls_scheduler == nullptr) {
    std::fprintf(stderr, "CUDA emulator: device code called outside a launch\n");
    std::abort();
  }
  return *tls_scheduler;
}

void Yield(Scheduler& s) { gantry_emu_switch(&s.fibers[s.current].sp, s.main_sp); }

void Wait(Barrier& b, bool released) {
  if (released) return;  // the last to arrive goes on
  Scheduler& s = Sched();
  Fiber& f = s.fibers[s.current];
  f.waiting = &b;
  f.wait_generation = b.generation;
  Yield(s);
  f.waiting = nullptr;
}

Barrier& WarpBarrier(Scheduler& s) { return s.block->warp_barriers[s.fibers[s.current].thread.linear / 32]; }

[[noreturn]] void FiberEntry() {
  Scheduler& s = Sched();
  s.call(s.ctx);
  // Exited: the thread drops out of its block's and its warp's barriers.
  Fiber& f = s.fibers[s.current];
  s.block->block_barrier.Arrive(/*drop=*/true);
  WarpBarrier(s).Arrive(/*drop=*/true);
  f.done = true;
  void* unused = nullptr;
  gantry_emu_switch(&unused, s.main_sp);
  std::abort();  // never resumed
}

// A fresh fiber's stack: what gantry_emu_switch pops (MXCSR and control word, six
// registers), then FiberEntry as the return address, placed so that FiberEntry starts with
// the stack aligned as after a call.
void* InitialStack(char* top) {
  auto* p = reinterpret_cast<uint64_t*>(reinterpret_cast<uintptr_t>(top) & ~uintptr_t{15});
  *--p = 0;                                             // alignment pad: FiberEntry never returns
  *--p = reinterpret_cast<uint64_t>(&FiberEntry);       // return address, at a 16-byte boundary
  for (int r = 0; r < 6; ++r) *--p = 0;                 // rbp rbx r12 r13 r14 r15
  p -= 2;
  uint32_t mxcsr = 0;
  uint16_t fpucw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  auto* save = reinterpret_cast<char*>(p);
  std::memcpy(save + 8, &mxcsr, 4);
  std::memcpy(save + 12, &fpucw, 2);
  return p;
}

}  // namespace

Thread& Self() { return tls_self; }
float* DynamicShared() { return Sched().block->shared.data(); }

void SyncThreads() {
  Scheduler& s = Sched();
  Barrier& b = s.block->block_barrier;
  Wait(b, b.Arrive(false));
}

void SyncWarp() {
  Scheduler& s = Sched();
  Barrier& b = WarpBarrier(s);
  Wait(b, b.Arrive(false));
}

float Exchange(float v, unsigned src) {
  Scheduler& s = Sched();
  const unsigned linear = s.fibers[s.current].thread.linear;
  float* slots = s.block->slots.data() + (linear / 32) * 32;
  slots[linear % 32] = v;
  SyncWarp();
  const float r = slots[src % 32];
  SyncWarp();  // every lane has read before the next exchange writes
  return r;
}

void LaunchRaw(Dim3 grid, Dim3 block_dim, size_t shared_bytes, void (*call)(void*), void* ctx) {
  if (grid.z != 1 || block_dim.z != 1) {
    std::fprintf(stderr, "CUDA emulator: gridDim.z and blockDim.z must be 1\n");
    std::abort();
  }
  thread_local std::unique_ptr<Scheduler> owned;
  if (!owned) owned = std::make_unique<Scheduler>();
  Scheduler* outer = tls_scheduler;
  if (outer != nullptr) {
    std::fprintf(stderr, "CUDA emulator: a launch from device code\n");
    std::abort();
  }
  Scheduler& s = *owned;
  tls_scheduler = &s;
  s.call = call;
  s.ctx = ctx;
  const unsigned threads = block_dim.x * block_dim.y;
  const unsigned warps = (threads + 31) / 32;
  Block block;
  block.slots.assign(static_cast<size_t>(warps) * 32, 0.f);
  block.shared.assign((shared_bytes + sizeof(float) - 1) / sizeof(float), 0.f);
  block.warp_barriers.resize(warps);
  s.block = &block;
  s.fibers.resize(threads);
  for (unsigned by = 0; by < grid.y; ++by) {
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      block.block_barrier = Barrier{static_cast<int>(threads), 0, 0};
      for (unsigned w = 0; w < warps; ++w) {
        block.warp_barriers[w] = Barrier{static_cast<int>(std::min(32u, threads - w * 32)), 0, 0};
      }
      for (unsigned t = 0; t < threads; ++t) {
        Fiber& f = s.fibers[t];
        f.thread = Thread{Dim3(t % block_dim.x, t / block_dim.x, 1), Dim3(bx, by, 1), block_dim, grid, &block, t};
        f.done = false;
        f.waiting = nullptr;
        f.sp = InitialStack(s.stacks.Top(t));
      }
      unsigned left = threads;
      while (left > 0) {
        bool ran = false;
        for (unsigned t = 0; t < threads; ++t) {
          Fiber& f = s.fibers[t];
          if (f.done || (f.waiting != nullptr && f.waiting->generation == f.wait_generation)) continue;
          s.current = t;
          tls_self = f.thread;
          gantry_emu_switch(&s.main_sp, f.sp);
          ran = true;
          left -= f.done;
        }
        if (!ran) {
          std::string waiting;
          for (unsigned t = 0; t < threads && waiting.size() < 200; ++t) {
            if (!s.fibers[t].done) waiting += " " + std::to_string(t);
          }
          std::fprintf(stderr,
                       "CUDA emulator: block (%u, %u) deadlocks: threads wait at a barrier that the others never "
                       "reach (a barrier in divergent code): waiting:%s\n",
                       bx, by, waiting.c_str());
          std::abort();
        }
      }
    }
  }
  tls_scheduler = outer;
}

}  // namespace gantry::emu
