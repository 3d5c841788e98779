#include "coordinator/checkpoint_commit.h"

#include <glog/logging.h>

#include <algorithm>

#include "coordinator/kill_points.h"

namespace gantry::coordinator {

namespace {
// Executor threads: what follows a commit takes the cluster's locks and writes the store
// (synced), so more threads would mostly wait on each other; two let one job's fsync
// overlap another's.
constexpr int kThreads = 2;
}  // namespace

CheckpointCommitter::CheckpointCommitter(shardserver::ShardDeadlines deadlines, LiveServers live, Committed committed)
    : clients_(deadlines), live_(std::move(live)), committed_(std::move(committed)), executor_(kThreads),
      jobs_(&executor_) {}

CheckpointCommitter::~CheckpointCommitter() { Drain(); }

void CheckpointCommitter::Commit(Checkpoint c) {
  auto p = std::make_shared<Checkpoint>(std::move(c));
  for (auto& [server, files] : p->files) std::sort(files.begin(), files.end());
  jobs_.Post(p->job_id, [this, p](std::function<void()> done) { CommitOnServers(p, std::move(done)); });
}

bool CheckpointCommitter::After(const std::string& job_id, std::function<void()> fn) {
  return jobs_.PostIfBusy(job_id, std::move(fn));
}

void CheckpointCommitter::ListNewest(const std::string& job_id, std::vector<std::string> servers,
                                     std::vector<std::string> jobs, NewestListed done) {
  jobs_.Post(job_id, [this, servers = std::move(servers), jobs = std::move(jobs),
                      done = std::move(done)](std::function<void()> finished) {
    using Listed = std::pair<std::vector<shardserver::StoredCheckpoint>, std::vector<std::string>>;
    auto all = Gather<Listed>::Make(jobs.size(), [this, done, finished](std::vector<Listed> lists) {
      std::vector<int64_t> newest;
      std::vector<std::string> unreachable;
      for (auto& [stored, missed] : lists) {
        newest.push_back(stored.empty() ? 0 : stored.back().step);
        unreachable.insert(unreachable.end(), missed.begin(), missed.end());
      }
      executor_.Post([done, finished, newest = std::move(newest), unreachable = std::move(unreachable)]() mutable {
        done(std::move(newest), std::move(unreachable));
        finished();
      });
    });
    for (size_t i = 0; i < jobs.size(); ++i) {
      clients_.ListStored(servers, jobs[i],
                          [slot = all->Slot(i)](std::vector<shardserver::StoredCheckpoint> stored,
                                                std::vector<std::string> unreachable) {
                            slot(Listed(std::move(stored), std::move(unreachable)));
                          });
    }
  });
}

void CheckpointCommitter::Drain() { jobs_.WaitIdle(); }

void CheckpointCommitter::CommitOnServers(Ptr c, std::function<void()> done) {
  auto servers = std::make_shared<std::vector<std::string>>();
  for (const auto& [server, files] : c->files) servers->push_back(server);
  CommitFrom(std::move(c), std::move(servers), 0, {}, std::move(done));
}

void CheckpointCommitter::CommitFrom(Ptr c, std::shared_ptr<const std::vector<std::string>> servers, size_t i,
                                     std::vector<std::string> committed, std::function<void()> done) {
  if (i == servers->size()) {
    kCommitAfterShardCommits.Reach();
    executor_.Post([this, c, committed = std::move(committed), done = std::move(done)]() mutable {
      Ended(c, std::move(committed), absl::OkStatus(), std::move(done));
    });
    return;
  }
  (i == 0 ? kCommitBeforeShardCommits : kCommitBetweenShardCommits).Reach();
  const std::string& server = (*servers)[i];
  clients_.Commit(server, c->job_id, c->step, c->files.at(server), c->manifest_json, c->owner,
                  [this, c, servers, i, committed = std::move(committed), done = std::move(done)](absl::Status s) mutable {
                    if (!s.ok()) {
                      executor_.Post([this, c, committed = std::move(committed), s, done = std::move(done)]() mutable {
                        Ended(c, std::move(committed), s, std::move(done));
                      });
                      return;
                    }
                    committed.push_back((*servers)[i]);
                    CommitFrom(c, servers, i + 1, std::move(committed), std::move(done));
                  });
}

void CheckpointCommitter::Ended(Ptr c, std::vector<std::string> committed, absl::Status error,
                                std::function<void()> done) {
  if (!error.ok()) {
    // A checkpoint some server refused stays invisible; the commits that did land go again.
    LOG(WARNING) << "checkpoint of " << c->job_id << " step " << c->step << " not committed: " << error;
    std::vector<std::pair<std::string, int64_t>> landed;
    for (const auto& server : committed) landed.emplace_back(server, c->step);
    Delete(landed, c->job_id, [this, c, error, done] {
      committed_(*c, error);
      done();
    });
    return;
  }
  committed_(*c, committed);
  if (c->keep > 0) {
    Prune(c, std::move(done));
  } else {
    done();
  }
}

void CheckpointCommitter::Prune(Ptr c, std::function<void()> done) {
  clients_.ListStored(live_(), c->job_id, [this, c, done](std::vector<shardserver::StoredCheckpoint> stored, std::vector<std::string>) {
    // The newest `keep` whole ones stay; each older one goes from every server holding
    // files of it.
    std::vector<std::pair<std::string, int64_t>> old;
    for (size_t i = 0; i + c->keep < stored.size(); ++i) {
      for (const auto& server : stored[i].servers) old.emplace_back(server, stored[i].step);
    }
    Delete(old, c->job_id, done);
  });
}

void CheckpointCommitter::Delete(const std::vector<std::pair<std::string, int64_t>>& targets, const std::string& job_id,
                                 std::function<void()> then) {
  auto all = Gather<absl::Status>::Make(targets.size(), [this, then](std::vector<absl::Status> results) {
    for (const auto& r : results) {
      if (!r.ok()) LOG(WARNING) << r;
    }
    executor_.Post(then);
  });
  for (size_t i = 0; i < targets.size(); ++i) clients_.Delete(targets[i].first, job_id, targets[i].second, all->Slot(i));
}

}  // namespace gantry::coordinator
