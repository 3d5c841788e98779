// The communication thread's side of ZeRO's collectives: where its buffers come from (a pool
// both threads share), the element-wise work around a collective (staging, the mean's scale,
// bf16 rounding and widening, accumulation), and the reductions of a bucket's gradients that
// ZeroEngine queues on that thread as backward finishes them.
//
// On a backend the host can address (cpu), the element-wise work is plain loops on the
// thread (no OpenMP team of their own: a second team would fight the training thread's
// pinned one for the cores). On one it cannot (cuda, cuda-emulated), it is queued on a peer
// backend of the same device with its own stream, which Sync waits for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "kernels/backend.h"

namespace gantry::train {

// Working buffers reused across steps (taken and given from both threads), in the model's
// backend's memory: the model reads gathered parameters and writes gradients there.
// Thread-safe.
class BufferPool {
 public:
  // n floats, allocated by `on` (the backend of the thread that takes them) when no free
  // buffer fits. The smallest free buffer that fits is taken if it is not much larger, so the
  // pool holds one buffer of each size per concurrent use (the planner counts them:
  // jobspec/planner.cc, WorkingBytes).
  float* Take(size_t n, kernels::Backend* on);
  void Give(float* p);
  // Frees the buffers not in use.
  void ReleaseFree();
  size_t allocated_bytes() const;

 private:
  struct Slot {
    kernels::DeviceBuffer buf;
    bool used = false;
  };
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

// A bucket's reduction over the data-parallel group, stated once by the engine
// (ZeroEngine::LaunchBucket) and run on the communication thread by CommWork::Reduce: which
// of the three reductions below its ZeRO stage asks for, and what that one reads.
struct BucketReduction {
  enum class Kind {
    kAllReduceMean,            // stage 0: grads[begin, end) all-reduced in place
    kReduceScatterMean,        // stage 1: grads[begin, end) reduce-scattered into grads[pb, pe)
    kReduceScatterAccumulate,  // stages 2 and 3: work reduce-scattered into shard
  };
  Kind kind = Kind::kAllReduceMean;
  // The group: null the communication thread's (the DP group), else an expert range's.
  comm::Communicator* group = nullptr;
  float* grads = nullptr;     // stages 0 and 1: the model's flat gradients
  size_t begin = 0, end = 0;  // the bucket's flat range
  size_t piece = 0;           // elements per rank
  size_t pb = 0, pe = 0;      // stage 1: this rank's piece of it (short or empty at the end)
  float* work = nullptr;      // stages 2 and 3: the micro-batch's bucket gradients (the pool's)
  float* shard = nullptr;     // stages 2 and 3: this rank's piece of the gradient shard
  bool first = false;         // stages 2 and 3: the step's first micro-batch
  float inv = 1.f;            // the mean's scale, 1/dp
  bool bf16 = false;          // summed in bf16
};

class CommWork {
 public:
  // For a model on `model_backend` (not owned; it outlives this): a peer backend for the
  // thread where the host cannot address the model's memory.
  static absl::StatusOr<std::unique_ptr<CommWork>> Create(kernels::Backend* model_backend);
  ~CommWork();

  // Whether the work runs on a peer backend (the model's memory is a device's).
  bool on_peer() const { return peer_ != nullptr; }
  // The backend the thread allocates with: the peer, or the model's.
  kernels::Backend* backend() { return peer_ ? peer_.get() : model_backend_; }
  BufferPool& pool() { return pool_; }
  // The first operation queued on the thread: it drives the peer from then on.
  absl::Status BindThread() { return peer_ ? peer_->BindThread() : absl::OkStatus(); }

  // Element-wise work on the model's memory, on the thread.
  void Scale(float* p, size_t n, float s);
  void Add(float* dst, const float* src, size_t n);
  void Copy(float* dst, const float* src, size_t n);
  void Zero(float* p, size_t n);
  // bf16 reduction: src (n) rounded to bf16 into dst (padded), dst[n, padded) zeroed; and
  // bf16 src (n) widened into dst (n).
  void ToBf16(uint16_t* dst, const float* src, size_t n, size_t padded);
  void FromBf16(float* dst, const uint16_t* src, size_t n);
  // A staging buffer of n bf16 values from the pool.
  uint16_t* TakeBf16(size_t n);
  void GiveBf16(uint16_t* p);
  // Waits for the queued work (on the peer; nothing on the host).
  absl::Status Sync();

  // r over its group, or over dp (the communication thread's group) where r names none.
  absl::Status Reduce(comm::Communicator& dp, const BucketReduction& r);

  // The reductions of a bucket's gradients over the group c, each ending with the mean's
  // scale `inv` (1/dp) and, with bf16, summing bf16 values (the fp32 gradients rounded into a
  // staging buffer, widened back after the collective). A group of one only scales.
  // Stage 0: g (n) all-reduced in place.
  absl::Status AllReduceMean(comm::Communicator& c, float* g, size_t n, float inv, bool bf16);
  // Stage 1: the bucket grads[begin, end), padded to c.size() pieces of `piece`,
  // reduce-scattered; this rank's piece grads[pb, pe) (short when it is the last) gets the mean.
  absl::Status ReduceScatterMean(comm::Communicator& c, float* grads, size_t begin, size_t end, size_t piece,
                                 size_t pb, size_t pe, float inv, bool bf16);
  // Stages 2 and 3: a micro-batch's bucket gradients in `work` (the pool's; c.size() pieces,
  // zeros past the bucket) reduce-scattered; this rank's piece's mean written into shard
  // (first micro-batch) or added to it. work goes back to the pool.
  absl::Status ReduceScatterAccumulate(comm::Communicator& c, float* work, float* shard, size_t piece, bool first,
                                       float inv, bool bf16);

 private:
  explicit CommWork(kernels::Backend* model_backend) : model_backend_(model_backend) {}

  kernels::Backend* model_backend_;
  std::unique_ptr<kernels::Backend> peer_;  // declared before pool_: its buffers go first
  BufferPool pool_;
};

}  // namespace gantry::train
