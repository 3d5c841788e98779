#include "bench/load/control_plane.h"

#include <grpcpp/grpcpp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/executor.h"
#include "common/file_util.h"
#include "common/grpc_util.h"
#include "common/security.h"
#include "gantry/v1/coordinator.grpc.pb.h"
#include "shardserver/client/shard_client.h"

namespace gantry::load {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// ---- Latencies, per method and phase.

enum Phase { kSteady = 0, kOutage = 1, kAfter = 2 };

class Recorder {
 public:
  void SetPhase(Phase p) {
    std::lock_guard<std::mutex> l(mu_);
    phase_ = p;
  }
  Phase phase() {
    std::lock_guard<std::mutex> l(mu_);
    return phase_;
  }
  void Add(const std::string& method, double seconds) {
    std::lock_guard<std::mutex> l(mu_);
    data_[phase_][method].push_back(seconds);
  }
  void Error(const std::string& method, const std::string& what) {
    std::lock_guard<std::mutex> l(mu_);
    ++errors_[phase_][method];
    if (phase_ != kOutage && first_error_[method].empty()) first_error_[method] = what;
  }
  std::vector<MethodStats> Stats(Phase p, double window_s) {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<MethodStats> out;
    std::set<std::string> methods;
    for (const auto& [m, v] : data_[p]) methods.insert(m);
    for (const auto& [m, n] : errors_[p]) methods.insert(m);
    for (const auto& m : methods) {
      MethodStats s;
      s.method = m;
      std::vector<double> v = data_[p][m];
      std::sort(v.begin(), v.end());
      s.calls = static_cast<int64_t>(v.size());
      s.errors = errors_[p][m];
      s.rate = window_s > 0 ? static_cast<double>(s.calls) / window_s : 0;
      auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))]; };
      if (!v.empty()) {
        s.p50_ms = at(0.50) * 1e3;
        s.p99_ms = at(0.99) * 1e3;
        s.max_ms = v.back() * 1e3;
      }
      out.push_back(s);
    }
    return out;
  }
  std::map<std::string, std::string> FirstErrors() {
    std::lock_guard<std::mutex> l(mu_);
    return first_error_;
  }

 private:
  std::mutex mu_;
  Phase phase_ = kSteady;
  std::map<std::string, std::vector<double>> data_[3];
  std::map<std::string, int64_t> errors_[3];
  std::map<std::string, std::string> first_error_;
};

// ---- Delayed work: one thread runs each function at its time (they must not block).

class Timer {
 public:
  Timer() : thread_([this] { Loop(); }) {}
  ~Timer() { Stop(); }
  void At(Clock::time_point t, std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) return;
      q_.push(Item{t, seq_++, std::move(fn)});
    }
    cv_.notify_one();
  }
  void After(std::chrono::milliseconds d, std::function<void()> fn) { At(Clock::now() + d, std::move(fn)); }
  // Drops what is pending and joins the thread.
  void Stop() {
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

 private:
  struct Item {
    Clock::time_point t;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Item& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  void Loop() {
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
  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> q_;
  uint64_t seq_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

// A channel of its own (its own TCP connection, as each gantry-worker process has): gRPC
// would otherwise share one connection among channels to the same address.
std::shared_ptr<grpc::Channel> OwnChannel(const std::string& address, int max_receive_bytes = 16 << 20) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_receive_bytes);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, ClientCredentials(), args);
}

// ---- What the stand-in trainers write: bytes that depend only on (job, step, file), so
// that a step written again after a restart is the same, and a read-back can be checked.

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}
std::string FileBytes(const std::string& job, int64_t step, const std::string& name, int n) {
  uint64_t x = Mix(std::hash<std::string>()(absl::StrCat(job, "/", step, "/", name)) | 1);
  std::string out(static_cast<size_t>(n), '\0');
  for (int i = 0; i < n; ++i) {
    if (i % 8 == 0) x = Mix(x + 0x9e3779b97f4a7c15ull);
    out[static_cast<size_t>(i)] = static_cast<char>(x >> (8 * (i % 8)));
  }
  return out;
}
std::string PartName(int rank, int slice, int slices) {
  return slices <= 1 ? absl::StrFormat("part-%05d.safetensors", rank)
                     : absl::StrFormat("part-%05d-%03d.safetensors", rank, slice);
}
std::vector<std::string> AllParts(int world, int slices) {
  std::vector<std::string> parts;
  for (int r = 0; r < world; ++r) {
    for (int s = 0; s < slices; ++s) parts.push_back(PartName(r, s, slices));
  }
  return parts;
}
std::string ManifestFile(const std::string& job, int64_t step, int world, int slices) {
  std::string m = absl::StrCat("{\"format\": \"gantry-load-1\", \"job\": \"", job, "\", \"step\": ", step, ", \"parts\": [");
  const auto parts = AllParts(world, slices);
  for (size_t i = 0; i < parts.size(); ++i) absl::StrAppend(&m, i ? ", " : "", "\"", parts[i], "\"");
  return m + "]}";
}
std::string ExpectedFile(const std::string& job, int64_t step, const std::string& name, int world, int slices,
                         int part_bytes) {
  if (name == "manifest.json") return ManifestFile(job, step, world, slices);
  if (name == "config.json") return "{\"stand_in\": true}";
  return FileBytes(job, step, name, part_bytes);
}

std::string JobSpec(int i, const ControlPlaneOptions& o) {
  const bool two = o.multi_rank_every > 0 && i % o.multi_rank_every == o.multi_rank_every - 1;
  return absl::StrCat("name: load-", i, "\n",
                      "model: {n_layer: 1, n_head: 1, n_embd: 8, vocab_size: 16, seq_len: 8}\n"
                      "data: {train: /nonexistent.bin}\n"
                      "train: {steps: ", o.steps, ", micro_batch: 1, lr: 1.0e-3}\n",
                      "checkpoint: {every: ", o.checkpoint_every, ", dir: /unused}\n",
                      two ? "parallel: {dp: 2}\n" : "");
}
// The job's index from the spec's name (load-<i>), or -1.
int SpecIndex(const std::string& yaml) {
  const auto at = yaml.find("name: load-");
  if (at == std::string::npos) return -1;
  int i = -1;
  const auto end = yaml.find_first_not_of("0123456789", at + 11);
  if (!absl::SimpleAtoi(yaml.substr(at + 11, end - at - 11), &i)) return -1;
  return i;
}

class Fleet;

// One attach stream, as gantry-worker's AttachOnce: registration first, then heartbeats,
// step reports, checkpoint parts and ends of job up; the worker id, assignments and
// cancels down. A reactor serves one call: re-attaching makes a new one.
class AttachSession : public grpc::ClientBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage> {
 public:
  AttachSession(Fleet* fleet, int worker, uint64_t seq) : fleet_(fleet), worker_(worker), seq_(seq) {}
  // Binds the call and queues the registration; StartCall() then starts it.
  void Prepare(v1::Coordinator::Stub* stub, const v1::Resources& r) {
    stub->async()->Attach(&ctx_, this);
    v1::WorkerMessage reg;
    *reg.mutable_register_() = r;
    Enqueue(reg);
    StartRead(&in_);
    AddHold();  // sends may come from other threads until the read side ends
  }
  // Queues m behind the writes in flight; false once the stream is over.
  bool Enqueue(const v1::WorkerMessage& m) {
    std::lock_guard<std::mutex> l(mu_);
    if (closed_) return false;
    out_.push_back(m);
    if (!writing_) {
      writing_ = true;
      StartWrite(&out_.front());
    }
    return true;
  }
  void Cancel() { ctx_.TryCancel(); }
  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> l(mu_);
    out_.pop_front();
    if (!ok) closed_ = true;
    if (!closed_ && !out_.empty()) {
      StartWrite(&out_.front());
    } else {
      writing_ = false;
      out_.clear();
    }
  }
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& s) override;
  uint64_t seq() const { return seq_; }

 private:
  Fleet* fleet_;
  const int worker_;
  const uint64_t seq_;
  grpc::ClientContext ctx_;
  v1::CoordinatorMessage in_;
  std::mutex mu_;
  std::deque<v1::WorkerMessage> out_;
  bool writing_ = false, closed_ = false;
};

