// A Communicator that forwards every call to another and counts what travels: the floats
// this rank sent by point-to-point calls (Send, SendRecv's send side) and the collectives it
// started (anything else). With native_send_recv false, SendRecv is not forwarded: the
// base class's default (Send and Recv in ring order) runs over the inner communicator.
// Header-only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/communicator.h"

namespace gantry::fakes {

class CountingCommunicator final : public comm::Communicator {
 public:
  explicit CountingCommunicator(comm::Communicator* inner, bool native_send_recv = true)
      : inner_(inner), native_(native_send_recv) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  uint64_t seq() const override { return inner_->seq(); }
  uint64_t completed() const override { return inner_->completed(); }

  absl::Status AllReduceSum(float* data, size_t n) override { return Other(inner_->AllReduceSum(data, n)); }
  absl::Status ReduceScatterSum(const float* in, float* out, size_t n) override {
    return Other(inner_->ReduceScatterSum(in, out, n));
  }
  absl::Status AllGather(const float* in, float* out, size_t n) override {
    return Other(inner_->AllGather(in, out, n));
  }
  absl::Status AllReduceSumBf16(uint16_t* data, size_t n) override { return Other(inner_->AllReduceSumBf16(data, n)); }
  absl::Status ReduceScatterSumBf16(const uint16_t* in, uint16_t* out, size_t n) override {
    return Other(inner_->ReduceScatterSumBf16(in, out, n));
  }
  absl::Status AllToAll(const float* in, float* out, size_t n) override { return Other(inner_->AllToAll(in, out, n)); }
  absl::Status AllToAllV(const float* in, const std::vector<size_t>& send_counts, float* out,
                         const std::vector<size_t>& recv_counts) override {
    return Other(inner_->AllToAllV(in, send_counts, out, recv_counts));
  }
  absl::Status Broadcast(float* data, size_t n, int root) override { return Other(inner_->Broadcast(data, n, root)); }
  absl::Status Send(const float* data, size_t n, int peer) override {
    sent_ += n;
    return inner_->Send(data, n, peer);
  }
  absl::Status Recv(float* data, size_t n, int peer) override { return inner_->Recv(data, n, peer); }
  absl::Status SendRecv(const float* send, size_t send_n, int to, float* recv, size_t recv_n, int from) override {
    if (!native_) return Communicator::SendRecv(send, send_n, to, recv, recv_n, from);
    sent_ += send_n;
    ++send_recvs_;
    return inner_->SendRecv(send, send_n, to, recv, recv_n, from);
  }
  absl::Status Barrier() override { return Other(inner_->Barrier()); }
  void Abort() override { inner_->Abort(); }

  size_t floats_sent() const { return sent_; }
  size_t send_recvs() const { return send_recvs_; }  // forwarded SendRecv calls
  size_t collectives() const { return others_; }

 private:
  absl::Status Other(absl::Status s) {
    ++others_;
    return s;
  }
  comm::Communicator* inner_;
  bool native_;
  std::atomic<size_t> sent_{0}, send_recvs_{0}, others_{0};
};

}  // namespace gantry::fakes
