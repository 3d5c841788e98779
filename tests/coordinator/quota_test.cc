// The fair share's queue (coordinator/quota.h, FairShareQueue): its order against a
// reference that works every team's share out afresh at each step, on random queues, and
// one job's place (FairSharePosition, the walk that stops at it) against every job's.
#include "coordinator/quota.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gantry::coordinator {
namespace {

using quota::FairShareQueue;

// The order as the issue states it, step by step: the highest priority among the teams' next
// jobs; within it the lowest dominant share, worked out from the use as it stands; then the
// queue's order. Every job is placed in its turn (its slots, at least 1).
std::vector<std::string> ReferenceOrder(const TeamQuotas& quotas, quota::Usage usage, const std::string& device,
                                        std::vector<FairShareQueue::Job> jobs) {
  std::sort(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  std::vector<std::string> order;
  std::vector<bool> taken(jobs.size(), false);
  for (size_t n = 0; n < jobs.size(); ++n) {
    int best = -1;
    std::map<std::string, bool> seen;  // each team's first untaken job is its head
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (taken[i] || seen[jobs[i].team]) continue;
      seen[jobs[i].team] = true;
      if (best < 0) {
        best = static_cast<int>(i);
        continue;
      }
      const auto& k = jobs[i].key;
      const auto& b = jobs[best].key;
      const double s = quota::DominantShare(quotas, usage, jobs[i].team);
      const double bs = quota::DominantShare(quotas, usage, jobs[best].team);
      if (k.priority > b.priority || (k.priority == b.priority && (s < bs || (s == bs && k < b)))) {
        best = static_cast<int>(i);
      }
    }
    taken[best] = true;
    order.push_back(jobs[best].key.id);
    quota::Use& u = usage[jobs[best].team];
    u.slots[device] += std::max<int64_t>(1, jobs[best].slots);
    ++u.jobs;
  }
  return order;
}

struct RandomQueue {
  TeamQuotas quotas;
  quota::Usage usage;
  std::vector<FairShareQueue::Job> jobs;
};

RandomQueue MakeRandomQueue(std::mt19937& rng) {
  RandomQueue r;
  const int teams = 1 + static_cast<int>(rng() % 6);
  for (int t = 0; t < teams; ++t) {
    TeamQuota q;
    q.team = "team" + std::to_string(t);
    q.nominal["cpu"] = 1 + static_cast<int64_t>(rng() % 12);
    if (rng() % 2) q.nominal["cuda"] = 1 + static_cast<int64_t>(rng() % 8);
    r.quotas[q.team] = q;
    r.usage[q.team].slots["cpu"] = static_cast<int64_t>(rng() % 10);
    if (rng() % 2) r.usage[q.team].slots["cuda"] = static_cast<int64_t>(rng() % 6);
  }
  const int n = static_cast<int>(rng() % 60);
  for (int i = 0; i < n; ++i) {
    FairShareQueue::Job j;
    j.key.id = "j-" + std::to_string(1 + i);
    j.key.priority = static_cast<int32_t>(rng() % 3);
    j.key.restarting = rng() % 5 == 0;
    // Now and then a team without a quota (share 0), and slots of 0 (counted as 1).
    j.team = rng() % 9 == 0 ? "unquoted" : "team" + std::to_string(rng() % teams);
    j.slots = static_cast<int64_t>(rng() % 5);
    r.jobs.push_back(j);
  }
  std::shuffle(r.jobs.begin(), r.jobs.end(), rng);
  return r;
}

TEST(FairShareQueueTest, OrderIsTheReferencesOnRandomQueues) {
  std::mt19937 rng(20261129);
  for (int round = 0; round < 400; ++round) {
    const RandomQueue r = MakeRandomQueue(rng);
    const std::vector<std::string> want = ReferenceOrder(r.quotas, r.usage, "cpu", r.jobs);
    FairShareQueue q(r.quotas, r.usage, "cpu", r.jobs);
    std::vector<std::string> got;
    while (auto j = q.Next()) {
      got.push_back(j->key.id);
      q.Placed(j->team, std::max<int64_t>(1, j->slots));
    }
    ASSERT_EQ(got, want) << "round " << round;
  }
}

TEST(FairShareQueueTest, AQueueInTheStoresOrderGivesTheSameOrderAsAShuffledOne) {
  std::mt19937 rng(7);
  for (int round = 0; round < 100; ++round) {
    RandomQueue r = MakeRandomQueue(rng);
    std::vector<FairShareQueue::Job> sorted = r.jobs;
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
    FairShareQueue shuffled(r.quotas, r.usage, "cpu", r.jobs), ordered(r.quotas, r.usage, "cpu", sorted);
    while (true) {
      auto a = shuffled.Next(), b = ordered.Next();
      ASSERT_EQ(a.has_value(), b.has_value());
      if (!a) break;
      ASSERT_EQ(a->key.id, b->key.id) << "round " << round;
      shuffled.Placed(a->team, std::max<int64_t>(1, a->slots));
      ordered.Placed(b->team, std::max<int64_t>(1, b->slots));
    }
  }
}

// The pass's queue, read a team's next job at a time (as from the store's per-team index),
// gives the order, holds and leftovers of the queue given whole.
TEST(FairShareQueueTest, AQueueReadAsItGoesGivesTheOrderOfOneGivenWhole) {
  std::mt19937 rng(13);
  for (int round = 0; round < 100; ++round) {
    RandomQueue r = MakeRandomQueue(rng);
    std::map<std::string, std::map<placement::QueueKey, FairShareQueue::Job>> by_team;
    std::vector<std::string> teams;
    for (const auto& j : r.jobs) {
      by_team[j.team].emplace(j.key, j);
      teams.push_back(j.team);
    }
    int reads = 0;
    FairShareQueue whole(r.quotas, r.usage, "cpu", r.jobs);
    FairShareQueue read(r.quotas, r.usage, "cpu", teams,
                        [&](const std::string& team, const std::optional<placement::QueueKey>& after) {
                          ++reads;
                          const auto& q = by_team.at(team);
                          auto it = after ? q.upper_bound(*after) : q.begin();
                          return it == q.end() ? std::nullopt : std::optional<FairShareQueue::Job>(it->second);
                        });
    const std::string held = r.jobs.empty() ? "" : r.jobs[rng() % r.jobs.size()].team;
    for (int step = 0;; ++step) {
      auto a = whole.Next(), b = read.Next();
      ASSERT_EQ(a.has_value(), b.has_value()) << "round " << round;
      if (!a) break;
      ASSERT_EQ(a->key.id, b->key.id) << "round " << round << ", step " << step;
      if (step == 3 && !held.empty()) {  // a team held partway, as a quota holds it in a pass
        whole.Hold(held);
        read.Hold(held);
      }
      whole.Placed(a->team, std::max<int64_t>(1, a->slots));
      read.Placed(b->team, std::max<int64_t>(1, b->slots));
    }
    std::vector<std::string> left_whole, left_read;
    for (const auto& j : whole.Left(held)) left_whole.push_back(j.key.id);
    for (const auto& j : read.Left(held)) left_read.push_back(j.key.id);
    EXPECT_EQ(left_read, left_whole) << "round " << round;
    if (!r.jobs.empty()) EXPECT_GT(reads, 0) << "round " << round;
  }
}

// A walk that stops after a few jobs reads a few jobs a team, not the whole queue.
TEST(FairShareQueueTest, AWalkThatStopsEarlyReadsAFewJobsATeam) {
  TeamQuotas quotas;
  std::map<std::string, std::vector<FairShareQueue::Job>> by_team;
  for (int i = 0; i < 1000; ++i) {
    FairShareQueue::Job j;
    j.key.id = absl::StrFormat("j-%06d", i + 1);
    j.team = absl::StrCat("t", i % 10);
    quotas[j.team].nominal["cpu"] = 100;
    by_team[j.team].push_back(j);
  }
  int reads = 0;
  std::vector<std::string> teams;
  for (const auto& [team, jobs] : by_team) teams.push_back(team);
  FairShareQueue q(quotas, {}, "cpu", teams, [&](const std::string& team, const std::optional<placement::QueueKey>& after) {
    ++reads;
    const auto& jobs = by_team.at(team);
    auto it = after ? std::upper_bound(jobs.begin(), jobs.end(), *after,
                                       [](const placement::QueueKey& k, const FairShareQueue::Job& j) { return k < j.key; })
                    : jobs.begin();
    return it == jobs.end() ? std::nullopt : std::optional<FairShareQueue::Job>(*it);
  });
  for (int i = 0; i < 5; ++i) {
    auto j = q.Next();
    ASSERT_TRUE(j);
    EXPECT_EQ(j->key.id, absl::StrFormat("j-%06d", i + 1));  // equal shares: by age
    q.Placed(j->team, 1);
  }
  EXPECT_LE(reads, 15);  // each team's head, then one more for each job taken
}

TEST(FairShareQueueTest, AHeldTeamIsSkippedAndItsJobsAreLeftInOrder) {
  TeamQuotas quotas;
  quotas["a"].nominal["cpu"] = 4;
  quotas["b"].nominal["cpu"] = 4;
  std::vector<FairShareQueue::Job> jobs;
  for (const auto& [id, team] : std::vector<std::pair<std::string, std::string>>{
           {"j-1", "a"}, {"j-2", "b"}, {"j-3", "a"}, {"j-4", "a"}, {"j-5", "b"}}) {
    FairShareQueue::Job j;
    j.key.id = id;
    j.team = team;
    jobs.push_back(j);
  }
  FairShareQueue q(quotas, {}, "cpu", jobs);
  auto first = q.Next();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->key.id, "j-1");
  q.Hold("a");
  std::vector<std::string> rest;
  while (auto j = q.Next()) rest.push_back(j->key.id);
  EXPECT_EQ(rest, (std::vector<std::string>{"j-2", "j-5"}));
  std::vector<std::string> left;
  for (const auto& j : q.Left("a")) left.push_back(j.key.id);
  EXPECT_EQ(left, (std::vector<std::string>{"j-3", "j-4"}));
  EXPECT_TRUE(q.Left("c").empty());
}

TEST(FairShareQueueTest, OneJobsPlaceIsItsPlaceAmongAll) {
  std::mt19937 rng(11);
  for (int round = 0; round < 100; ++round) {
    RandomQueue r = MakeRandomQueue(rng);
    std::map<std::string, std::vector<FairShareQueue::Job>> queues;
    for (auto& j : r.jobs) queues[rng() % 3 == 0 ? "cuda" : "cpu"].push_back(j);
    const auto all = quota::FairSharePositions(r.quotas, r.usage, queues);
    size_t queued = 0;
    for (const auto& [device, jobs] : queues) queued += jobs.size();
    ASSERT_EQ(all.size(), queued);
    for (const auto& [id, at] : all) {
      EXPECT_EQ(quota::FairSharePosition(r.quotas, r.usage, queues, id), at) << "round " << round << ", " << id;
    }
    EXPECT_EQ(quota::FairSharePosition(r.quotas, r.usage, queues, "j-999"), std::make_pair(int64_t{0}, std::string()));
  }
}

}  // namespace
}  // namespace gantry::coordinator
