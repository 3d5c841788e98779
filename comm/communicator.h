// Collectives over a process group, the same interface on CPU (Gloo over TCP) and GPU
// (NCCL, on device buffers). Every collective gets the next sequence number and runs under the
// group's timeout: a failure or a hang becomes an error naming the collective, its
// sequence number and this rank, never a hang.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gantry::comm {

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
  // in (size·n) → out (size·n): chunk r of in, in[r·n, (r+1)·n), goes to rank r, and
  // out[r·n, (r+1)·n) receives rank r's chunk for this rank (expert parallelism's dispatch
  // and combine). out must not overlap in.
  virtual absl::Status AllToAll(const float* in, float* out, size_t n) = 0;
  // The same with a count per peer: in (Σ send_counts) → out (Σ recv_counts). send_counts[r]
  // elements go to rank r from offset Σ_{q<r} send_counts[q] of in; recv_counts[r] elements
  // come from rank r to offset Σ_{q<r} recv_counts[q] of out; zero counts are allowed. The
  // counts must agree pairwise (this rank's send_counts[r] is rank r's recv_counts[rank]):
  // that is the caller's to keep, and nothing checks it across ranks (with Gloo a mismatch
  // was seen to end the process, an exception in its transport's thread; NCCL may hang until
  // the timeout). What one rank can see alone (CheckAllToAllCounts) is INVALID_ARGUMENT
  // naming the count vector, before any sequence number is taken.
  virtual absl::Status AllToAllV(const float* in, const std::vector<size_t>& send_counts, float* out,
                                 const std::vector<size_t>& recv_counts) = 0;
  // data (n) ← root's data (n)
  virtual absl::Status Broadcast(float* data, size_t n, int root) = 0;
  virtual absl::Status Send(const float* data, size_t n, int peer) = 0;
  virtual absl::Status Recv(float* data, size_t n, int peer) = 0;
  // send (send_n) to rank `to` while recv (recv_n) arrives from rank `from`: one step of a ring
  // (to = rank + 1, from = rank - 1, modulo the size), where every rank sends and receives at
  // once (context parallelism's K/V exchange, model/context_parallel.h). The buffers must not
  // overlap; a count may be 0. Gloo and NCCL post both sides together, as one operation. This
  // default, for a communicator without its own, is Send then Recv on even ranks and Recv then
  // Send on odd ones (two sequence numbers), which cannot deadlock a ring's step.
  virtual absl::Status SendRecv(const float* send, size_t send_n, int to, float* recv, size_t recv_n, int from);
  virtual absl::Status Barrier() = 0;
  // The job's placement is over (the coordinator said so, or is gone): the collective in
  // flight, or the next, fails at once as ABORTED rather than waiting out its timeout or a
  // peer. Thread-safe: called from outside the thread that runs the collectives. Gloo and
  // NCCL abort their transport (NCCL: ncclCommAbort; a communicator is aborted after a
  // failure, never destroyed in a collective).
  virtual void Abort() = 0;
};

// AllToAllV's counts as one rank sees them: a count per rank of the group on each side, and
// as many elements kept (send_counts[rank]) as received from itself (recv_counts[rank]).
inline absl::Status CheckAllToAllCounts(int rank, int size, const std::vector<size_t>& send_counts,
                                        const std::vector<size_t>& recv_counts) {
  for (const auto& [name, counts] : {std::pair<const char*, const std::vector<size_t>*>{"send_counts", &send_counts},
                                     {"recv_counts", &recv_counts}}) {
    if (counts->size() != static_cast<size_t>(size)) {
      return absl::InvalidArgumentError(absl::StrCat("all_to_all_v on rank ", rank, ": ", name, " has ", counts->size(),
                                                     " entries, not one per rank of the group of ", size));
    }
  }
  if (send_counts[static_cast<size_t>(rank)] != recv_counts[static_cast<size_t>(rank)]) {
    return absl::InvalidArgumentError(absl::StrCat("all_to_all_v on rank ", rank, ": send_counts[", rank, "] = ",
                                                   send_counts[static_cast<size_t>(rank)], " but recv_counts[", rank,
                                                   "] = ", recv_counts[static_cast<size_t>(rank)],
                                                   " (what a rank sends itself is what it receives from itself)"));
  }
  return absl::OkStatus();
}

// SendRecv's peers as one rank sees them: ranks of the group other than itself. INVALID_ARGUMENT
// naming the peer otherwise, before any sequence number is taken.
inline absl::Status CheckSendRecvPeers(int rank, int size, int to, int from) {
  for (const auto& [name, peer] : {std::pair<const char*, int>{"to", to}, {"from", from}}) {
    if (peer < 0 || peer >= size || peer == rank) {
      return absl::InvalidArgumentError(absl::StrCat("send_recv on rank ", rank, " of ", size, ": ", name, " rank ",
                                                     peer, " is not another rank of the group"));
    }
  }
  return absl::OkStatus();
}

inline absl::Status Communicator::SendRecv(const float* send, size_t send_n, int to, float* recv, size_t recv_n,
                                           int from) {
  if (absl::Status s = CheckSendRecvPeers(rank(), size(), to, from); !s.ok()) return s;
  auto send_side = [&] { return Send(send, send_n, to); };
  auto recv_side = [&] { return Recv(recv, recv_n, from); };
  const bool even = rank() % 2 == 0;
  absl::Status first = even ? send_side() : recv_side();
  if (!first.ok()) return first;
  return even ? recv_side() : send_side();
}

}  // namespace gantry::comm
