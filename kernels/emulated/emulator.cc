#include "kernels/emulated/emulator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>

#include "kernels/emulated/usage.h"

#if defined(__SANITIZE_ADDRESS__)
#define GANTRY_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GANTRY_EMU_ASAN 1
#endif
#endif
#ifdef GANTRY_EMU_ASAN
#include <sanitizer/asan_interface.h>
#endif
#if defined(__SANITIZE_THREAD__)
#define GANTRY_EMU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GANTRY_EMU_TSAN 1
#endif
#endif
#ifdef GANTRY_EMU_TSAN
#include <sanitizer/tsan_interface.h>
// Under TSan each fiber has its own TSan context (its clocks and shadow call stack), switched
// to just before its stack is (__tsan_switch_to_fiber, which also orders the two fibers: a
// block's threads are one OS thread taking turns). A fiber never returns from its last
// frames: the functions it leaves behind for good (FiberEntry, SwitchAway) are not
// instrumented, so its shadow stack is empty again when the next block reuses it.
#define GANTRY_EMU_UNTRACKED __attribute__((no_sanitize("thread")))
#else
#define GANTRY_EMU_UNTRACKED
#endif

namespace gantry::emu {

#if !defined(__x86_64__)
#error "the CUDA emulator's fibers switch stacks in x86-64 assembly"
#endif

// Saves the callee-saved registers on the current stack, stores the stack pointer in *save,
// loads `load` and restores what is saved there. MXCSR and the x87 control word are not
// switched: every fiber runs with the launching thread's (device code changes neither), and
// reloading them costs more than the rest of the switch.
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
  movq %rsp, (%rdi)
  movq %rsi, %rsp
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

constexpr size_t kStackBytes = 64 << 10;  // per thread; kernels keep small arrays in "registers"
constexpr uint64_t kCanary = 0x6761'6e74'7279'5f5fULL;  // at each stack's lowest word

// A barrier of a block or a warp: the threads that wait at it, released together when the
// last one arrives (or when the last one still expected exits).
struct Barrier {
  int expected = 0, arrived = 0;
  std::vector<uint32_t> waiting;
};

// The thread stacks, kStackBytes each, packed in one region of kMaxThreads stacks mapped once
// and reused by every launch: packed on huge pages, a block's 1024 stacks cost a few TLB
// entries rather than one each (which dominated the switch). Only the stacks that blocks have
// used are touched (a block of 128 threads commits 128 stacks' pages). A canary at each used
// stack's bottom, checked after every block, catches an overflow (there are no guard pages
// between them). When the OS thread that held a region ends, the region goes to a pool for the
// next thread that launches, rather than back to the kernel: a process that starts threads
// again and again (every rank of every test run) would otherwise fault in and zero the pages
// anew each time (2 MB huge pages: 7% of an emulated training run, measured).
//
// Under ASan: a fiber's frames are left poisoned (their redzones) when it switches away for
// good, as a thread's that exits by unwinding would not be. The region is unpoisoned when its
// thread ends, or the next fibers on it (or the next mapping at those addresses, a token
// file's, seen) would read as a stack redzone to ASan.
constexpr size_t kMaxThreads = 1024;  // a block's threads, at most (CUDA's limit)

class Stacks {
 public:
  ~Stacks() {
    if (base_ == nullptr) return;
#ifdef GANTRY_EMU_ASAN
    ASAN_UNPOISON_MEMORY_REGION(base_, kMaxThreads * kStackBytes);
#endif
    Pool& pool = ThePool();
    std::lock_guard<std::mutex> lock(pool.mu);
    pool.free.push_back({base_, used_});
  }
  void Reserve(size_t n) {
    if (n > kMaxThreads) {
      std::fprintf(stderr, "CUDA emulator: a block of %zu threads (at most %zu)\n", n, kMaxThreads);
      std::abort();
    }
    if (base_ == nullptr) Take();
    for (; used_ < n; ++used_) *Bottom(used_) = kCanary;
  }
  // The top (highest address) of stack i, staggered by a few cache lines per stack: stacks a
  // power of two apart would put every fiber's saved registers in the same cache sets.
  char* Top(size_t i) { return base_ + (i + 1) * kStackBytes - (i % 61) * 64; }
  void CheckCanaries(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (*Bottom(i) != kCanary) {
        std::fprintf(stderr, "CUDA emulator: thread %zu overflowed its %zu KiB stack\n", i, kStackBytes >> 10);
        std::abort();
      }
    }
  }

