// ZeRO 3's gathered units (unit_gather.h).
#include "worker/train/unit_gather.h"

namespace gantry::train {

UnitGather::UnitGather(std::vector<int> unit_bucket, int buckets, Ops ops)
    : unit_bucket_(std::move(unit_bucket)), state_(static_cast<size_t>(buckets)), ops_(std::move(ops)) {}

void UnitGather::Start(int unit) {
  const int k = unit_bucket_[static_cast<size_t>(unit)];
  State& s = state_[static_cast<size_t>(k)];
  s.gathered = ops_.start(k, &s.ticket);
  s.refs = 1;
}

void UnitGather::Unref(State& s) {
  if (--s.refs == 0) {
    ops_.give(s.gathered);
    s.gathered = nullptr;
  }
}

float* UnitGather::Acquire(int unit) {
  State& s = Of(unit);
  // The model walks its units up in forward and down in backward: the next one this way.
  const int prev = last_unit_;
  last_unit_ = unit;
  const int next = prev < 0 || unit > prev ? unit + 1 : unit - 1;
  if (s.prefetched) {  // on its way: the prefetch's reference becomes this one
    s.prefetched = false;
    ++hits_;
    ops_.wait(s.ticket);
  } else if (s.refs > 0) {  // held, and whole: its first acquirer waited
    ++s.refs;
  } else {
    Start(unit);
    ops_.wait(s.ticket);
  }
  if (prefetch_ && unit != prev && next >= 0 && next < static_cast<int>(unit_bucket_.size())) {
    State& n = Of(next);
    if (!n.prefetched && n.refs == 0) {
      Start(next);
      n.prefetched = true;
    }
  }
  return s.gathered;
}

void UnitGather::Release(int unit) { Unref(Of(unit)); }

void UnitGather::DropPrefetches() {
  for (State& s : state_) {
    if (!s.prefetched) continue;
    s.prefetched = false;
    Unref(s);
  }
}

}  // namespace gantry::train
