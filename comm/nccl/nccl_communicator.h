// The GPU Communicator: NCCL on one CUDA device per rank. Buffers are device pointers (small
// host buffers, up to kMaxStagedFloats, are staged through device memory). The
// ranks meet through the same rendezvous store as Gloo's (the coordinator's, in a cluster):
// rank 0 puts the NCCL unique id there, the others read it. The communicator is created
// non-blocking, and every collective is enqueued on the communicator's stream and then
// waited for under the group's timeout, polling NCCL's asynchronous error: a failure or a
// hang aborts the communicator and becomes an error naming the collective, its sequence
// number and the ranks that did not arrive (see failure_report.h), never a hang.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/groups.h"

namespace gloo::rendezvous {
class Store;
}

namespace gantry::comm {

struct NcclOptions {
  int device = 0;  // CUDA device of this rank
  std::chrono::milliseconds timeout{30000};
  std::chrono::milliseconds failure_grace{0};  // 0 = DefaultFailureGrace(timeout)
};

class NcclCommunicator final : public Communicator {
 public:
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(int rank, int size,
                                                                   std::shared_ptr<gloo::rendezvous::Store> store,
                                                                   const NcclOptions& options);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  uint64_t seq() const override { return seq_; }
  uint64_t completed() const override { return completed_.load(); }
  absl::Status AllReduceSum(float* data, size_t n) override;
  absl::Status ReduceScatterSum(const float* in, float* out, size_t n) override;
  absl::Status AllGather(const float* in, float* out, size_t n) override;
  // One NCCL group of a send and a receive per peer, this rank included (zero counts skipped).
  absl::Status AllToAll(const float* in, float* out, size_t n) override;
  absl::Status AllToAllV(const float* in, const std::vector<size_t>& send_counts, float* out,
                         const std::vector<size_t>& recv_counts) override;
  absl::Status AllReduceSumBf16(uint16_t* data, size_t n) override;
  absl::Status ReduceScatterSumBf16(const uint16_t* in, uint16_t* out, size_t n) override;
  absl::Status Broadcast(float* data, size_t n, int root) override;
  absl::Status Send(const float* data, size_t n, int peer) override;
  absl::Status Recv(float* data, size_t n, int peer) override;
  // One NCCL group of the send and the receive.
  absl::Status SendRecv(const float* send, size_t send_n, int to, float* recv, size_t recv_n, int from) override;
  absl::Status Barrier() override;
  // The stream the collectives run on (device work that produces their inputs should be
  // ordered before it).
  void* stream() const { return stream_; }
  // The job's placement is over: the collective in flight (or the next) aborts the NCCL
  // communicator (ncclCommAbort) and fails as ABORTED at once, without the failure grace.
  // Thread-safe: the waiting loop notices it within microseconds.
  void Abort() override { aborted_ = true; }

 private:
  struct Impl;
  NcclCommunicator() = default;
  // Enqueues one collective (launch returns NCCL's result), then waits for it.
  template <typename F>
  absl::Status Run(const char* what, F&& launch);
  // Run, with host buffers (pageable memory: a loss, partial sums) staged through device
  // memory; launch(device in, device out). in_n, out_n: elements of T (float, bf16 bits).
  template <typename T, typename F>
  absl::Status RunStaged(const char* what, const T* in, size_t in_n, T* out, size_t out_n, F&& launch);
  static bool OnHost(const void* p);
  static constexpr size_t kMaxStagedFloats = size_t{1} << 16;  // the staging's size, in 4-byte words
  // AllToAll and AllToAllV: chunk r of in (send_counts[r] floats at their prefix sum) to rank
  // r, rank r's chunk for this rank into out (recv_counts[r] floats likewise).
  absl::Status SendRecvChunks(const char* what, const float* in, const std::vector<size_t>& send_counts, float* out,
                              const std::vector<size_t>& recv_counts);
  absl::Status WaitDone(const char* what, uint64_t seq);
  absl::Status Fail(const char* what, uint64_t seq, const std::string& why);

  int rank_ = 0, size_ = 1;
  uint64_t seq_ = 0;
  std::atomic<bool> aborted_{false};
  std::atomic<uint64_t> completed_{0};
  NcclOptions options_;
  std::shared_ptr<gloo::rendezvous::Store> store_;
  void* comm_ = nullptr;    // ncclComm_t
  void* stream_ = nullptr;  // cudaStream_t
  void* done_ = nullptr;    // cudaEvent_t
  float* scratch_ = nullptr;  // one float on the device, for Barrier
  float* staged_ = nullptr;   // device copies of host buffers (RunStaged)
  size_t staged_floats_ = 0;
  std::string broken_;
};

// Process groups (comm/groups.h) of NCCL communicators on one CUDA device, their unique
// ids exchanged through one rendezvous store (each group's under its name). Every
// communicator made is also appended to *made, when given.
GroupFactory NcclGroups(std::shared_ptr<gloo::rendezvous::Store> store, const NcclOptions& options,
                        std::vector<Communicator*>* made = nullptr);

}  // namespace gantry::comm