// A placed rank's stand-in trainer.
struct Run {
  v1::Assignment a;
  uint64_t session = 0;  // the attach session it belongs to (its messages go on no other)
  Clock::time_point session_start;  // when that session began
  std::atomic<bool> stop{false};
  std::atomic<int64_t> step{0};  // the last step done (the timer's and the uploads' threads, one after the other)
};

struct SimWorker {
  int index = 0;
  v1::Resources resources;
  std::shared_ptr<v1::Coordinator::Stub> stub;
  std::mutex mu;
  AttachSession* session = nullptr;
  uint64_t session_seq = 0;
  Clock::time_point session_start;
  bool registered = false;  // this session has its worker id
  std::string id;
  int backoff_ms = 200;
  std::shared_ptr<Run> run;
  std::map<uint64_t, Clock::time_point> echoes;  // heartbeats waiting for their echo
};

class Fleet {
 public:
  Fleet(const ControlPlaneOptions& o, const std::string& coordinator, Recorder* rec, Timer* timer)
      : o_(o), coordinator_(coordinator), rec_(rec), timer_(timer), uploads_(std::max(1, o.upload_threads)),
        t0_(Clock::now()) {
    for (int i = 0; i < o.workers; ++i) {
      auto w = std::make_unique<SimWorker>();
      w->index = i;
      w->resources.set_host(absl::StrFormat("load-host-%05d", i));
      w->resources.set_device_kind("cpu");
      w->resources.set_device_count(1);
      w->resources.set_memory_bytes(int64_t{64} << 30);
      w->stub = v1::Coordinator::NewStub(OwnChannel(coordinator));
      workers_.push_back(std::move(w));
    }
  }
  ~Fleet() { Shutdown(); }

  // Attaches every worker, and starts its heartbeats (spread over the period).
  void Start() {
    for (auto& w : workers_) {
      Attach(*w);
      const auto offset = std::chrono::milliseconds(int64_t{o_.heartbeat_ms} * w->index / std::max(1, o_.workers));
      ScheduleHeartbeat(w.get(), Clock::now() + offset + std::chrono::milliseconds(o_.heartbeat_ms));
    }
  }
  // Ends every stream and waits for their reactors; no re-attaching after it.
  void Shutdown() {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (shut_) return;
      shut_ = true;
      stopping_ = true;
    }
    for (auto& w : workers_) {
      std::lock_guard<std::mutex> l(w->mu);
      if (w->run) w->run->stop = true;
      if (w->session) w->session->Cancel();
    }
    std::unique_lock<std::mutex> l(mu_);
    sessions_cv_.wait(l, [&] { return live_sessions_ == 0; });
  }
  void StopUploads() {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }

  // The coordinator restarts: what re-attached after `since`, and which jobs step again.
  void MarkKill(Clock::time_point at) {
    std::lock_guard<std::mutex> l(mu_);
    kill_at_ = at;
    killed_ = true;
    reattached_.clear();
    interrupted_.clear();
    resumed_.clear();
    for (auto& w : workers_) {
      std::lock_guard<std::mutex> wl(w->mu);
      if (w->run && !w->run->stop) interrupted_.insert(w->run->a.job_id());
    }
  }
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
  void Attach(SimWorker& w) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopping_) return;
      ++live_sessions_;
    }
    // The registration is queued before anything else can be (a heartbeat must not come
    // first), and the call starts once the session is where the other threads find it.
    std::lock_guard<std::mutex> l(w.mu);
    auto* s = new AttachSession(this, w.index, ++w.session_seq);
    s->Prepare(w.stub.get(), w.resources);
    w.session = s;
    w.registered = false;
    w.id.clear();
    w.echoes.clear();
    w.session_start = Clock::now();
    s->StartCall();  // reactions run on gRPC's threads, never inline here
  }
  void Violation(const std::string& what) {  // mu_ held
    if (violations_.size() < 50) violations_.push_back(what);
  }
  // Sends m on session seq of worker w, if that session still runs.
  void Send(SimWorker& w, uint64_t seq, const v1::WorkerMessage& m) {
    std::lock_guard<std::mutex> l(w.mu);
    if (w.session != nullptr && w.session_seq == seq) w.session->Enqueue(m);
  }
  void ScheduleHeartbeat(SimWorker* w, Clock::time_point at) {
    timer_->At(at, [this, w, at] {
      {
        std::lock_guard<std::mutex> l(w->mu);
        if (w->session != nullptr) {
          v1::WorkerMessage hb;
          auto* h = hb.mutable_heartbeat();
          h->set_time_unix_ms(NowUnixMs());
          const uint64_t echo = next_echo_.fetch_add(1) + 1;
          h->set_echo(echo);
          if (w->run && !w->run->stop) {  // as Session::FillHeartbeat
            h->set_job_id(w->run->a.job_id());
            h->set_generation(w->run->a.generation());
            auto* p = h->add_ranks();
            p->set_rank(w->run->a.rank());
            p->set_step(w->run->step);
          }
          if (w->echoes.size() < 64) w->echoes[echo] = Clock::now();
          w->session->Enqueue(hb);
        }
      }
      ScheduleHeartbeat(w, at + std::chrono::milliseconds(o_.heartbeat_ms));
    });
  }
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

void AttachSession::OnReadDone(bool ok) {
  if (!ok) {
    {
      std::lock_guard<std::mutex> l(mu_);
      closed_ = true;
    }
    RemoveHold();
    return;
  }
  fleet_->OnMessage(worker_, seq_, in_);
  StartRead(&in_);
}

void AttachSession::OnDone(const grpc::Status& s) {
  fleet_->OnSessionDone(worker_, this, s);
  delete this;
}

void Fleet::OnMessage(int index, uint64_t seq, const v1::CoordinatorMessage& m) {
  SimWorker& w = *workers_[static_cast<size_t>(index)];
  if (!m.worker_id().empty()) {
    double latency = 0;
    {
      std::lock_guard<std::mutex> l(w.mu);
      if (w.session_seq != seq) return;
      w.registered = true;
      w.id = m.worker_id();
      latency = Seconds(Clock::now() - w.session_start);
    }
    rec_->Add("Attach (register)", latency);
    std::lock_guard<std::mutex> l(mu_);
    ++attached_;
    if (killed_ && reattached_.insert(index).second) last_reattach_ = Clock::now();
    cv_.notify_all();
    return;
  }
  if (m.heartbeat_echo() != 0) {
    Clock::time_point sent;
    {
      std::lock_guard<std::mutex> l(w.mu);
      auto it = w.echoes.find(m.heartbeat_echo());
      if (it == w.echoes.end()) return;
      sent = it->second;
      w.echoes.erase(it);
    }
    rec_->Add("Heartbeat", Seconds(Clock::now() - sent));
    return;
  }
  if (m.has_assign()) {
    OnAssign(w, seq, m.assign());
    return;
  }
  // restart, cancel, abort: this placement is over for this worker.
  const std::string& job = !m.restart_job_id().empty() ? m.restart_job_id()
                           : !m.cancel_job_id().empty() ? m.cancel_job_id()
                                                        : m.abort_job_id();
  std::shared_ptr<Run> run;
  {
    std::lock_guard<std::mutex> l(w.mu);
    if (!w.run || w.run->a.job_id() != job) return;
    run = std::move(w.run);
    run->stop = true;
  }
  // As Session::Run after Train returned cancelled.
  v1::WorkerMessage done;
  auto* d = done.mutable_done();
  d->set_job_id(run->a.job_id());
  d->set_generation(run->a.generation());
  d->set_rank(run->a.rank());
  d->set_ok(false);
  d->set_error("cancelled");
  d->set_code(static_cast<int>(absl::StatusCode::kCancelled));
  Send(w, seq, done);
}

