// The coordinator's Cluster in process, for its tests: a fake worker session and jobs of
// a tiny model queued as SubmitJob queues them.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/cluster.h"
#include "coordinator/store.h"

namespace gantry::coordinator {

// A worker's attach stream as the cluster sees it: it keeps what the cluster sends.
class FakeSession : public WorkerSession {
 public:
  void Send(const v1::CoordinatorMessage& m) override {
    std::lock_guard<std::mutex> l(mu);
    got.push_back(m);
  }
  void End(const std::string& why) override {
    std::lock_guard<std::mutex> l(mu);
    ended = why;
  }
  bool Backlogged() override { return backlogged; }
  // Why the cluster ended this stream ("" while it has not).
  std::string Ended() {
    std::lock_guard<std::mutex> l(mu);
    return ended;
  }
  std::vector<v1::CoordinatorMessage> Take() {
    std::lock_guard<std::mutex> l(mu);
    return std::exchange(got, {});
  }
  // The assignment among messages, if any.
  static const v1::Assignment* Assigned(const std::vector<v1::CoordinatorMessage>& ms) {
    for (const auto& m : ms) {
      if (m.has_assign()) return &m.assign();
    }
    return nullptr;
  }
  std::mutex mu;
  std::vector<v1::CoordinatorMessage> got;
  std::string ended;
  std::atomic<bool> backlogged{false};  // messages read, not applied yet (the service's queue)
};

// Queues a job of a tiny model with world_size ranks, the spec's further sections in
// more_yaml (each a line), and lets the cluster place it (after before_placing, if given).
// Returns its id.
inline std::string SubmitTinyJob(Cluster& cluster, Store& store, const std::string& name, int world_size,
                                 const std::string& more_yaml, const std::function<void()>& before_placing = {}) {
  v1::Job j;
  j.set_name(name);
  j.set_state(v1::PENDING);
  j.set_world_size(world_size);
  j.set_steps_total(100);
  j.set_spec_yaml("model: {n_layer: 1, n_head: 1, n_embd: 8, vocab_size: 16, seq_len: 8}\n"
                  "data: {train: /nonexistent.bin}\n"
                  "train: {steps: 100, micro_batch: 1, lr: 1.0e-3}\n" +
                  more_yaml);
  const std::string id = *store.CreateJob(j);
  if (before_placing) before_placing();
  cluster.JobSubmitted();
  return id;
}

}  // namespace gantry::coordinator