 private:
  struct Region {
    char* base;
    size_t used;
  };
  struct Pool {
    std::mutex mu;
    std::vector<Region> free;
  };
  static Pool& ThePool() {
    static Pool* pool = new Pool;  // never destroyed: threads may end after main returns
    return *pool;
  }
  void Take() {
    {
      Pool& pool = ThePool();
      std::lock_guard<std::mutex> lock(pool.mu);
      if (!pool.free.empty()) {
        base_ = pool.free.back().base;
        used_ = pool.free.back().used;
        pool.free.pop_back();
        return;
      }
    }
    const size_t bytes = kMaxThreads * kStackBytes;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "CUDA emulator: cannot map %zu thread stacks\n", kMaxThreads);
      std::abort();
    }
    madvise(p, bytes, MADV_HUGEPAGE);  // advisory
    base_ = static_cast<char*>(p);
    used_ = 0;
  }
  uint64_t* Bottom(size_t i) { return reinterpret_cast<uint64_t*>(base_ + i * kStackBytes); }
  char* base_ = nullptr;
  size_t used_ = 0;  // stacks with their canary written
};

}  // namespace

struct Block {
  Barrier block_barrier;
  std::vector<Barrier> warp_barriers;
  // A warp's exchange slots, 64 a warp: two sets of 32 that its exchanges take in turn. A lane
  // writes set k % 2 in its exchange k and reads it after the warp's barrier; it can write
  // that set again (exchange k + 2) only after every lane has arrived at exchange k + 1's
  // barrier, so after every lane has read exchange k. One barrier an exchange, not two.
  std::vector<float> slots;
  std::vector<float> shared;
};

namespace {

struct Fiber {
  void* sp = nullptr;
  Thread thread;
  bool done = false;
  unsigned exchanges = 0;  // this block's, so far: its next exchange's set of slots
  void* tsan = nullptr;  // its TSan context (GANTRY_EMU_TSAN), made once per slot
};

// Tells TSan that the OS thread now runs `to` (a fiber's context, or the launching thread's).
// Untracked itself: entered on one context and left on the other, its own frame would be
// pushed on the first's shadow stack and popped from the second's.
GANTRY_EMU_UNTRACKED inline void TsanSwitchTo(void* to) {
#ifdef GANTRY_EMU_TSAN
  __tsan_switch_to_fiber(to, 0);
#else
  (void)to;
#endif
}

// One launch's scheduler on this OS thread. Fibers switch to each other directly: a thread
// that waits hands the CPU to the next ready one (a FIFO), and only when none is ready does
// control go back to the launch loop (the block is done, or it deadlocks).
struct Scheduler {
  ~Scheduler() {
#ifdef GANTRY_EMU_TSAN
    for (Fiber& f : fibers) {
      if (f.tsan != nullptr) __tsan_destroy_fiber(f.tsan);
    }
#endif
  }
  void* main_sp = nullptr;
  void* main_tsan = nullptr;  // the launching thread's TSan context
  std::vector<Fiber> fibers;
  uint32_t current = 0;
  std::vector<uint32_t> ready;  // FIFO from `head`
  size_t head = 0;
  uint32_t done = 0;
  void (*call)(void*) = nullptr;
  void* ctx = nullptr;
  Block* block = nullptr;
  Stacks stacks;

  void Push(uint32_t t) { ready.push_back(t); }
  bool Pop(uint32_t* t) {
    if (head == ready.size()) {
      ready.clear();
      head = 0;
      return false;
    }
    *t = ready[head++];
    return true;
  }
  // Leaves the current fiber (saving it in *save) for the next ready one, or the launch loop.
  GANTRY_EMU_UNTRACKED void SwitchAway(void** save) {
    uint32_t next;
    if (Pop(&next)) {
      current = next;
      gantry_emu_self = &fibers[next].thread;
      TsanSwitchTo(fibers[next].tsan);
      gantry_emu_switch(save, fibers[next].sp);
    } else {
      TsanSwitchTo(main_tsan);
      gantry_emu_switch(save, main_sp);
    }
  }
  // The current thread arrives at b (or, with drop, leaves it for good). The last arrival
  // releases the waiters (ready again) and goes on.
  void Arrive(Barrier& b, bool drop) {
    if (drop) {
      --b.expected;
    } else {
      ++b.arrived;
    }
    if (b.arrived > 0 && b.arrived >= b.expected) {
      for (uint32_t t : b.waiting) Push(t);
      b.waiting.clear();
      b.arrived = 0;
      return;
    }
    if (drop) return;
    b.waiting.push_back(current);
    SwitchAway(&fibers[current].sp);
  }
};

thread_local Scheduler* tls_scheduler = nullptr;

Scheduler& Sched() {
  if (tls_scheduler == nullptr) {
    std::fprintf(stderr, "CUDA emulator: device code called outside a launch\n");
    std::abort();
  }
  return *tls_scheduler;
}

Barrier& WarpBarrier(Scheduler& s) { return s.block->warp_barriers[s.fibers[s.current].thread.linear / 32]; }

[[noreturn]] GANTRY_EMU_UNTRACKED void FiberEntry() {
  Scheduler& s = Sched();
  s.call(s.ctx);
  // Exited: the thread drops out of its block's and its warp's barriers.
  s.fibers[s.current].done = true;
  ++s.done;
  s.Arrive(s.block->block_barrier, /*drop=*/true);
  s.Arrive(WarpBarrier(s), /*drop=*/true);
  void* unused = nullptr;
  s.SwitchAway(&unused);
  std::abort();  // never resumed
}

// A fresh fiber's stack: what gantry_emu_switch pops (six registers), then FiberEntry as the
// return address, placed so that FiberEntry starts with the stack aligned as after a call.
void* InitialStack(char* top) {
  auto* p = reinterpret_cast<uint64_t*>(reinterpret_cast<uintptr_t>(top) & ~uintptr_t{15});
  *--p = 0;                                             // alignment pad: FiberEntry never returns
  *--p = reinterpret_cast<uint64_t>(&FiberEntry);       // return address, at a 16-byte boundary
  for (int r = 0; r < 6; ++r) *--p = 0;                 // rbp rbx r12 r13 r14 r15
  return p;
}

}  // namespace

