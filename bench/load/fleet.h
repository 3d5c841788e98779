// The control-plane load test's simulated workers: W workers attached as gantry-worker is
// (an Attach stream each, on its own connection), heartbeating, re-attaching with the
// worker's back-off, and running each placed rank with a stand-in trainer (step reports,
// checkpoints streamed to the shard servers, ends of job). It checks the placements as they
// come (none twice), and measures the coordinator's restart: which workers re-attached, and
// when the interrupted jobs stepped again.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "bench/load/control_plane.h"
#include "bench/load/recorder.h"
#include "bench/load/timer.h"
#include "common/executor.h"
#include "gantry/v1/coordinator.grpc.pb.h"

namespace gantry::load {

class AttachSession;  // a worker's attach stream
struct Run;           // a placed rank's stand-in trainer
struct SimWorker;     // one simulated gantry-worker

class Fleet {
 public:
  Fleet(const ControlPlaneOptions& o, const std::string& coordinator, Recorder* rec, Timer* timer);
  ~Fleet();

  // Attaches every worker, and starts its heartbeats (spread over the period).
  void Start();
  // Ends every stream and waits for their reactors; no re-attaching after it.
  void Shutdown();
  void StopUploads() {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }

  // The coordinator restarts: what re-attached after `since`, and which jobs step again.
  void MarkKill(Clock::time_point at);
  int Reattached() {
    std::lock_guard<std::mutex> l(mu_);
    return static_cast<int>(reattached_.size());
  }
  Clock::time_point LastReattach() {
    std::lock_guard<std::mutex> l(mu_);
    return last_reattach_;
  }
  std::set<std::string> Interrupted() {
    std::lock_guard<std::mutex> l(mu_);
    return interrupted_;
  }
  std::map<std::string, Clock::time_point> Resumed() {
    std::lock_guard<std::mutex> l(mu_);
    return resumed_;
  }
  // Waits until n workers are attached (n re-attached since the kill), or the timeout.
  bool WaitAttached(int n, double timeout_s) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)), [&] { return attached_ >= n; });
  }
  bool WaitReattached(int n, double timeout_s) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)),
                        [&] { return static_cast<int>(reattached_.size()) >= n; });
  }
  // Waits until the fleet's state changes (a worker attached, a step, a job's end) or the
  // timeout: the pace of the loops that sample it.
  void Nap(double timeout_s) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  }
  int Attached() {
    std::lock_guard<std::mutex> l(mu_);
    return attached_;
  }
  int64_t Completed() {
    std::lock_guard<std::mutex> l(mu_);
    return static_cast<int64_t>(completed_.size());
  }
  int64_t Placements() {
    std::lock_guard<std::mutex> l(mu_);
    return placements_;
  }
  std::vector<double> PlacementTimes() {  // seconds since the start, of each first placement of a job
    std::lock_guard<std::mutex> l(mu_);
    return placement_times_;
  }
  std::map<int, Clock::time_point> FirstPlaced() {
    std::lock_guard<std::mutex> l(mu_);
    return first_placed_;
  }
  std::vector<std::string> Violations() {
    std::lock_guard<std::mutex> l(mu_);
    return violations_;
  }
  int64_t RanTwice() {
    std::lock_guard<std::mutex> l(mu_);
    int64_t n = 0;
    for (const auto& [job, times] : completed_) n += times > 1;
    return n;
  }
  // A client saw the job SUCCEEDED: placing it after this is placing it twice.
  void SawSucceeded(const std::string& job) {
    std::lock_guard<std::mutex> l(mu_);
    seen_succeeded_.insert(job);
  }
  Clock::time_point t0() const { return t0_; }

  // Called by the sessions.
  void OnMessage(int index, uint64_t seq, const v1::CoordinatorMessage& m);
  void OnSessionDone(int index, AttachSession* s, const grpc::Status& status);

 private:
  void Attach(SimWorker& w);
  void Violation(const std::string& what) {  // mu_ held
    if (violations_.size() < 50) violations_.push_back(what);
  }
  // Sends m on session seq of worker w, if that session still runs.
  void Send(SimWorker& w, uint64_t seq, const v1::WorkerMessage& m);
  void ScheduleHeartbeat(SimWorker* w, Clock::time_point at);
  void OnAssign(SimWorker& w, uint64_t seq, const v1::Assignment& a);
  void Step(SimWorker* w, std::shared_ptr<Run> run);
  void Checkpoint(SimWorker* w, std::shared_ptr<Run> run);
  void Finish(SimWorker* w, std::shared_ptr<Run> run);
  void Begin(SimWorker* w, std::shared_ptr<Run> run);

  const ControlPlaneOptions o_;
  const std::string coordinator_;
  Recorder* rec_;
  Timer* timer_;
  Executor uploads_;
  const Clock::time_point t0_;
  std::vector<std::unique_ptr<SimWorker>> workers_;
  std::atomic<uint64_t> next_echo_{0};

  std::mutex mu_;
  std::condition_variable cv_, sessions_cv_;
  bool stopping_ = false, shut_ = false;
  int live_sessions_ = 0;
  int attached_ = 0;  // workers whose current session is registered
  // Placement checks.
  std::map<std::tuple<std::string, int64_t, int>, int> assigned_;  // (job, generation, rank) → worker index
  std::map<std::pair<std::string, int64_t>, std::set<int>> done_ranks_;
  std::map<std::string, int> completed_;  // job → generations run to their end
  std::set<std::string> seen_succeeded_;
  std::set<std::string> placed_jobs_;
  std::map<int, Clock::time_point> first_placed_;  // spec index → first assignment
  int64_t placements_ = 0;
  std::vector<double> placement_times_;
  std::vector<std::string> violations_;
  // The restart.
  bool killed_ = false;
  Clock::time_point kill_at_, last_reattach_;
  std::set<int> reattached_;
  std::set<std::string> interrupted_;
  std::map<std::string, Clock::time_point> resumed_;
};

}  // namespace gantry::load
