#include "coordinator/watchers.h"

#include <vector>

namespace gantry::coordinator {

void Watchers::Notify(const std::string& job_id) {
  // Called off mu_, each under its own lock: a watcher that unsubscribes meanwhile (its
  // stream ended, and it is deleted next) waits for its call to end, and is not called after.
  std::vector<std::shared_ptr<Subscription>> subs;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = by_job_.find(job_id);
    if (it == by_job_.end()) return;
    for (auto& [id, sub] : it->second) subs.push_back(sub);
  }
  for (auto& sub : subs) {
    std::lock_guard<std::mutex> l(sub->mu);
    if (sub->live) sub->fn();
  }
}

int Watchers::Subscribe(const std::string& job_id, std::function<void()> fn) {
  auto sub = std::make_shared<Subscription>();
  sub->fn = std::move(fn);
  std::lock_guard<std::mutex> l(mu_);
  by_job_[job_id][next_] = std::move(sub);
  job_of_[next_] = job_id;
  return next_++;
}

void Watchers::Unsubscribe(int id) {
  std::shared_ptr<Subscription> sub;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto job = job_of_.find(id);
    if (job == job_of_.end()) return;
    auto it = by_job_.find(job->second);
    if (it != by_job_.end()) {
      auto s = it->second.find(id);
      if (s != it->second.end()) {
        sub = std::move(s->second);
        it->second.erase(s);
      }
      if (it->second.empty()) by_job_.erase(it);
    }
    job_of_.erase(job);
  }
  if (sub) {
    std::lock_guard<std::mutex> l(sub->mu);  // a call in flight ends first
    sub->live = false;
  }
}

}  // namespace gantry::coordinator
