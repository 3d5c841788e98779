// A thread that runs one communicator's collectives in the order they were submitted, so
// the training thread can go on computing while gradients are reduced. Every rank submits
// the same collectives in the same order: the sequence numbers of the group stay aligned.
// After a failure the remaining operations are not run; they report the first error.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "comm/communicator.h"

namespace gantry::comm {

class CommThread {
 public:
  explicit CommThread(Communicator* comm);
  ~CommThread();  // finishes what was submitted, then joins
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  using Op = std::function<absl::Status(Communicator&)>;
  // Queues op; the ticket orders it (1, 2, ...).
  uint64_t Submit(Op op);
  // Blocks until operation `ticket` (and all before it) ran; the first error so far, if any.
  absl::Status Wait(uint64_t ticket);
  absl::Status WaitAll();
  // Seconds the thread spent running operations since the last call.
  double TakeBusySeconds();
  Communicator& comm() { return *comm_; }

 private:
  void Loop();

  Communicator* comm_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<uint64_t, Op>> queue_;
  uint64_t submitted_ = 0, done_ = 0;
  absl::Status error_;
  double busy_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

// The group of one: every collective is the identity (a copy where input and output differ).
class SoloCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  uint64_t seq() const override { return seq_; }
  uint64_t completed() const override { return seq_; }
  absl::Status AllReduceSum(float*, size_t) override { return Next(); }
  absl::Status ReduceScatterSum(const float* in, float* out, size_t n) override { return Copy(in, out, n); }
  absl::Status AllGather(const float* in, float* out, size_t n) override { return Copy(in, out, n); }
  absl::Status AllToAll(const float* in, float* out, size_t n) override { return Copy(in, out, n); }
  absl::Status AllToAllV(const float* in, const std::vector<size_t>& send_counts, float* out,
                         const std::vector<size_t>& recv_counts) override;
  absl::Status AllReduceSumBf16(uint16_t*, size_t) override { return Next(); }
  absl::Status ReduceScatterSumBf16(const uint16_t* in, uint16_t* out, size_t n) override { return Copy(in, out, n); }
  absl::Status Broadcast(float*, size_t, int root) override;
  absl::Status Send(const float*, size_t, int peer) override;
  absl::Status Recv(float*, size_t, int peer) override;
  absl::Status Barrier() override { return Next(); }
  void Abort() override {}  // nothing waits on a peer

 private:
  absl::Status Next() {
    ++seq_;
    return absl::OkStatus();
  }
  // out (n) ← in (n): a collective whose one rank keeps its own data.
  template <typename T>
  absl::Status Copy(const T* in, T* out, size_t n) {
    if (in != out) std::copy(in, in + n, out);
    return Next();
  }
  uint64_t seq_ = 0;
};

}  // namespace gantry::comm
