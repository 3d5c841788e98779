// ZeRO 3's gathered units (worker/train/unit_gather.h) with recording operations: one gather
// per bucket however many hold it, the prefetch of the next unit in the walk's direction, a
// prefetch acquired (a hit) or dropped before an update, and every buffer given back once.
#include "worker/train/unit_gather.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace gantry::train {
namespace {

struct Recorder {
  std::vector<int> started;      // buckets, in order
  std::vector<uint64_t> waited;  // tickets
  std::map<float*, int> given;   // buffer → times given back
  float buffers[8] = {};
  UnitGather::Ops Ops() {
    return {[this](int k, uint64_t* ticket) {
              started.push_back(k);
              *ticket = 100 + static_cast<uint64_t>(started.size());
              return &buffers[k];
            },
            [this](uint64_t t) { waited.push_back(t); }, [this](float* p) { ++given[p]; }};
  }
};

TEST(UnitGatherTest, ForwardPrefetchesTheNextUnitAndBackwardThePrevious) {
  Recorder r;
  UnitGather g({0, 1, 2, 3}, 4, r.Ops());
  // Forward: 0 is gathered and waited for, 1 starts behind it.
  EXPECT_EQ(g.Acquire(0), &r.buffers[0]);
  EXPECT_EQ(r.started, (std::vector<int>{0, 1}));
  g.Release(0);
  EXPECT_EQ(r.given[&r.buffers[0]], 1);
  EXPECT_EQ(g.Acquire(1), &r.buffers[1]);  // a hit: waited for, not started again
  EXPECT_EQ(g.hits(), 1);
  EXPECT_EQ(r.started, (std::vector<int>{0, 1, 2}));
  g.Release(1);
  g.Acquire(2);
  g.Release(2);
  g.Acquire(3);  // the last unit: nothing past it to prefetch
  EXPECT_EQ(r.started, (std::vector<int>{0, 1, 2, 3}));
  // Backward starts on the unit forward ended on, still held: a second reference, no second
  // gather, and no prefetch (the same unit again says no direction).
  g.Acquire(3);
  EXPECT_EQ(g.refs(3), 2);
  EXPECT_EQ(r.started, (std::vector<int>{0, 1, 2, 3}));
  g.Release(3);
  g.Release(3);
  EXPECT_EQ(g.refs(3), 0);
  EXPECT_EQ(r.given[&r.buffers[3]], 1);
  // Then down: 2 is gathered again (forward gave it back) and 1 starts behind it.
  g.Acquire(2);
  EXPECT_EQ(r.started, (std::vector<int>{0, 1, 2, 3, 2, 1}));
  g.Release(2);
  g.Acquire(1);
  EXPECT_EQ(g.hits(), 4);  // 1, 2, 3 in forward; 1 in backward
  EXPECT_EQ(r.started.back(), 0);
}

TEST(UnitGatherTest, APrefetchNobodyAcquiredIsGivenBackOnce) {
  Recorder r;
  UnitGather g({0, 1, 2}, 3, r.Ops());
  g.Acquire(0);
  g.Release(0);
  EXPECT_EQ(g.refs(1), 1);  // the prefetch's own reference
  g.DropPrefetches();        // an update comes: what was gathered ahead is stale
  EXPECT_EQ(g.refs(1), 0);
  EXPECT_EQ(r.given[&r.buffers[1]], 1);
  g.DropPrefetches();
  EXPECT_EQ(r.given[&r.buffers[1]], 1);
  // The next micro-batch starts over: 0 then 1 gathered again, no hit counted for the drop.
  g.BeginMicroBatch();
  g.Acquire(0);
  EXPECT_EQ(r.started, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(g.hits(), 0);
}

TEST(UnitGatherTest, WithoutPrefetchEachUnitIsGatheredWhenAcquired) {
  Recorder r;
  UnitGather g({0, 1}, 2, r.Ops());
  g.set_prefetch(false);
  g.Acquire(0);
  g.Release(0);
  g.Acquire(1);
  g.Release(1);
  EXPECT_EQ(r.started, (std::vector<int>{0, 1}));
  EXPECT_EQ(r.waited.size(), 2u);
  EXPECT_EQ(g.hits(), 0);
  EXPECT_EQ(r.given.size(), 2u);
}

}  // namespace
}  // namespace gantry::train
