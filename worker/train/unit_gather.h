// ZeRO 3's gathered units: which buckets' parameters are gathered, who holds them, and the
// prefetch. The model acquires a unit before its forward and its backward and releases it
// after; a unit's bucket is gathered on first acquisition and given back when its last holder
// releases it. Acquiring a unit starts the gather of the next one in the same direction (up
// in forward, down in backward), which runs while this one computes; a prefetched bucket
// holds one reference of its own until it is acquired (a hit) or dropped before an update.
//
// Pure bookkeeping over three operations the engine supplies (start a bucket's all-gather,
// wait for it, give its buffer back), so that it is tested alone (unit_gather_test).
// Thread-compatible: the training thread calls it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace gantry::train {

class UnitGather {
 public:
  struct Ops {
    // Starts gathering bucket k into a buffer it returns; *ticket names the gather.
    std::function<float*(int bucket, uint64_t* ticket)> start;
    std::function<void(uint64_t ticket)> wait;  // a failure is kept by the engine
    std::function<void(float* buffer)> give;
  };
  // unit_bucket[u]: the bucket of unit u; buckets: how many.
  UnitGather(std::vector<int> unit_bucket, int buckets, Ops ops);

  // The gathered parameters of unit's bucket, waited for.
  float* Acquire(int unit);
  void Release(int unit);
  // A micro-batch starts: the direction is forgotten (forward goes up again).
  void BeginMicroBatch() { last_unit_ = -1; }
  // Prefetched buckets nobody acquired are given back (before an update makes them stale).
  void DropPrefetches();
  void set_prefetch(bool on) { prefetch_ = on; }
  // Acquisitions that found their bucket's gather already started by a prefetch.
  int64_t hits() const { return hits_; }
  // Holders of bucket k (a prefetch counts as one); 0: not gathered.
  int refs(int bucket) const { return state_[static_cast<size_t>(bucket)].refs; }

 private:
  struct State {
    float* gathered = nullptr;
    int refs = 0;
    bool prefetched = false;  // gathered ahead, not acquired yet (holds one reference)
    uint64_t ticket = 0;
  };
  State& Of(int unit) { return state_[static_cast<size_t>(unit_bucket_[static_cast<size_t>(unit)])]; }
  void Start(int unit);
  void Unref(State& s);

  const std::vector<int> unit_bucket_;
  std::vector<State> state_;
  Ops ops_;
  int last_unit_ = -1;  // the unit acquired last this micro-batch (the direction)
  bool prefetch_ = true;
  int64_t hits_ = 0;
};

}  // namespace gantry::train
