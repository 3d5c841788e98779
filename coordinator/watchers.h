// The watchers of jobs (WatchJob streams): a callback per watcher, called after each event of
// its job. Its own lock; it never calls into the cluster.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace gantry::coordinator {

class Watchers {
 public:
  // fn is called (without any lock of the caller's held) after each event of job_id.
  int Subscribe(const std::string& job_id, std::function<void()> fn);
  // Once it returns, fn is not running and will not run again, so its watcher may be deleted.
  void Unsubscribe(int id);
  // Wakes job_id's watchers (only the job's own: with thousands of jobs, waking every watcher
  // for every event would have each read the store for nothing).
  void Notify(const std::string& job_id);

 private:
  // One watcher's callback: called under its own lock, which Unsubscribe takes to end it.
  struct Subscription {
    std::mutex mu;
    bool live = true;
    std::function<void()> fn;
  };
  std::mutex mu_;
  std::map<std::string, std::map<int, std::shared_ptr<Subscription>>> by_job_;  // job → its watchers
  std::map<int, std::string> job_of_;
  int next_ = 1;
};

}  // namespace gantry::coordinator
