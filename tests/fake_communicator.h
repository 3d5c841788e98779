// A fake group of two ranks for unit tests of what sits around a collective: this rank's
// peer holds `peer_factor` times this rank's values, so every sum and gather has a known
// answer, and each call is logged (collective, elements). Calls from `fail_from` on fail
// with DEADLINE_EXCEEDED naming the collective. Header-only; no threads, no sockets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "kernels/types.h"

namespace gantry::fakes {

class MirroredPair final : public comm::Communicator {
 public:
  explicit MirroredPair(int rank, float peer_factor = 10.f) : rank_(rank), k_(peer_factor) {}
  int rank() const override { return rank_; }
  int size() const override { return 2; }
  uint64_t seq() const override { return calls_; }
  uint64_t completed() const override { return calls_; }

  absl::Status AllReduceSum(float* data, size_t n) override {
    if (absl::Status s = Call("all_reduce", n); !s.ok()) return s;
    for (size_t i = 0; i < n; ++i) data[i] *= 1.f + k_;
    return absl::OkStatus();
  }
  absl::Status ReduceScatterSum(const float* in, float* out, size_t n) override {
    if (absl::Status s = Call("reduce_scatter", n); !s.ok()) return s;
    for (size_t i = 0; i < n; ++i) out[i] = in[Mine(n) + i] * (1.f + k_);
    return absl::OkStatus();
  }
  absl::Status AllGather(const float* in, float* out, size_t n) override {
    if (absl::Status s = Call("all_gather", n); !s.ok()) return s;
    for (size_t i = 0; i < n; ++i) {
      out[Mine(n) + i] = in[i];
      out[static_cast<size_t>(1 - rank_) * n + i] = in[i] * k_;
    }
    return absl::OkStatus();
  }
  // The bf16 sums: the two values added in fp32 and rounded to bf16 (as NCCL's bf16 sum).
  absl::Status AllReduceSumBf16(uint16_t* data, size_t n) override {
    if (absl::Status s = Call("all_reduce_bf16", n); !s.ok()) return s;
    for (size_t i = 0; i < n; ++i) data[i] = SumBf16(data[i]);
    return absl::OkStatus();
  }
  absl::Status ReduceScatterSumBf16(const uint16_t* in, uint16_t* out, size_t n) override {
    if (absl::Status s = Call("reduce_scatter_bf16", n); !s.ok()) return s;
    for (size_t i = 0; i < n; ++i) out[i] = SumBf16(in[Mine(n) + i]);
    return absl::OkStatus();
  }
  absl::Status AllToAll(const float*, float*, size_t) override { return Unused(); }
  absl::Status AllToAllV(const float*, const std::vector<size_t>&, float*, const std::vector<size_t>&) override {
    return Unused();
  }
  absl::Status Broadcast(float*, size_t, int) override { return Unused(); }
  absl::Status Send(const float*, size_t, int) override { return Unused(); }
  absl::Status Recv(float*, size_t, int) override { return Unused(); }
  absl::Status Barrier() override { return Unused(); }
  void Abort() override {}

  // The peer's contribution to a sum of x (exact in fp32 for the tests' values).
  float factor() const { return k_; }
  std::vector<std::pair<std::string, size_t>> log;  // (collective, elements)
  int fail_from = -1;                               // calls from this one (0-based) on fail

 private:
  absl::Status Call(const char* what, size_t n) {
    log.emplace_back(what, n);
    const int call = calls_++;
    if (fail_from >= 0 && call >= fail_from) return absl::DeadlineExceededError(std::string(what) + " timed out");
    return absl::OkStatus();
  }
  size_t Mine(size_t n) const { return static_cast<size_t>(rank_) * n; }
  uint16_t SumBf16(uint16_t x) const {
    const float v = kernels::FloatOfBf16(x);
    return kernels::Bf16Of(v + kernels::FloatOfBf16(kernels::Bf16Of(v * k_)));
  }
  static absl::Status Unused() { return absl::UnimplementedError("not used by the code under test"); }
  int rank_;
  float k_;
  int calls_ = 0;
};

}  // namespace gantry::fakes
