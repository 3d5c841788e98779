#include "coordinator/store.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace gantry::coordinator {
namespace {

v1::Job NewJob(const std::string& name) {
  v1::Job j;
  j.set_name(name);
  j.set_state(v1::PENDING);
  return j;
}

TEST(StoreTest, JobsAndEventsSurviveReopen) {
  testing::TempDir d;
  std::string a, b;
  {
    auto s = Store::Open(d.File("db"));
    ASSERT_TRUE(s.ok()) << s.status();
    a = *(*s)->CreateJob(NewJob("first"));
    b = *(*s)->CreateJob(NewJob("second"));
    v1::JobEvent e;
    e.set_job_id(a);
    e.set_message("hello");
    EXPECT_EQ(*(*s)->AppendEvent(e), 1);
    EXPECT_EQ(*(*s)->AppendEvent(e), 2);
  }
  auto s = Store::Open(d.File("db"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(a, "j-000001");
  EXPECT_EQ(b, "j-000002");
  auto jobs = (*s)->ListJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[1].name(), "second");
  auto events = (*s)->Events(a, 2);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].seq(), 2);
  // Ids keep counting after a reopen: never reused.
  EXPECT_EQ(*(*s)->CreateJob(NewJob("third")), "j-000003");
}

TEST(StoreTest, UnknownJobIsNotFound) {
  testing::TempDir d;
  auto s = Store::Open(d.File("db"));
  ASSERT_TRUE(s.ok());
  auto j = (*s)->GetJob("j-999999");
  EXPECT_EQ(j.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(j.status().message().find("j-999999"), absl::string_view::npos);
}

// The index's views for the quota walk: a device's queue in placement order and the placed
// jobs with their kinds, as brief records (no spec text), kept by every write.
TEST(StoreTest, QueuedAndPlacedBriefsFollowTheIndex) {
  testing::TempDir d;
  auto s = *Store::Open(d.File("db"));
  v1::Job low = NewJob("low"), high = NewJob("high"), placed = NewJob("placed");
  low.set_team("vision");
  low.set_spec_yaml("spec text");
  high.set_team("nlp");
  high.set_priority(20);
  placed.set_team("vision");
  placed.set_world_size(4);
  const std::string a = *s->CreateJob(low), b = *s->CreateJob(high), c = *s->CreateJob(placed);
  for (const std::string& id : {a, b, c}) s->SetDevice(id, "cuda");
  EXPECT_TRUE(s->QueuedBriefs("cpu").empty());
  auto queued = s->QueuedBriefs("cuda");
  ASSERT_EQ(queued.size(), 3u);
  EXPECT_EQ(queued[0].first.id, b) << "priority first";
  EXPECT_EQ(queued[0].second->team(), "nlp");
  EXPECT_EQ(queued[1].first.id, a);
  EXPECT_TRUE(queued[1].second->spec_yaml().empty()) << "brief";
  EXPECT_TRUE(s->PlacedBriefs().empty());
  v1::Job running = *s->GetJob(c);
  running.set_state(v1::RUNNING);
  ASSERT_TRUE(s->PutJob(running).ok());
  EXPECT_EQ(s->QueuedBriefs("cuda").size(), 2u);
  auto placed_now = s->PlacedBriefs();
  ASSERT_EQ(placed_now.size(), 1u);
  EXPECT_EQ(placed_now[0].first->id(), c);
  EXPECT_EQ(placed_now[0].first->world_size(), 4);
  EXPECT_EQ(placed_now[0].first->team(), "vision");
  EXPECT_EQ(placed_now[0].second, "cuda");
}

// Each team's queue of a device kind (the fair share's walk reads it a job at a time), and
// where a queued job waits (device, team), follow the index as jobs are queued, placed, moved
// to another kind and end; the placed jobs leave PlacedBriefs when they end.
TEST(StoreTest, TeamQueuesFollowTheIndex) {
  testing::TempDir d;
  auto s = *Store::Open(d.File("db"));
  std::vector<std::string> ids;
  for (const std::string team : {"vision", "nlp", "vision", "vision"}) {
    v1::Job j = NewJob(team);
    j.set_team(team);
    ids.push_back(*s->CreateJob(j, {}, "cpu"));
  }
  EXPECT_EQ(s->QueuedTeams("cpu"), (std::vector<std::string>{"nlp", "vision"}));
  EXPECT_TRUE(s->QueuedTeams("cuda").empty());
  auto next = [&](const std::string& team, std::optional<placement::QueueKey> after) {
    std::vector<std::string> out;
    while (auto n = s->NextQueuedOfTeam("cpu", team, after)) {
      out.push_back(n->first.id);
      EXPECT_EQ(n->second->team(), team);
      after = n->first;
    }
    return out;
  };
  EXPECT_EQ(next("vision", std::nullopt), (std::vector<std::string>{ids[0], ids[2], ids[3]}));
  EXPECT_EQ(next("nlp", std::nullopt), (std::vector<std::string>{ids[1]}));
  EXPECT_EQ(s->QueuedAt(ids[2]), std::make_pair(std::string("cpu"), std::string("vision")));
  // Placed: out of its team's queue, into PlacedBriefs; it ends: out of both.
  v1::Job placed = *s->GetJob(ids[0]);
  placed.set_state(v1::RUNNING);
  ASSERT_TRUE(s->PutJob(placed).ok());
  EXPECT_EQ(next("vision", std::nullopt), (std::vector<std::string>{ids[2], ids[3]}));
  EXPECT_FALSE(s->QueuedAt(ids[0]));
  ASSERT_EQ(s->PlacedBriefs().size(), 1u);
  placed.set_state(v1::SUCCEEDED);
  ASSERT_TRUE(s->PutJob(placed).ok());
  EXPECT_TRUE(s->PlacedBriefs().empty());
  // Another device kind: it moves to that kind's team queue.
  s->SetDevice(ids[3], "cuda");
  EXPECT_EQ(next("vision", std::nullopt), (std::vector<std::string>{ids[2]}));
  EXPECT_EQ(s->QueuedTeams("cuda"), (std::vector<std::string>{"vision"}));
  EXPECT_EQ(s->QueuedAt(ids[3]), std::make_pair(std::string("cuda"), std::string("vision")));
  // The last queued job of a team goes: the team has no queue of the kind left.
  v1::Job cancelled = *s->GetJob(ids[1]);
  cancelled.set_state(v1::CANCELLED);
  ASSERT_TRUE(s->PutJob(cancelled).ok());
  EXPECT_EQ(s->QueuedTeams("cpu"), (std::vector<std::string>{"vision"}));
  EXPECT_TRUE(next("nlp", std::nullopt).empty());
}

}  // namespace
}  // namespace gantry::coordinator