__thread const Thread* gantry_emu_self = nullptr;

float* DynamicShared() { return Sched().block->shared.data(); }

void SyncThreads() {
  Scheduler& s = Sched();
  s.Arrive(s.block->block_barrier, false);
}

void SyncWarp() {
  Scheduler& s = Sched();
  s.Arrive(WarpBarrier(s), false);
}

const float* ExchangeAll(float v) {
  Scheduler& s = Sched();
  Fiber& f = s.fibers[s.current];
  const unsigned linear = f.thread.linear;
  float* slots = s.block->slots.data() + (linear / 32) * 64 + (f.exchanges++ % 2) * 32;
  slots[linear % 32] = v;
  s.Arrive(WarpBarrier(s), false);
  return slots;
}

float Exchange(float v, unsigned src) { return ExchangeAll(v)[src % 32]; }

void LaunchRaw(Dim3 grid, Dim3 block_dim, size_t shared_bytes, void (*call)(void*), void* ctx) {
  if (grid.z != 1 || block_dim.z != 1) {
    std::fprintf(stderr, "CUDA emulator: gridDim.z and blockDim.z must be 1\n");
    std::abort();
  }
  if (tls_scheduler != nullptr) {
    std::fprintf(stderr, "CUDA emulator: a launch from device code\n");
    std::abort();
  }
  const BusyScope busy;  // the calling thread's device runs a kernel until the launch returns
  thread_local std::unique_ptr<Scheduler> owned;
  if (!owned) owned = std::make_unique<Scheduler>();
  Scheduler& s = *owned;
  tls_scheduler = &s;
  s.call = call;
  s.ctx = ctx;
  const unsigned threads = block_dim.x * block_dim.y;
  const unsigned warps = (threads + 31) / 32;
  Block block;
  block.slots.assign(static_cast<size_t>(warps) * 64, 0.f);
  block.shared.assign((shared_bytes + sizeof(float) - 1) / sizeof(float), 0.f);
  block.warp_barriers.resize(warps);
  s.block = &block;
  if (s.fibers.size() < threads) s.fibers.resize(threads);  // never shrunk: a slot keeps its TSan context
#ifdef GANTRY_EMU_TSAN
  s.main_tsan = __tsan_get_current_fiber();
  for (Fiber& f : s.fibers) {
    if (f.tsan == nullptr) f.tsan = __tsan_create_fiber(0);
  }
#endif
  s.stacks.Reserve(threads);
  s.ready.reserve(threads);
  for (unsigned by = 0; by < grid.y; ++by) {
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      block.block_barrier.expected = static_cast<int>(threads);
      block.block_barrier.arrived = 0;
      block.block_barrier.waiting.clear();
      for (unsigned w = 0; w < warps; ++w) {
        Barrier& b = block.warp_barriers[w];
        b.expected = static_cast<int>(std::min(32u, threads - w * 32));
        b.arrived = 0;
        b.waiting.clear();
      }
      s.ready.clear();
      s.head = 0;
      s.done = 0;
      for (unsigned t = 0; t < threads; ++t) {
        Fiber& f = s.fibers[t];
        f.thread = Thread{Dim3(t % block_dim.x, t / block_dim.x, 1), Dim3(bx, by, 1), block_dim, grid, &block, t};
        f.done = false;
        f.exchanges = 0;
        f.sp = InitialStack(s.stacks.Top(t));
        s.Push(t);
      }
      uint32_t first = 0;
      s.Pop(&first);
      s.current = first;
      gantry_emu_self = &s.fibers[first].thread;
      TsanSwitchTo(s.fibers[first].tsan);
      gantry_emu_switch(&s.main_sp, s.fibers[first].sp);  // back once no thread is ready
      if (s.done != threads) {
        std::string waiting;
        for (unsigned t = 0; t < threads && waiting.size() < 200; ++t) {
          if (!s.fibers[t].done) waiting.append(" ").append(std::to_string(t));
        }
        std::fprintf(stderr,
                     "CUDA emulator: block (%u, %u) deadlocks: threads wait at a barrier that the others never "
                     "reach (a barrier in divergent code): waiting:%s\n",
                     bx, by, waiting.c_str());
        std::abort();
      }
      s.stacks.CheckCanaries(threads);
    }
  }
  gantry_emu_self = nullptr;
  tls_scheduler = nullptr;
}

}  // namespace gantry::emu
