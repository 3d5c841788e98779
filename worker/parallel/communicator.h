// Collectives over a process group, the same interface on CPU (Gloo over TCP) and GPU
// (NCCL, on device buffers). Every collective gets the next sequence number and runs under the
// group's timeout: a failure or a hang becomes an error naming the collective, its
// sequence number and this rank, never a hang.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace gantry::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sequence number of the last collective started (1 for the first).
  virtual uint64_t seq() const = 0;
  // Sequence number of the last collective that completed. Thread-safe (the worker's
  // heartbeats read it while the collectives run).
  virtual uint64_t completed() const = 0;

  // data (n) ← sum over ranks of data (n)
  virtual absl::Status AllReduceSum(float* data, size_t n) = 0;
  // in (size·n) → out (n) = sum over ranks of in[rank·n, (rank+1)·n)
  virtual absl::Status ReduceScatterSum(const float* in, float* out, size_t n) = 0;
  // in (n) → out (size·n): rank r's in at out[r·n, (r+1)·n)
  virtual absl::Status AllGather(const float* in, float* out, size_t n) = 0;
  // The same sums over bf16 values (uint16_t bits, kernels/cast.h), for gradients reduced in
  // 2 bytes (train.grad_reduce_dtype bf16). Each addition takes two bf16 values, adds them in
  // fp32 and rounds the sum to the nearest bf16, ties to even (as NCCL's ncclBfloat16 sum
  // does); the order of the additions is the transport's, and AllReduceSumBf16 leaves every
  // rank with the same bits. ReduceScatterSumBf16 may run in place: out == in + rank·n.
  virtual absl::Status AllReduceSumBf16(uint16_t* data, size_t n) = 0;
  virtual absl::Status ReduceScatterSumBf16(const uint16_t* in, uint16_t* out, size_t n) = 0;
  // data (n) ← root's data (n)
  virtual absl::Status Broadcast(float* data, size_t n, int root) = 0;
  virtual absl::Status Send(const float* data, size_t n, int peer) = 0;
  virtual absl::Status Recv(float* data, size_t n, int peer) = 0;
  virtual absl::Status Barrier() = 0;
  // The job's placement is over (the coordinator said so, or is gone): the collective in
  // flight, or the next, fails at once as ABORTED rather than waiting out its timeout or a
  // peer. Thread-safe: called from outside the thread that runs the collectives. Gloo and
  // NCCL abort their transport (NCCL: ncclCommAbort; a communicator is aborted after a
  // failure, never destroyed in a collective).
  virtual void Abort() = 0;
};

}  // namespace gantry::parallel
