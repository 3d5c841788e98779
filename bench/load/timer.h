// The control-plane load test's clock, and its delayed work.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

namespace gantry::load {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// ---- Delayed work: one thread runs each function at its time (they must not block).

class Timer {
 public:
  Timer() : thread_([this] { Loop(); }) {}
  ~Timer() { Stop(); }
  void At(Clock::time_point t, std::function<void()> fn);
  void After(std::chrono::milliseconds d, std::function<void()> fn) { At(Clock::now() + d, std::move(fn)); }
  // Drops what is pending and joins the thread.
  void Stop();

 private:
  struct Item {
    Clock::time_point t;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Item& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  void Loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> q_;
  uint64_t seq_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gantry::load