void Fleet::OnSessionDone(int index, AttachSession* s, const grpc::Status&) {
  SimWorker& w = *workers_[static_cast<size_t>(index)];
  bool reattach = false;
  int wait_ms = 0;
  bool was_registered = false;
  {
    std::lock_guard<std::mutex> l(w.mu);
    if (w.session == s) {
      w.session = nullptr;
      was_registered = w.registered;
      w.registered = false;
      if (w.run) {  // the coordinator is gone: this generation of the job is over here
        w.run->stop = true;
        w.run.reset();
      }
      // gantry-worker's back-off: 200 ms, doubling to 5 s; back to 200 ms after a session
      // that lasted 10 s.
      if (Clock::now() - w.session_start > std::chrono::seconds(10)) w.backoff_ms = 200;
      wait_ms = w.backoff_ms;
      w.backoff_ms = std::min(w.backoff_ms * 2, 5000);
      reattach = true;
    }
  }
  std::lock_guard<std::mutex> l(mu_);
  if (was_registered) --attached_;
  --live_sessions_;
  if (reattach && !stopping_) {
    timer_->After(std::chrono::milliseconds(wait_ms), [this, &w] { Attach(w); });
  }
  sessions_cv_.notify_all();
  cv_.notify_all();
}

void Fleet::OnAssign(SimWorker& w, uint64_t seq, const v1::Assignment& a) {
  auto run = std::make_shared<Run>();
  run->a = a;
  run->session = seq;
  {
    std::lock_guard<std::mutex> l(w.mu);
    run->session_start = w.session_start;
  }
  const int index = SpecIndex(a.spec_yaml());
  {
    std::lock_guard<std::mutex> l(mu_);
    const auto key = std::make_tuple(a.job_id(), a.generation(), a.rank());
    auto [it, fresh] = assigned_.emplace(key, w.index);
    if (!fresh) {
      Violation(absl::StrCat("placed twice: job ", a.job_id(), " generation ", a.generation(), " rank ", a.rank(),
                             " on workers ", it->second, " and ", w.index));
    }
    if (seen_succeeded_.count(a.job_id())) {
      Violation(absl::StrCat("job ", a.job_id(), " placed (generation ", a.generation(),
                             ") after a client saw it SUCCEEDED"));
    }
    if (a.rank() == 0 && placed_jobs_.insert(a.job_id()).second) {
      ++placements_;
      placement_times_.push_back(Seconds(Clock::now() - t0_));
      if (index >= 0) first_placed_[index] = Clock::now();
    }
  }
  {
    std::lock_guard<std::mutex> l(w.mu);
    if (w.session_seq != seq) return;
    if (w.run && !w.run->stop) {
      std::lock_guard<std::mutex> fl(mu_);
      Violation(absl::StrCat("worker ", w.id, " given job ", a.job_id(), " while it runs ", w.run->a.job_id()));
    }
    w.run = run;
  }
  if (a.resume_step() > 0) {
    // As Session::FindResumePoint: the checkpoint to resume from must be whole on the servers.
    uploads_.Post([this, wp = &w, run] {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (stopping_) return;
      }
      const std::vector<std::string> servers(run->a.shard_servers().begin(), run->a.shard_servers().end());
      std::vector<std::string> unreachable;
      const auto stored = shardserver::ListStoredCheckpoints(servers, run->a.resume_job_id(), &unreachable);
      bool found = false;
      for (const auto& c : stored) found = found || c.step == run->a.resume_step();
      if (!found && unreachable.empty()) {
        std::lock_guard<std::mutex> l(mu_);
        Violation(absl::StrCat("job ", run->a.job_id(), " generation ", run->a.generation(), " told to resume from step ",
                               run->a.resume_step(), ", which is not whole on the shard servers"));
      }
      run->step = run->a.resume_step();
      Begin(wp, run);
    });
    return;
  }
  Begin(&w, run);
}

void Fleet::Begin(SimWorker* w, std::shared_ptr<Run> run) {
  if (run->step >= o_.steps) {  // resumed from its last step's checkpoint: nothing left to run
    Finish(w, run);
    return;
  }
  timer_->After(std::chrono::milliseconds(o_.step_ms), [this, w, run] { Step(w, run); });
}

void Fleet::Step(SimWorker* w, std::shared_ptr<Run> run) {
  if (run->stop) return;
  ++run->step;
  const v1::Assignment& a = run->a;
  if (a.rank() == 0) {  // rank 0 speaks for the group, as Session's on_step
    v1::WorkerMessage m;
    auto* u = m.mutable_step();
    u->set_job_id(a.job_id());
    u->set_generation(a.generation());
    u->set_rank(a.rank());
    auto* r = u->mutable_report();
    r->set_step(run->step);
    r->set_loss(5.0f / static_cast<float>(run->step));
    r->set_step_seconds(o_.step_ms / 1000.0);
    r->set_compute_seconds(o_.step_ms / 1000.0);
    Send(*w, run->session, m);
    std::lock_guard<std::mutex> l(mu_);
    if (killed_ && run->session_start > kill_at_ && !resumed_.count(a.job_id())) resumed_[a.job_id()] = Clock::now();
    cv_.notify_all();
  }
  if (run->step % o_.checkpoint_every == 0) {
    uploads_.Post([this, w, run] { Checkpoint(w, run); });
  } else {
    Begin(w, run);  // the next step, or the end
  }
}

void Fleet::Checkpoint(SimWorker* w, std::shared_ptr<Run> run) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;
  }
  if (run->stop) return;
  const v1::Assignment& a = run->a;
  // This rank's files, each slice on its server (the partition map), manifest and config
  // with slice 0: as Session's checkpoint hook.
  std::vector<std::string> slice_server;
  for (const auto& r : a.param_ranges()) slice_server.push_back(r.shard_server());
  if (slice_server.empty() && a.shard_servers_size() > 0) slice_server.push_back(a.shard_servers(0));
  if (slice_server.empty()) {
    std::lock_guard<std::mutex> l(mu_);
    Violation(absl::StrCat("job ", a.job_id(), " placed without a shard server"));
    return;
  }
  const int slices = static_cast<int>(slice_server.size());
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> by_server;
  for (int s = 0; s < slices; ++s) {
    const std::string name = PartName(a.rank(), s, slices);
    by_server[slice_server[static_cast<size_t>(s)]].emplace_back(name, FileBytes(a.job_id(), run->step, name, o_.part_bytes));
  }
  std::string manifest;
  if (a.rank() == 0) {
    manifest = ManifestFile(a.job_id(), run->step, a.world_size(), slices);
    by_server[slice_server[0]].emplace_back("manifest.json", manifest);
    by_server[slice_server[0]].emplace_back("config.json", ExpectedFile(a.job_id(), run->step, "config.json", 1, 1, 0));
  }
  v1::WorkerMessage m;
  auto* p = m.mutable_checkpoint_part();
  int64_t bytes = 0;
  for (const auto& [server, files] : by_server) {
    std::vector<std::unique_ptr<StringSource>> own;
    std::vector<std::pair<std::string, const ByteSource*>> sources;
    for (const auto& [name, data] : files) {
      own.push_back(std::make_unique<StringSource>(data));
      sources.emplace_back(name, own.back().get());
      auto* f = p->add_files();
      f->set_name(name);
      f->set_shard_server(server);
    }
    const auto t = Clock::now();
    auto n = shardserver::UploadSources(server, a.job_id(), run->step, sources);
    if (!n.ok()) {
      rec_->Error("shard WriteChunks", std::string(n.status().message()));
      std::lock_guard<std::mutex> l(mu_);
      if (!run->stop && !killed_) Violation(absl::StrCat("job ", a.job_id(), ": upload: ", n.status().message()));
      return;  // as a rank whose upload failed: its job does not go on here
    }
    rec_->Add("shard WriteChunks", Seconds(Clock::now() - t));
    bytes += *n;
  }
  p->set_job_id(a.job_id());
  p->set_generation(a.generation());
  p->set_rank(a.rank());
  p->set_step(run->step);
  p->set_bytes(bytes);
  if (a.rank() == 0) {  // the manifest with job and generation, as the session sends it
    std::string sent = manifest;
    sent.insert(sent.size() - 1, absl::StrCat(", \"job_id\": \"", a.job_id(), "\", \"generation\": ", a.generation()));
    p->set_manifest_json(sent);
  }
  if (run->stop) return;
  Send(*w, run->session, m);
  Begin(w, run);  // the next step, or the end
}

