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

}  // namespace
}  // namespace gantry::coordinator
