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

}  // namespace
}  // namespace gantry::coordinator