void Fleet::Finish(SimWorker* w, std::shared_ptr<Run> run) {
  if (run->stop) return;
  const v1::Assignment& a = run->a;
  {
    std::lock_guard<std::mutex> l(w->mu);
    if (w->run == run) w->run.reset();
  }
  v1::WorkerMessage m;
  auto* d = m.mutable_done();
  d->set_job_id(a.job_id());
  d->set_generation(a.generation());
  d->set_rank(a.rank());
  d->set_ok(true);
  Send(*w, run->session, m);
  std::lock_guard<std::mutex> l(mu_);
  auto& done = done_ranks_[{a.job_id(), a.generation()}];
  done.insert(a.rank());
  if (static_cast<int>(done.size()) == a.world_size()) ++completed_[a.job_id()];
  cv_.notify_all();
}

// ---- Clients: unary calls at a fixed rate, each latency counted from when it was due.

class Clients {
 public:
  Clients(const ControlPlaneOptions& o, const std::string& coordinator, Recorder* rec, Fleet* fleet)
      : o_(o), rec_(rec), fleet_(fleet),
        submit_stub_(v1::Coordinator::NewStub(OwnChannel(coordinator))),
        list_stub_(v1::Coordinator::NewStub(OwnChannel(coordinator))),
        list_full_stub_(v1::Coordinator::NewStub(OwnChannel(coordinator, 1 << 30))),
        get_stub_(v1::Coordinator::NewStub(OwnChannel(coordinator))),
        watch_stub_(v1::Coordinator::NewStub(OwnChannel(coordinator))) {
    submit_time_.resize(static_cast<size_t>(o.jobs));
    job_of_.resize(static_cast<size_t>(o.jobs));
  }
  ~Clients() { Stop(); }

