#include "coordinator/rendezvous.h"

#include <iterator>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gantry::coordinator {

Rendezvous::~Rendezvous() {
  for (auto& w : waiters_) w.done(absl::UnavailableError("coordinator shutting down"));
}

void Rendezvous::Put(const std::string& job_id, int64_t generation, const std::string& key, const std::string& value) {
  std::vector<Done> wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    values_[{job_id, generation, key}] = value;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->job_id == job_id && it->generation == generation && it->key == key) {
        wake.push_back(std::move(it->done));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& fn : wake) fn(value);
}

void Rendezvous::Get(const std::string& job_id, int64_t generation, const std::string& key, int64_t wait_ms,
                     int64_t now_ms, Done done) {
  std::unique_lock<std::mutex> l(mu_);
  auto it = values_.find({job_id, generation, key});
  if (it != values_.end()) {
    std::string v = it->second;
    l.unlock();
    done(std::move(v));
    return;
  }
  if (wait_ms <= 0) {
    l.unlock();
    done(absl::NotFoundError(absl::StrCat("rendezvous key '", key, "' of ", job_id, " is not set")));
    return;
  }
  waiters_.push_back({job_id, key, generation, now_ms + wait_ms, std::move(done)});
}

void Rendezvous::Drop(const std::string& job_id) {
  std::vector<Done> fail;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = values_.begin(); it != values_.end();) {
      it = std::get<0>(it->first) == job_id && !IsFailureReport(std::get<2>(it->first)) ? values_.erase(it)
                                                                                          : std::next(it);
    }
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->job_id == job_id && !IsFailureReport(it->key)) {
        fail.push_back(std::move(it->done));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& fn : fail) fn(absl::AbortedError(absl::StrCat("job ", job_id, " left its placement")));
}

void Rendezvous::Expire(int64_t now_ms) {
  std::vector<Waiter> expired;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->deadline_ms <= now_ms) {
        expired.push_back(std::move(*it));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& w : expired) {
    w.done(absl::DeadlineExceededError(
        absl::StrCat("rendezvous key '", w.key, "' of ", w.job_id, " was not put within the wait")));
  }
}

}  // namespace gantry::coordinator
