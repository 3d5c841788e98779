#include "common/executor.h"

#include <algorithm>
#include <atomic>

namespace gantry {

Executor::Executor(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { Loop(); });
}

Executor::~Executor() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void Executor::Post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(std::move(fn));
  }
  cv_.notify_one();
}

void Executor::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to run
    std::function<void()> fn = std::move(queue_.front());
    queue_.pop_front();
    l.unlock();
    fn();
    l.lock();
  }
}

void SerialQueues::Post(const std::string& key, Item item) {
  std::lock_guard<std::mutex> l(mu_);
  Queue& q = queues_[key];
  q.waiting.push_back(std::move(item));
  if (!q.running) StartLocked(key, q);
}

bool SerialQueues::PostIfBusy(const std::string& key, std::function<void()> fn) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = queues_.find(key);
  if (it == queues_.end()) return false;
  it->second.waiting.push_back([fn = std::move(fn)](std::function<void()> done) {
    fn();
    done();
  });
  return true;
}

void SerialQueues::WaitIdle() {
  std::unique_lock<std::mutex> l(mu_);
  idle_.wait(l, [&] { return queues_.empty(); });
}

void SerialQueues::StartLocked(const std::string& key, Queue& q) {
  q.running = true;
  Item item = std::move(q.waiting.front());
  q.waiting.pop_front();
  executor_->Post([this, key, item = std::move(item)] {
    auto once = std::make_shared<std::atomic<bool>>(false);
    item([this, key, once] {
      if (!once->exchange(true)) Finished(key);
    });
  });
}

void SerialQueues::Finished(const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = queues_.find(key);
  if (it == queues_.end()) return;
  it->second.running = false;
  if (!it->second.waiting.empty()) {
    StartLocked(key, it->second);
    return;
  }
  queues_.erase(it);
  if (queues_.empty()) idle_.notify_all();
}

}  // namespace gantry
