#include "bench/load/timer.h"

namespace gantry::load {

void Timer::At(Clock::time_point t, std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return;
    q_.push(Item{t, seq_++, std::move(fn)});
  }
  cv_.notify_one();
}

void Timer::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
  std::lock_guard<std::mutex> l(mu_);
  while (!q_.empty()) q_.pop();
}

void Timer::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    if (q_.empty()) {
      cv_.wait(l);
      continue;
    }
    // A copy: wait_until keeps its deadline by reference while the lock is released, and a
    // push meanwhile may move the queue's items (found by ASan: a use after free).
    if (const Clock::time_point t = q_.top().t; Clock::now() < t) {
      cv_.wait_until(l, t);
      continue;
    }
    auto fn = q_.top().fn;
    q_.pop();
    l.unlock();
    fn();
    l.lock();
  }
}

}  // namespace gantry::load
