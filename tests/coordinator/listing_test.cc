// Paging of the coordinator's listings (common/paging.h, the service's ListJobs and
// ListWorkers) through the gRPC service in process: 20,000 jobs listed in full, page by page,
// newest first, each once; a state filter; the page size's bounds; tokens from another
// listing or made up refused; workers paged likewise.
#include "common/paging.h"

#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <set>

#include "absl/strings/str_format.h"

#include "coordinator/cluster.h"
#include "coordinator/service.h"
#include "coordinator/store.h"
#include "tests/coordinator/cluster_test_util.h"
#include "tests/test_util.h"

namespace gantry::coordinator {
namespace {

// Nothing is placed (ServedCoordinator): the listing sees the jobs as stored.
class ListingTest : public ::testing::Test, protected ServedCoordinator {
 protected:
  void SetUp() override { StartServer(dir_.File("db")); }
  void TearDown() override { StopServer(); }
  // Jobs of the given state, ids following those stored, written a thousand to a batch
  // without a sync each (the listing reads the store's index as it does after CreateJob).
  std::vector<std::string> Create(int n, v1::JobState state) {
    std::vector<std::string> ids;
    std::vector<Store::Update> batch;
    for (int i = 0; i < n; ++i) {
      v1::Job j;
      j.set_id(absl::StrFormat("j-%06d", ++created_));
      j.set_name("job");
      j.set_state(state);
      j.set_spec_yaml("model: {}\n");
      ids.push_back(j.id());
      batch.push_back({j, {}});
      if (batch.size() == 1000 || i == n - 1) {
        EXPECT_TRUE(store_->Commit(&batch, /*sync=*/false).ok());
        batch.clear();
      }
    }
    return ids;
  }
  absl::StatusOr<v1::ListJobsResponse> List(v1::ListJobsRequest req) {
    grpc::ClientContext ctx;
    v1::ListJobsResponse resp;
    const grpc::Status s = stub_->ListJobs(&ctx, req, &resp);
    if (!s.ok()) return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
    return resp;
  }
  // Every page of a listing: the ids in order, and how many pages.
  std::vector<std::string> ListAll(v1::ListJobsRequest req, int* pages) {
    std::vector<std::string> ids;
    *pages = 0;
    do {
      auto resp = List(req);
      EXPECT_TRUE(resp.ok()) << resp.status();
      if (!resp.ok()) break;
      ++*pages;
      EXPECT_LE(resp->jobs_size(), req.page_size() == 0 ? kMaxPageSize : req.page_size());
      for (const auto& j : resp->jobs()) ids.push_back(j.id());
      req.set_page_token(resp->next_page_token());
    } while (!req.page_token().empty());
    return ids;
  }

  testing::TempDir dir_;
  int created_ = 0;
};

TEST_F(ListingTest, TwentyThousandJobsAreListedInFullPageByPageNewestFirst) {
  std::vector<std::string> ids = Create(19990, v1::SUCCEEDED);
  const std::vector<std::string> failed = Create(10, v1::FAILED);
  ids.insert(ids.end(), failed.begin(), failed.end());
  const std::vector<std::string> newest_first(ids.rbegin(), ids.rend());
  v1::ListJobsRequest req;
  req.set_brief(true);
  int pages = 0;
  EXPECT_EQ(ListAll(req, &pages), newest_first);  // the default page: 1000 jobs
  EXPECT_EQ(pages, 20);
  req.set_page_size(3000);  // more than a page holds: 1000
  EXPECT_EQ(ListAll(req, &pages), newest_first);
  EXPECT_EQ(pages, 20);
  req.set_page_size(7);  // full records, 7 a page, across the state boundary
  req.set_brief(false);
  req.set_state(v1::FAILED);
  std::vector<std::string> want(failed.rbegin(), failed.rend());
  EXPECT_EQ(ListAll(req, &pages), want);
  EXPECT_EQ(pages, 2);
  auto first = List(req);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->jobs(0).spec_yaml().empty());  // full: the spec is there
  // A token continues only its own listing; a negative size and a made-up token are refused.
  v1::ListJobsRequest other;
  other.set_page_token(first->next_page_token());  // a FAILED listing's token for all jobs
  EXPECT_NE(List(other).status().message().find("continues another listing"), absl::string_view::npos);
  other.set_page_token("bm90IGEgdG9rZW4");
  EXPECT_NE(List(other).status().message().find("not one a Gantry daemon gave"), absl::string_view::npos);
  other.set_page_token("");
  other.set_page_size(-1);
  EXPECT_EQ(List(other).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ListingTest, WorkersArePagedInIdOrder) {
  std::vector<std::unique_ptr<FakeSession>> sessions;
  std::vector<std::string> ids;
  for (int i = 0; i < 25; ++i) {
    sessions.push_back(std::make_unique<FakeSession>());
    ids.push_back(cluster_->AddWorker(sessions.back().get(), v1::Resources()));
  }
  v1::ListWorkersRequest req;
  req.set_page_size(10);
  std::vector<std::string> got;
  int pages = 0;
  do {
    grpc::ClientContext ctx;
    v1::ListWorkersResponse resp;
    ASSERT_TRUE(stub_->ListWorkers(&ctx, req, &resp).ok());
    ++pages;
    for (const auto& w : resp.workers()) got.push_back(w.id());
    req.set_page_token(resp.next_page_token());
  } while (!req.page_token().empty());
  EXPECT_EQ(got, ids);
  EXPECT_EQ(pages, 3);
}

}  // namespace
}  // namespace gantry::coordinator
