// The executor primitives the daemons hand slow work to: per-key order (also for items that
// finish later, from another thread), keys in parallel, PostIfBusy, WaitIdle, Gather.
#include "common/executor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gantry {
namespace {

TEST(SerialQueuesTest, AKeysItemsRunInOrderEachAfterThePreviousFinished) {
  Executor ex(4);
  SerialQueues q(&ex);
  std::mutex mu;
  std::vector<std::string> log;
  std::promise<std::function<void()>> held;  // the first item's done, called later by the test
  q.Post("job", [&](std::function<void()> done) {
    std::lock_guard<std::mutex> l(mu);
    log.push_back("a starts");
    held.set_value(done);  // finishes only when the test says so, from the test's thread
  });
  q.Post("job", [&](std::function<void()> done) {
    {
      std::lock_guard<std::mutex> l(mu);
      log.push_back("b");
    }
    done();
  });
  EXPECT_TRUE(q.PostIfBusy("job", [&] {
    std::lock_guard<std::mutex> l(mu);
    log.push_back("c");
  })) << "job has items: c is queued behind them";
  std::function<void()> finish_a = held.get_future().get();
  {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_EQ(log, std::vector<std::string>({"a starts"})) << "b waits for a's done, though 4 threads are free";
  }
  finish_a();
  finish_a();  // a second call is ignored
  q.WaitIdle();
  EXPECT_EQ(log, std::vector<std::string>({"a starts", "b", "c"}));
  EXPECT_FALSE(q.PostIfBusy("job", [&] { ADD_FAILURE() << "posted though the job had no items"; }))
      << "nothing pending: the caller does the work itself";
}

TEST(SerialQueuesTest, DifferentKeysRunInParallel) {
  Executor ex(2);
  SerialQueues q(&ex);
  std::promise<void> b_ran;
  std::promise<std::function<void()>> a_done;
  // a does not finish until b has run: with keys serialised against each other this would
  // never end (WaitIdle below would hang, and the future's wait times out first).
  q.Post("a", [&](std::function<void()> done) { a_done.set_value(done); });
  q.Post("b", [&](std::function<void()> done) {
    b_ran.set_value();
    done();
  });
  ASSERT_EQ(b_ran.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "b did not run while a was unfinished";
  a_done.get_future().get()();
  q.WaitIdle();
}

TEST(GatherTest, HandsOnTheResultsInSlotOrderOnceTheLastArrives) {
  std::vector<int> got;
  int calls = 0;
  auto g = Gather<int>::Make(3, [&](std::vector<int> v) {
    got = std::move(v);
    ++calls;
  });
  auto s0 = g->Slot(0), s1 = g->Slot(1), s2 = g->Slot(2);
  g.reset();  // the slots keep it alive
  s2(30);
  s0(10);
  EXPECT_EQ(calls, 0);
  std::thread t([&] { s1(20); });
  t.join();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(got, std::vector<int>({10, 20, 30}));
  int empty_calls = 0;
  Gather<int>::Make(0, [&](std::vector<int> v) { empty_calls += v.empty(); });
  EXPECT_EQ(empty_calls, 1) << "no results to wait for: at once";
}

}  // namespace
}  // namespace gantry
