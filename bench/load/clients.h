// The control-plane load test's clients: SubmitJob at a fixed rate (open loop), ListJobs,
// GetJob and ListWorkers at theirs, and watchers following jobs with WatchJob, checking that
// each job is accepted once and that its events come in order.
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/load/control_plane.h"
#include "bench/load/recorder.h"
#include "bench/load/timer.h"
#include "bench/load/users.h"
#include "gantry/v1/coordinator.grpc.pb.h"

namespace gantry::load {

class Fleet;

// ---- Clients: unary calls at a fixed rate, each latency counted from when it was due.

class Clients {
 public:
  // users: with ControlPlaneOptions::users, the users that submit, list and get jobs (null:
  // every call as this process's channels call, the laptop's admin).
  Clients(const ControlPlaneOptions& o, const std::string& coordinator, Recorder* rec, Fleet* fleet,
          const Users* users = nullptr);
  ~Clients() { Stop(); }

  void Start();
  void Stop();
  int Acked() {
    std::lock_guard<std::mutex> l(mu_);
    return acked_;
  }
  std::vector<std::string> JobOf() {  // spec index → job id ("" while not accepted)
    std::lock_guard<std::mutex> l(mu_);
    return job_of_;
  }
  std::vector<Clock::time_point> SubmitTimes() {  // spec index → when its SubmitJob was due
    std::lock_guard<std::mutex> l(mu_);
    return submit_time_;
  }
  int64_t Watched() {
    std::lock_guard<std::mutex> l(mu_);
    return watched_;
  }
  std::pair<int64_t, int64_t> ListBytes() {
    std::lock_guard<std::mutex> l(mu_);
    return {list_bytes_, list_full_bytes_};
  }
  std::vector<std::string> Violations() {
    std::lock_guard<std::mutex> l(mu_);
    return violations_;
  }
  // From now on, specs whose SubmitJob failed UNAVAILABLE are submitted again: the
  // coordinator was down, and said so before it accepted them.
  void RetrySubmits() {
    {
      std::lock_guard<std::mutex> l(mu_);
      retry_ = true;
    }
    cv_.notify_all();
  }

 private:
  template <typename Req, typename Resp>
  struct Call {
    grpc::ClientContext ctx;
    Req req;
    Resp resp;
    Clock::time_point due;
  };
  void Begin() {
    std::lock_guard<std::mutex> l(mu_);
    ++in_flight_;
  }
  void End() {
    std::lock_guard<std::mutex> l(mu_);
    --in_flight_;
    cv_.notify_all();
  }
  void Violation(const std::string& what) {  // mu_ held
    if (violations_.size() < 50) violations_.push_back(what);
  }

  // SubmitJob at o_.submit_rate, open loop: spec i is due at start + i / rate.
  void Submitter();
  void Probe(double period_s, const std::function<void(Clock::time_point)>& call);
  // brief: the page `gantry jobs` asks for (its newest 50, no spec texts); else a page of
  // 1000 with every field, as `gantry jobs -o json` reads them (on a channel that takes its size).
  void ListJobs(Clock::time_point due, bool brief);
  std::string RandomJob(std::mt19937_64& rng);
  void GetJob(Clock::time_point due);
  void ListWorkers(Clock::time_point due);
  // Follows one job after another with WatchJob, from its first event to its end, checking
  // that the events come in order: seq 1, 2, ...; PENDING first; each state one the job may
  // enter from the one before; as many placements as SCHEDULED states; one terminal state,
  // last.
  void Watcher(int n);

  const ControlPlaneOptions o_;
  Recorder* rec_;
  Fleet* fleet_;
  std::unique_ptr<v1::Coordinator::Stub> submit_stub_, list_stub_, list_full_stub_, get_stub_, watch_stub_;
  std::vector<std::thread> threads_;
  std::mt19937_64 get_rng_{7};

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, retry_ = false;
  int in_flight_ = 0;
  int next_ = 0;  // specs submitted
  int acked_ = 0;
  std::deque<int> to_retry_;
  std::vector<Clock::time_point> submit_time_;
  std::vector<std::string> job_of_;  // spec index → job id
  const Users* users_;                // null: no users (the calls carry no token of their own)
  std::map<std::string, int> user_of_;  // job id → the user that submitted it (with users_)
  int64_t list_turn_ = 0;              // the user whose turn it is to list (with users_)
  // With users_: the user's token on the call (user k % users).
  void As(grpc::ClientContext* ctx, int64_t k) {
    if (users_ != nullptr) AsUser(ctx, users_->tokens[static_cast<size_t>(k % static_cast<int64_t>(users_->tokens.size()))]);
  }
  std::set<std::string> ids_;
  int64_t watched_ = 0;
  int64_t list_bytes_ = 0, list_full_bytes_ = 0;
  std::set<grpc::ClientContext*> watch_ctx_;
  std::vector<std::string> violations_;
};

}  // namespace gantry::load