  void Start() {
    threads_.emplace_back([this] { Submitter(); });
    threads_.emplace_back([this] { Probe(o_.list_jobs_period_s, [this](Clock::time_point due) { ListJobs(due, true); }); });
    threads_.emplace_back(
        [this] { Probe(o_.list_jobs_full_period_s, [this](Clock::time_point due) { ListJobs(due, false); }); });
    threads_.emplace_back([this] { Probe(o_.get_job_period_s, [this](Clock::time_point due) { GetJob(due); }); });
    threads_.emplace_back([this] { Probe(o_.list_workers_period_s, [this](Clock::time_point due) { ListWorkers(due); }); });
    for (int i = 0; i < o_.watchers; ++i) threads_.emplace_back([this, i] { Watcher(i); });
  }
  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) return;
      stop_ = true;
      for (auto* c : watch_ctx_) c->TryCancel();
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return in_flight_ == 0; });  // every call has a deadline
  }
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
  void Submitter() {
    auto start = Clock::now();
    const auto period = std::chrono::duration<double>(1.0 / o_.submit_rate);
    for (int64_t k = 0;; ++k) {
      const auto due = start + std::chrono::duration_cast<Clock::duration>(period * static_cast<double>(k));
      int i = -1;
      {
        std::unique_lock<std::mutex> l(mu_);
        if (cv_.wait_until(l, due, [&] { return stop_; })) return;  // pacing: the call's time, or the stop
        if (next_ < o_.jobs) {
          i = next_++;
        } else if (retry_ && !to_retry_.empty()) {
          i = to_retry_.front();
          to_retry_.pop_front();
        } else {
          // All submitted: wait for a spec to submit again (a refusal during the restart).
          cv_.wait(l, [&] { return stop_ || (retry_ && !to_retry_.empty()); });
          if (stop_) return;
          start = Clock::now();
          k = -1;
          continue;
        }
        submit_time_[static_cast<size_t>(i)] = due;
      }
      auto* c = new Call<v1::SubmitJobRequest, v1::SubmitJobResponse>;
      c->due = due;
      c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      c->req.set_spec_yaml(JobSpec(i, o_));
      Begin();
      submit_stub_->async()->SubmitJob(&c->ctx, &c->req, &c->resp, [this, c, i](grpc::Status s) {
        const double secs = Seconds(Clock::now() - c->due);
        if (s.ok()) {
          rec_->Add("SubmitJob", secs);
          std::lock_guard<std::mutex> l(mu_);
          if (!job_of_[static_cast<size_t>(i)].empty()) {
            Violation(absl::StrCat("spec load-", i, " accepted twice: ", job_of_[static_cast<size_t>(i)], " and ",
                                   c->resp.job_id()));
          }
          if (!ids_.insert(c->resp.job_id()).second) {
            Violation(absl::StrCat("SubmitJob answered job id ", c->resp.job_id(), " twice"));
          }
          job_of_[static_cast<size_t>(i)] = c->resp.job_id();
          ++acked_;
        } else {
          rec_->Error("SubmitJob", s.error_message());
          std::lock_guard<std::mutex> l(mu_);
          // UNAVAILABLE: the call reached no coordinator, no job was made. Anything else (a
          // deadline) may have made one, and submitting again would make a second.
          if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
            to_retry_.push_back(i);
          } else {
            Violation(absl::StrCat("SubmitJob of load-", i, ": ", s.error_message()));
          }
        }
        delete c;
        End();
        cv_.notify_all();
      });
    }
  }

  void Probe(double period_s, const std::function<void(Clock::time_point)>& call) {
    if (period_s <= 0) return;
    const auto start = Clock::now();
    const auto period = std::chrono::duration<double>(period_s);
    for (int64_t k = 1;; ++k) {
      const auto due = start + std::chrono::duration_cast<Clock::duration>(period * static_cast<double>(k));
      {
        std::unique_lock<std::mutex> l(mu_);
        if (cv_.wait_until(l, due, [&] { return stop_; })) return;
      }
      call(due);
    }
  }

  // brief: as `gantry jobs` lists (no spec texts); else every field, as `gantry jobs -o json`
  // (on a channel that takes its size).
  void ListJobs(Clock::time_point due, bool brief) {
    auto* c = new Call<v1::ListJobsRequest, v1::ListJobsResponse>;
    c->due = due;
    c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    c->req.set_brief(brief);
    Begin();
    (brief ? list_stub_ : list_full_stub_)->async()->ListJobs(&c->ctx, &c->req, &c->resp, [this, c, brief](grpc::Status s) {
      const double secs = Seconds(Clock::now() - c->due);
      const std::string method = brief ? "ListJobs" : "ListJobs (full)";
      if (s.ok()) {
        rec_->Add(method, secs);
        const int64_t bytes = static_cast<int64_t>(c->resp.ByteSizeLong());
        for (const auto& j : c->resp.jobs()) {
          if (j.state() == v1::SUCCEEDED) fleet_->SawSucceeded(j.id());
        }
        std::lock_guard<std::mutex> l(mu_);
        int64_t& most = brief ? list_bytes_ : list_full_bytes_;
        most = std::max(most, bytes);
      } else {
        rec_->Error(method, s.error_message());
      }
      delete c;
      End();
    });
  }

  std::string RandomJob(std::mt19937_64& rng) {
    std::lock_guard<std::mutex> l(mu_);
    if (acked_ == 0) return "";
    // Among the most recent specs submitted: those are the ones still moving.
    for (int tries = 0; tries < 20; ++tries) {
      const int hi = next_;
      const int lo = std::max(0, hi - 2 * std::max(1, o_.workers));
      const int i = lo + static_cast<int>(rng() % static_cast<uint64_t>(std::max(1, hi - lo)));
      if (i < o_.jobs && !job_of_[static_cast<size_t>(i)].empty()) return job_of_[static_cast<size_t>(i)];
    }
    return *ids_.begin();
  }

  void GetJob(Clock::time_point due) {
    const std::string job = RandomJob(get_rng_);
    if (job.empty()) return;
    auto* c = new Call<v1::GetJobRequest, v1::Job>;
    c->due = due;
    c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    c->req.set_job_id(job);
    Begin();
    get_stub_->async()->GetJob(&c->ctx, &c->req, &c->resp, [this, c](grpc::Status s) {
      if (s.ok()) {
        rec_->Add("GetJob", Seconds(Clock::now() - c->due));
        if (c->resp.state() == v1::SUCCEEDED) fleet_->SawSucceeded(c->resp.id());
      } else {
        rec_->Error("GetJob", s.error_message());
      }
      delete c;
      End();
    });
  }

  void ListWorkers(Clock::time_point due) {
    auto* c = new Call<v1::ListWorkersRequest, v1::ListWorkersResponse>;
    c->due = due;
    c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    Begin();
    get_stub_->async()->ListWorkers(&c->ctx, &c->req, &c->resp, [this, c](grpc::Status s) {
      if (s.ok()) {
        rec_->Add("ListWorkers", Seconds(Clock::now() - c->due));
      } else {
        rec_->Error("ListWorkers", s.error_message());
      }
      delete c;
      End();
    });
  }

  // Follows one job after another with WatchJob, from its first event to its end, checking
  // that the events come in order: seq 1, 2, ...; PENDING first; each state one the job may
  // enter from the one before; as many placements as SCHEDULED states; one terminal state,
  // last.
  void Watcher(int n) {
    std::mt19937_64 rng(1000 + n);
    for (;;) {
      {
        std::unique_lock<std::mutex> l(mu_);
        if (stop_) return;
        if (acked_ == 0) {
          cv_.wait_for(l, std::chrono::milliseconds(100));  // wakes on a submit's answer, or the stop
          continue;
        }
      }
      const std::string job = RandomJob(rng);
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
      {
        std::lock_guard<std::mutex> l(mu_);
        if (stop_) return;
        watch_ctx_.insert(&ctx);
      }
      v1::WatchJobRequest req;
      req.set_job_id(job);
      const auto t0 = Clock::now();
      auto reader = watch_stub_->WatchJob(&ctx, req);
      v1::JobEvent e;
      std::vector<v1::JobEvent> events;
      while (reader->Read(&e)) {
        if (events.empty()) rec_->Add("WatchJob (first event)", Seconds(Clock::now() - t0));
        events.push_back(e);
      }
      const grpc::Status s = reader->Finish();
      {
        std::lock_guard<std::mutex> l(mu_);
        watch_ctx_.erase(&ctx);
        if (stop_) return;
      }
      if (!s.ok()) {
        rec_->Error("WatchJob (first event)", s.error_message());
        // The coordinator went away (the restart): this watch proves nothing. Again after a
        // pause, as a person would, rather than in a tight loop while it is down.
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait_for(l, std::chrono::milliseconds(200), [&] { return stop_; });
        continue;
      }
      std::string bad;
      v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
      int placed = 0, scheduled = 0, terminal = 0;
      for (size_t k = 0; k < events.size() && bad.empty(); ++k) {
        const auto& ev = events[k];
        if (ev.seq() != static_cast<int64_t>(k) + 1) bad = absl::StrCat("event ", k + 1, " has seq ", ev.seq());
        if (ev.has_message() && ev.message().rfind("placed: ", 0) == 0) ++placed;
        if (!ev.has_state()) continue;
        const v1::JobState to = ev.state();
        if (terminal > 0) bad = absl::StrCat("state ", v1::JobState_Name(to), " after the end");
        if (k == 0 && to != v1::PENDING) bad = "first event is not PENDING";
        if (k > 0 && state == v1::JOB_STATE_UNSPECIFIED) bad = "a state event before PENDING";
        const bool allowed = (state == v1::JOB_STATE_UNSPECIFIED && to == v1::PENDING) ||
                             (state == v1::PENDING && to == v1::SCHEDULED) ||
                             (state == v1::SCHEDULED && (to == v1::RUNNING || to == v1::SUCCEEDED || to == v1::RESTARTING)) ||
                             (state == v1::RUNNING && (to == v1::SUCCEEDED || to == v1::RESTARTING)) ||
                             (state == v1::RESTARTING && to == v1::SCHEDULED) || to == v1::FAILED || to == v1::CANCELLED;
        if (!allowed) bad = absl::StrCat(v1::JobState_Name(state), " -> ", v1::JobState_Name(to));
        scheduled += to == v1::SCHEDULED;
        terminal += to == v1::SUCCEEDED || to == v1::FAILED || to == v1::CANCELLED;
        state = to;
      }
      if (bad.empty() && terminal != 1) bad = absl::StrCat(terminal, " terminal states");
      if (bad.empty() && state != v1::SUCCEEDED) bad = absl::StrCat("ended ", v1::JobState_Name(state));
      if (bad.empty() && placed != scheduled) bad = absl::StrCat(placed, " placements for ", scheduled, " SCHEDULED states");
      if (state == v1::SUCCEEDED) fleet_->SawSucceeded(job);
      std::unique_lock<std::mutex> l(mu_);
      ++watched_;
      if (!bad.empty()) Violation(absl::StrCat("WatchJob ", job, ": ", bad));
      // A person's pace between two watches (a job that ended long ago replays at once).
      cv_.wait_for(l, std::chrono::milliseconds(50), [&] { return stop_; });
    }
  }

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
  std::set<std::string> ids_;
  int64_t watched_ = 0;
  int64_t list_bytes_ = 0, list_full_bytes_ = 0;
  std::set<grpc::ClientContext*> watch_ctx_;
  std::vector<std::string> violations_;
};

std::string Mb(int64_t bytes) { return absl::StrFormat("%.1f MB", static_cast<double>(bytes) / 1e6); }

}  // namespace

