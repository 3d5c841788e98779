// Where a daemon's slow work goes, so that no gRPC handler or reactor waits for it
// (DESIGN.md: "handlers never block; slow work goes to an executor").
//   Executor      a few threads running posted functions, first posted first started.
//   SerialQueues  work in order per key (a job): an item starts once the one before it under
//                 its key has finished, and an item may finish later, from another thread,
//                 when the asynchronous calls it made have answered.
//   Gather        n asynchronous results, handed on together once the last has come.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gantry {

class Executor {
 public:
  explicit Executor(int threads);
  // Runs what was posted, then joins the threads.
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void Post(std::function<void()> fn);

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

class SerialQueues {
 public:
  // An item of work; it calls `done` once it has finished, at once or later from any
  // thread. The next item of its key starts after that. Calls after the first are ignored.
  using Item = std::function<void(std::function<void()> done)>;

  explicit SerialQueues(Executor* executor) : executor_(executor) {}

  // Queues item under key; it runs on the executor once key's earlier items have finished.
  void Post(const std::string& key, Item item);
  // When key has items queued or running, queues fn behind them and returns true. Otherwise
  // posts nothing and returns false: nothing is pending, and the caller runs fn's work now.
  bool PostIfBusy(const std::string& key, std::function<void()> fn);
  // Waits until no key has an item queued or running.
  void WaitIdle();

 private:
  struct Queue {
    std::deque<Item> waiting;
    bool running = false;
  };
  void StartLocked(const std::string& key, Queue& q);  // q has waiting items and none running
  void Finished(const std::string& key);

  Executor* executor_;
  std::mutex mu_;
  std::condition_variable idle_;
  std::map<std::string, Queue> queues_;  // keys with items queued or running
};

// Collects n results of asynchronous calls, each delivered once through its Slot(i); `all`
// runs once, with the results in slot order, on the thread that delivers the last one (at
// once, in Make, when n is 0).
template <typename T>
class Gather : public std::enable_shared_from_this<Gather<T>> {
 public:
  static std::shared_ptr<Gather> Make(size_t n, std::function<void(std::vector<T>)> all) {
    std::shared_ptr<Gather> g(new Gather(n, std::move(all)));
    if (n == 0) g->all_(std::vector<T>());
    return g;
  }
  // The callback that delivers result i; it keeps the Gather alive until it is called.
  std::function<void(T)> Slot(size_t i) {
    return [self = this->shared_from_this(), i](T v) { self->Deliver(i, std::move(v)); };
  }

 private:
  Gather(size_t n, std::function<void(std::vector<T>)> all) : results_(n), left_(n), all_(std::move(all)) {}
  void Deliver(size_t i, T v) {
    {
      std::lock_guard<std::mutex> l(mu_);
      results_[i].push_back(std::move(v));
      if (--left_ > 0) return;
    }
    std::vector<T> out;
    out.reserve(results_.size());
    for (auto& r : results_) out.push_back(std::move(r.front()));
    all_(std::move(out));
  }

  std::mutex mu_;
  std::vector<std::vector<T>> results_;  // one value each once delivered (T needs no default)
  size_t left_;
  std::function<void(std::vector<T>)> all_;
};

}  // namespace gantry