absl::StatusOr<ControlPlaneReport> RunControlPlaneLoad(const ControlPlaneOptions& o) {
  ControlPlaneReport rep;
  rep.options = o;
  if (o.workers < 1 || o.jobs < 1 || o.shard_servers < 1 || o.steps < 1 || o.checkpoint_every < 1 ||
      o.submit_rate <= 0 || o.part_bytes < 1) {
    return absl::InvalidArgumentError("workers, jobs, shard servers, steps, checkpoint_every, submit_rate and "
                                      "part_bytes must be positive");
  }
  // As the daemons do (common/daemon.cc): this process's gRPC takes Abseil mutexes on every
  // message of 1,000 streams, and it shares the machine with the coordinator.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // A stream and a connection per worker, in this process and in the coordinator: raise the
  // descriptor limit to its ceiling (the daemons inherit it).
  struct rlimit nofile;
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  std::string dir = o.dir;
  const bool own_dir = dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/control_plane_load.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return absl::UnavailableError("mkdtemp failed");
    dir = tmpl;
  }
  struct Cleanup {
    std::vector<DaemonProcess>* daemons;
    std::string dir;
    bool remove;
    ~Cleanup() {
      for (auto& d : *daemons) KillDaemon(d);
      std::error_code ec;
      if (remove) fs::remove_all(dir, ec);
    }
  };
  std::vector<DaemonProcess> daemons;  // [0] the coordinator, then the shard servers
  Cleanup cleanup{&daemons, dir, own_dir};
  const auto t_start = Clock::now();

  const std::string coord_dir = (fs::path(dir) / "coordinator").string();
  auto coordinator_args = [&](int port) {
    return std::vector<std::string>{"--listen", absl::StrCat("127.0.0.1:", port), "--metrics_listen", "127.0.0.1:0",
                                    "--data_dir", coord_dir, "--worker_timeout_ms", std::to_string(o.worker_timeout_ms)};
  };
  {
    auto d = SpawnDaemon("coordinator", o.coordinator_bin, coordinator_args(0), dir);
    if (!d.ok()) return d.status();
    daemons.push_back(*d);
    if (auto s = WaitReady(daemons[0]); !s.ok()) return s;
  }
  const std::string coord_addr = daemons[0].address();
  for (int s = 0; s < o.shard_servers; ++s) {
    const std::string name = absl::StrCat("shardserver", s);
    auto d = SpawnDaemon(name, o.shardserver_bin,
                         {"--listen", "127.0.0.1:0", "--metrics_listen", "127.0.0.1:0", "--data_dir",
                          (fs::path(dir) / name).string(), "--coordinator", coord_addr},
                         dir);
    if (!d.ok()) return d.status();
    daemons.push_back(*d);
  }
  for (size_t i = 1; i < daemons.size(); ++i) {
    if (auto s = WaitReady(daemons[i]); !s.ok()) return s;
  }
  // Jobs are placed once the shard servers have registered (else they would wait out the
  // coordinator's grace period, or run without checkpoints).
  {
    auto stub = v1::Coordinator::NewStub(MakeChannel(coord_addr));
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    for (;;) {
      v1::ListShardServersResponse resp;
      auto ctx = ContextWithDeadline(5);
      if (stub->ListShardServers(ctx.get(), v1::ListShardServersRequest(), &resp).ok() &&
          resp.shard_servers_size() == o.shard_servers) {
        break;
      }
      if (Clock::now() > deadline) return absl::DeadlineExceededError("the shard servers did not register within 60 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling for a state, with a deadline
    }
  }

  Recorder rec;
  Timer timer;
  auto fleet = std::make_unique<Fleet>(o, coord_addr, &rec, &timer);
  auto clients = std::make_unique<Clients>(o, coord_addr, &rec, fleet.get());
  // The coordinator's view of the jobs, for the end of the run (not timed): a listing may be
  // larger than a CLI's channel takes.
  auto checker = v1::Coordinator::NewStub(MakeChannel(coord_addr, 1 << 30));
  auto succeeded = [&]() -> absl::StatusOr<int64_t> {
    v1::ListJobsRequest req;
    req.set_state(v1::SUCCEEDED);
    req.set_brief(true);
    v1::ListJobsResponse resp;
    auto ctx = ContextWithDeadline(60);
    if (auto s = checker->ListJobs(ctx.get(), req, &resp); !s.ok()) return FromGrpc(s);
    return static_cast<int64_t>(resp.jobs_size());
  };
  auto last_progress = Clock::now();
  auto progress = [&](const char* what, bool now = false) {
    if (!o.progress || (!now && Clock::now() - last_progress < std::chrono::seconds(5))) return;
    last_progress = Clock::now();
    std::fprintf(stderr, "[%6.1f s] %s: %d attached, %d submitted, %lld placed, %lld run; coordinator rss %s\n",
                 Seconds(Clock::now() - t_start), what, fleet->Attached(), clients->Acked(),
                 static_cast<long long>(fleet->Placements()), static_cast<long long>(fleet->Completed()),
                 daemons[0].pid > 0 ? Mb(MemoryOf(daemons[0].pid).rss).c_str() : "-");
  };
  auto cpu = [&] {
    double shard = 0;
    for (size_t i = 1; i < daemons.size(); ++i) shard += CpuSecondsOf(daemons[i].pid);
    return std::make_tuple(CpuSecondsOf(daemons[0].pid), CpuSecondsOf(::getpid()), shard);
  };

  // The fleet attaches, then the load begins.
  fleet->Start();
  if (!fleet->WaitAttached(o.workers, 120)) {
    return absl::DeadlineExceededError(absl::StrCat("only ", fleet->Attached(), " of ", o.workers,
                                                    " workers attached within 120 s"));
  }
  const auto cpu0 = cpu();
  const auto t_load = Clock::now();
  clients->Start();

  // The steady phase: until every job is submitted and restart_at of them have run.
  const double target = o.restart_at > 0 ? o.restart_at : 1.0;
  const int64_t want_done = std::min<int64_t>(o.jobs, static_cast<int64_t>(std::ceil(target * o.jobs)));
  int64_t max_queued = 0;
  const auto phase_deadline = t_load + std::chrono::seconds(120) +
                              std::chrono::milliseconds(static_cast<int64_t>(20000.0 * o.jobs / o.submit_rate));
  for (;;) {
    const int acked = clients->Acked();
    max_queued = std::max<int64_t>(max_queued, acked - fleet->Placements());
    if (acked >= o.jobs && fleet->Completed() >= want_done) break;
    if (Clock::now() > phase_deadline) {
      return absl::DeadlineExceededError(absl::StrCat("steady phase: ", acked, " of ", o.jobs, " jobs submitted, ",
                                                      fleet->Completed(), " run within its deadline; coordinator log:\n",
                                                      Tail(daemons[0].log)));
    }
    progress("steady");
    fleet->Nap(0.05);  // sampling the queue's length, and the phase's end
  }
  const auto t_steady_end = Clock::now();
  rep.steady_seconds = Seconds(t_steady_end - t_load);
  {
    const auto cpu1 = cpu();
    rep.coordinator_cpu_seconds = std::get<0>(cpu1) - std::get<0>(cpu0);
    rep.fleet_cpu_seconds = std::get<1>(cpu1) - std::get<1>(cpu0);
    rep.shard_cpu_seconds = std::get<2>(cpu1) - std::get<2>(cpu0);
  }
  rep.steady = rec.Stats(kSteady, rep.steady_seconds);
  rep.placements = fleet->Placements();
  rep.placements_per_second = static_cast<double>(rep.placements) / rep.steady_seconds;
  {
    auto times = fleet->PlacementTimes();
    std::sort(times.begin(), times.end());
    const double window = std::min(5.0, rep.steady_seconds);
    size_t lo = 0;
    for (size_t hi = 0; hi < times.size(); ++hi) {
      while (times[hi] - times[lo] > window) ++lo;
      rep.peak_placements_per_second =
          std::max(rep.peak_placements_per_second, static_cast<double>(hi - lo + 1) / window);
    }
    std::vector<double> waits;
    const auto submitted = clients->SubmitTimes();
    for (const auto& [i, at] : fleet->FirstPlaced()) waits.push_back(Seconds(at - submitted[static_cast<size_t>(i)]));
    std::sort(waits.begin(), waits.end());
    if (!waits.empty()) {
      rep.submit_to_placed_p50_ms = waits[waits.size() / 2] * 1e3;
      rep.submit_to_placed_p99_ms = waits[std::min(waits.size() - 1, waits.size() * 99 / 100)] * 1e3;
    }
  }
  rep.max_queued = max_queued;
  {
    std::ifstream load("/proc/loadavg");  // size 0 to stat(): read as a stream
    load >> rep.machine_load;
  }
  rep.coordinator_memory = MemoryOf(daemons[0].pid);
  rep.rocksdb_bytes = DirBytes(coord_dir + "/db");
  progress("steady phase over", true);

  double t_after_start = 0;
  if (o.restart_at > 0) {
    // The coordinator crashes with its state, and comes back on its port.
    rec.SetPhase(kOutage);
    clients->RetrySubmits();
    const auto t_kill = Clock::now();
    fleet->MarkKill(t_kill);
    const int port = daemons[0].port;
    KillDaemon(daemons[0]);
    auto d = SpawnDaemon("coordinator", o.coordinator_bin, coordinator_args(port), dir);
    if (!d.ok()) return d.status();
    daemons[0] = *d;
    const auto t_spawn = Clock::now();
    if (auto s = WaitReady(daemons[0]); !s.ok()) return s;
    if (daemons[0].port != port) return absl::InternalError("the coordinator came back on another port");
    rep.restarted = true;
    rep.ready_s = Seconds(Clock::now() - t_kill);
    rec.SetPhase(kAfter);
    t_after_start = Seconds(Clock::now() - t_start);
    if (!fleet->WaitReattached(o.workers, 120)) {
      return absl::DeadlineExceededError(absl::StrCat("only ", fleet->Reattached(), " of ", o.workers,
                                                      " workers re-attached within 120 s of the restart"));
    }
    const auto t_all = fleet->LastReattach();
    rep.reattached_s = Seconds(t_all - t_spawn);
    rep.reattached_from_kill_s = Seconds(t_all - t_kill);
    progress("re-attached", true);
    const auto interrupted = fleet->Interrupted();
    rep.interrupted_jobs = static_cast<int>(interrupted.size());
    const auto resume_deadline = Clock::now() + std::chrono::seconds(120);
    for (;;) {
      const auto resumed = fleet->Resumed();
      int n = 0;
      Clock::time_point last = t_kill;
      for (const auto& job : interrupted) {
        auto it = resumed.find(job);
        if (it == resumed.end()) continue;
        ++n;
        last = std::max(last, it->second);
      }
      if (!resumed.empty()) {
        Clock::time_point any = Clock::time_point::max();
        for (const auto& [job, at] : resumed) any = std::min(any, at);
        rep.first_resumed_s = Seconds(any - t_kill);
      }
      if (n == static_cast<int>(interrupted.size())) {
        rep.all_resumed_s = Seconds(last - t_kill);
        break;
      }
      if (Clock::now() > resume_deadline) {
        return absl::DeadlineExceededError(absl::StrCat(n, " of ", interrupted.size(),
                                                        " interrupted jobs stepped again within 120 s of the restart"));
      }
      fleet->Nap(0.05);  // sampling the jobs that stepped again
    }
    progress("interrupted jobs stepped again", true);
  }

  // To the end: every job run, and SUCCEEDED as the coordinator lists them.
  {
    const auto deadline = Clock::now() + std::chrono::seconds(300);
    for (;;) {
      if (fleet->Completed() >= o.jobs && clients->Acked() >= o.jobs) {
        auto n = succeeded();
        if (n.ok() && *n >= o.jobs) break;
      }
      if (Clock::now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("jobs not all SUCCEEDED 300 s after the steady phase (",
                                                        fleet->Completed(), " run); coordinator log:\n",
                                                        Tail(daemons[0].log)));
      }
      progress("finishing");
      fleet->Nap(0.2);  // sampling the jobs' ends
    }
  }
  const auto t_end = Clock::now();
  if (rep.restarted) rep.after_restart = rec.Stats(kAfter, Seconds(t_end - t_start) - t_after_start);
  clients->Stop();
  fleet->StopUploads();
  timer.Stop();
  fleet->Shutdown();
  rep.coordinator_memory_end = MemoryOf(daemons[0].pid);
  rep.rocksdb_bytes_end = DirBytes(coord_dir + "/db");

  // The end state, from the coordinator: every acknowledged job SUCCEEDED, whole.
  const std::vector<std::string> job_of = clients->JobOf();
  for (const auto& v : clients->Violations()) rep.violations.push_back(v);
  for (const auto& v : fleet->Violations()) rep.violations.push_back(v);
  std::map<std::string, v1::Job> final;
  {
    v1::ListJobsResponse resp;
    auto ctx = ContextWithDeadline(60);
    if (auto s = checker->ListJobs(ctx.get(), v1::ListJobsRequest(), &resp); !s.ok()) {
      return absl::UnavailableError(absl::StrCat("final ListJobs: ", s.error_message()));
    }
    for (const auto& j : resp.jobs()) final[j.id()] = j;
  }
  std::set<std::string> acked;
  for (size_t i = 0; i < job_of.size(); ++i) {
    if (job_of[i].empty()) {
      rep.violations.push_back(absl::StrCat("spec load-", i, " was never accepted"));
      continue;
    }
    acked.insert(job_of[i]);
    auto it = final.find(job_of[i]);
    if (it == final.end()) {
      rep.violations.push_back(absl::StrCat("lost: job ", job_of[i], " (load-", i, ") was accepted and is not listed"));
      continue;
    }
    const v1::Job& j = it->second;
    if (j.state() != v1::SUCCEEDED) {
      rep.violations.push_back(absl::StrCat("job ", j.id(), " ended ", v1::JobState_Name(j.state()), ": ", j.reason()));
    } else if (j.steps_done() > o.steps || j.checkpoint_step() < o.checkpoint_every) {
      // steps_done is the last step reported: a job resumed from its last step's checkpoint
      // after the restart runs no step again. checkpoint_step is the last commit the
      // coordinator heard of (the shard servers' own listing is checked below).
      rep.violations.push_back(absl::StrCat("job ", j.id(), " SUCCEEDED at step ", j.steps_done(), " with checkpoint ",
                                            j.checkpoint_step()));
    } else {
      ++rep.jobs_succeeded;
    }
    if (j.generation() > (rep.restarted ? 2 : 1)) {
      rep.violations.push_back(absl::StrCat("job ", j.id(), " placed ", j.generation(), " times"));
    }
  }
  rep.jobs_submitted = static_cast<int64_t>(acked.size());
  for (const auto& [id, j] : final) {
    if (!acked.count(id)) rep.violations.push_back(absl::StrCat("job ", id, " listed, never accepted by SubmitJob"));
  }
  rep.watched_jobs = clients->Watched();
  std::tie(rep.list_bytes, rep.list_full_bytes) = clients->ListBytes();
  // Legitimate only for a job whose ranks had all ended before the SIGKILL but whose
  // SUCCEEDED was not stored yet (a client that had seen it would have made a violation).
  rep.jobs_run_twice = fleet->RanTwice();

  // The checkpoints on the shard servers: every job's whole, and a sample's bytes as written.
  {
    std::vector<std::string> servers;
    for (size_t i = 1; i < daemons.size(); ++i) servers.push_back(daemons[i].address());
    std::vector<std::string> ids(acked.begin(), acked.end());
    std::vector<std::string> errors;
    std::mutex mu;
    std::atomic<size_t> next{0};
    std::atomic<int64_t> committed{0}, verified{0}, bytes{0};
    const size_t stride = o.verify_jobs < 0 || o.verify_jobs >= static_cast<int>(ids.size())
                              ? 1
                              : std::max<size_t>(1, ids.size() / std::max(1, o.verify_jobs));
    std::vector<std::thread> threads;
    std::map<std::string, std::shared_ptr<v1::ShardServer::Stub>> stubs;
    for (const auto& s : servers) stubs[s] = v1::ShardServer::NewStub(MakeChannel(s));
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (size_t k = next++; k < ids.size(); k = next++) {
          const std::string& job = ids[k];
          std::vector<std::string> unreachable;
          const auto stored = shardserver::ListStoredCheckpoints(servers, job, &unreachable);
          std::vector<int64_t> steps;
          for (const auto& c : stored) steps.push_back(c.step);
          std::vector<int64_t> want;
          for (int s = o.checkpoint_every; s <= o.steps; s += o.checkpoint_every) want.push_back(s);
          if (steps != want) {
            std::lock_guard<std::mutex> l(mu);
            errors.push_back(absl::StrCat("job ", job, ": whole checkpoints of steps {", absl::StrJoin(steps, ", "),
                                          "} on the shard servers, want {", absl::StrJoin(want, ", "), "}",
                                          unreachable.empty() ? "" : absl::StrCat(" (", unreachable.front(), ")")));
            continue;
          }
          committed += static_cast<int64_t>(stored.size());
          if (k % stride != 0) continue;
          const auto jt = final.find(job);
          const int world = jt == final.end() ? 1 : std::max(1, jt->second.world_size());
          for (const auto& c : stored) {
            int slices = 0;
            for (const auto& [name, where] : c.files) slices += name.rfind("part-00000", 0) == 0;
            for (const auto& [name, where] : c.files) {
              std::string got;
              auto n = shardserver::ReadRange(*stubs[where.server], where.server, job, c.step, name, 0, 0,
                                        [&](const std::string& d) { got += d; });
              const std::string want_bytes = ExpectedFile(job, c.step, name, world, std::max(1, slices), o.part_bytes);
              if (!n.ok() || got != want_bytes) {
                std::lock_guard<std::mutex> l(mu);
                errors.push_back(absl::StrCat("job ", job, " step ", c.step, " file ", name, " on ", where.server, ": ",
                                              n.ok() ? absl::StrCat("read ", got.size(), " bytes unlike those written")
                                                     : std::string(n.status().message())));
                continue;
              }
              bytes += static_cast<int64_t>(got.size());
            }
            ++verified;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    rep.checkpoints_committed = committed;
    rep.checkpoints_verified = verified;
    rep.bytes_verified = bytes;
    for (size_t i = 0; i < errors.size() && i < 20; ++i) rep.violations.push_back(errors[i]);
    if (errors.size() > 20) rep.violations.push_back(absl::StrCat("... and ", errors.size() - 20, " more checkpoint errors"));
  }
  for (const auto& [method, what] : rec.FirstErrors()) {
    std::fprintf(stderr, "control_plane_load: first %s error: %s\n", method.c_str(), what.c_str());
  }
  clients.reset();
  fleet.reset();
  checker.reset();  // no connection left open: a daemon stops at once (else after its 5 s grace)
  for (size_t i = 0; i < daemons.size(); ++i) StopDaemon(daemons[i]);
  rep.total_seconds = Seconds(Clock::now() - t_start);
  return rep;
}

namespace {
const MethodStats* Find(const std::vector<MethodStats>& v, const std::string& m) {
  for (const auto& s : v) {
    if (s.method == m) return &s;
  }
  return nullptr;
}
std::string Table(const std::vector<MethodStats>& v, const std::map<std::string, double>& targets) {
  std::string out = absl::StrFormat("  %-24s %9s %8s %9s %9s %9s %7s  %s\n", "method", "calls", "per s", "p50 ms",
                                    "p99 ms", "max ms", "errors", "target (p99)");
  for (const auto& s : v) {
    auto t = targets.find(s.method);
    absl::StrAppend(&out, absl::StrFormat("  %-24s %9d %8.1f %9.2f %9.2f %9.1f %7d  %s\n", s.method, s.calls, s.rate,
                                          s.p50_ms, s.p99_ms, s.max_ms, s.errors,
                                          t == targets.end() ? ""
                                          : s.calls > 0 && s.p99_ms <= t->second
                                              ? absl::StrFormat("<= %.0f ms: met", t->second)
                                              : absl::StrFormat("<= %.0f ms: NOT met", t->second)));
  }
  return out;
}
const std::map<std::string, double>& Targets() {
  static const auto* t = new std::map<std::string, double>{{"Heartbeat", 50}, {"SubmitJob", 50}, {"ListJobs", 200}};
  return *t;
}
}  // namespace

bool TargetsMet(const ControlPlaneReport& r) {
  for (const auto& [m, limit] : Targets()) {
    const MethodStats* s = Find(r.steady, m);
    if (s == nullptr || s->calls == 0 || s->p99_ms > limit) return false;
  }
  if (r.restarted && r.reattached_s > 10) return false;
  return r.violations.empty();
}

std::string FormatReport(const ControlPlaneReport& r) {
  const auto& o = r.options;
  std::string out = absl::StrFormat(
      "control-plane load: %d workers (an Attach stream and connection each, heartbeat every %d ms), %d jobs "
      "(SubmitJob at %.0f/s; %d steps of %d ms, a checkpoint every %d; dp 2 every %d), %d shard servers; ListJobs "
      "every %.2f s (brief, as gantry jobs; with specs every %.1f s), GetJob every %.2f s, ListWorkers every %.2f s, "
      "%d watchers\n",
      o.workers, o.heartbeat_ms, o.jobs, o.submit_rate, o.steps, o.step_ms, o.checkpoint_every, o.multi_rank_every,
      o.shard_servers, o.list_jobs_period_s, o.list_jobs_full_period_s, o.get_job_period_s, o.list_workers_period_s,
      o.watchers);
  absl::StrAppend(&out, absl::StrFormat("steady phase: %.1f s (until all %d jobs were submitted and %.0f%% had run); "
                                        "client-side latency, open loop:\n",
                                        r.steady_seconds, o.jobs, 100 * (o.restart_at > 0 ? o.restart_at : 1.0)));
  absl::StrAppend(&out, Table(r.steady, Targets()));
  absl::StrAppend(&out, absl::StrFormat(
      "placements: %d jobs in %.1f s = %.1f/s (best 5 s: %.1f/s); submit to placed p50 %.0f ms, p99 %.0f ms; "
      "most queued %d; largest ListJobs %s (full: %s)\n",
      r.placements, r.steady_seconds, r.placements_per_second, r.peak_placements_per_second, r.submit_to_placed_p50_ms,
      r.submit_to_placed_p99_ms, r.max_queued, Mb(r.list_bytes), Mb(r.list_full_bytes)));
  absl::StrAppend(&out, absl::StrFormat(
      "coordinator: rss %s (peak %s) at the kill; RocksDB %s at the kill, %s at the end; CPU in the steady phase: "
      "coordinator %.0f%%, this process (fleet and clients) %.0f%%, shard servers %.0f%% of one core; machine load "
      "average %.1f on %ld CPUs\n",
      Mb(r.coordinator_memory.rss), Mb(r.coordinator_memory.peak), Mb(r.rocksdb_bytes), Mb(r.rocksdb_bytes_end),
      100 * r.coordinator_cpu_seconds / r.steady_seconds, 100 * r.fleet_cpu_seconds / r.steady_seconds,
      100 * r.shard_cpu_seconds / r.steady_seconds, r.machine_load, ::sysconf(_SC_NPROCESSORS_ONLN)));
  if (r.restarted) {
    absl::StrAppend(&out, absl::StrFormat(
        "restart (SIGKILL, then the same data dir and port): serving %.2f s after the kill; all %d workers "
        "re-attached %.2f s after the new process started (%.2f s after the kill; target <= 10 s: %s); %d jobs "
        "were running: the first job placed again stepped %.2f s after the kill, all of them by %.2f s\n",
        r.ready_s, o.workers, r.reattached_s, r.reattached_from_kill_s, r.reattached_s <= 10 ? "met" : "NOT met",
        r.interrupted_jobs, r.first_resumed_s, r.all_resumed_s));
    absl::StrAppend(&out, absl::StrFormat("  %d jobs had ended on their workers but not yet in the coordinator's store at "
                                          "the kill, and ran again\n",
                                          r.jobs_run_twice));
    absl::StrAppend(&out, "after the restart:\n", Table(r.after_restart, {}));
    absl::StrAppend(&out, absl::StrFormat("coordinator rss at the end %s\n", Mb(r.coordinator_memory_end.rss)));
  }
  absl::StrAppend(&out, absl::StrFormat(
      "checks: %d jobs accepted, %d SUCCEEDED with every step and their last checkpoint; %d checkpoints whole on "
      "the shard servers, %d read back (%s, identical); %d jobs watched start to end; %d violations\n",
      r.jobs_submitted, r.jobs_succeeded, r.checkpoints_committed, r.checkpoints_verified, Mb(r.bytes_verified),
      r.watched_jobs, r.violations.size()));
  for (const auto& v : r.violations) absl::StrAppend(&out, "  VIOLATION: ", v, "\n");
  absl::StrAppend(&out, absl::StrFormat("total %.1f s; targets: %s\n", r.total_seconds, TargetsMet(r) ? "met" : "NOT met"));
  return out;
}

}  // namespace gantry::load
