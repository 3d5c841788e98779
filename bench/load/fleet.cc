#include "bench/load/fleet.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/load/own_channel.h"
#include "bench/load/stand_in.h"
#include "worker/protocol/messages.h"
#include "common/file_util.h"
#include "common/grpc_util.h"
#include "shardserver/client/shard_client.h"

namespace gantry::load {

// One attach stream, as gantry-worker's AttachOnce: registration first, then heartbeats,
// step reports, checkpoint parts and ends of job up; the worker id, assignments and
// cancels down. A reactor serves one call: re-attaching makes a new one.
class AttachSession : public grpc::ClientBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage> {
 public:
  AttachSession(Fleet* fleet, int worker, uint64_t seq) : fleet_(fleet), worker_(worker), seq_(seq) {}
  // Binds the call and queues the registration; StartCall() then starts it.
  void Prepare(v1::Coordinator::Stub* stub, const v1::Resources& r) {
    stub->async()->Attach(&ctx_, this);
    Enqueue(protocol::RegisterMessage(r));
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

Fleet::Fleet(const ControlPlaneOptions& o, const std::string& coordinator, Recorder* rec, Timer* timer)
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
Fleet::~Fleet() { Shutdown(); }

void Fleet::Start() {
  for (auto& w : workers_) {
    Attach(*w);
    const auto offset = std::chrono::milliseconds(int64_t{o_.heartbeat_ms} * w->index / std::max(1, o_.workers));
    ScheduleHeartbeat(w.get(), Clock::now() + offset + std::chrono::milliseconds(o_.heartbeat_ms));
  }
}

void Fleet::Shutdown() {
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

void Fleet::MarkKill(Clock::time_point at) {
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

void Fleet::Attach(SimWorker& w) {
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

void Fleet::Send(SimWorker& w, uint64_t seq, const v1::WorkerMessage& m) {
  std::lock_guard<std::mutex> l(w.mu);
  if (w.session != nullptr && w.session_seq == seq) w.session->Enqueue(m);
}

void Fleet::ScheduleHeartbeat(SimWorker* w, Clock::time_point at) {
  timer_->At(at, [this, w, at] {
    {
      std::lock_guard<std::mutex> l(w->mu);
      if (w->session != nullptr) {
        v1::WorkerMessage hb = protocol::HeartbeatMessage(NowUnixMs());
        auto* h = hb.mutable_heartbeat();
        const uint64_t echo = next_echo_.fetch_add(1) + 1;
        h->set_echo(echo);
        if (w->run && !w->run->stop) {  // as Session::FillHeartbeat
          protocol::AddRankProgress(h, w->run->a.job_id(), w->run->a.generation(), w->run->a.rank(), w->run->step);
        }
        if (w->echoes.size() < 64) w->echoes[echo] = Clock::now();
        w->session->Enqueue(hb);
      }
    }
    ScheduleHeartbeat(w, at + std::chrono::milliseconds(o_.heartbeat_ms));
  });
}

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
  Send(w, seq, protocol::JobDoneMessage(run->a, absl::CancelledError("cancelled")));
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
  if (a.rank() == 0) {  // rank 0 speaks for the group, as the worker's StepReporter
    v1::WorkerMessage m;
    auto* r = protocol::SetStepUpdate(a, &m);
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
      protocol::AddPlacedFile(p, name, server);
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
  protocol::SetCheckpointPart(a, run->step, &m);
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
  Send(*w, run->session, protocol::JobDoneMessage(a, absl::OkStatus()));
  std::lock_guard<std::mutex> l(mu_);
  auto& done = done_ranks_[{a.job_id(), a.generation()}];
  done.insert(a.rank());
  if (static_cast<int>(done.size()) == a.world_size()) ++completed_[a.job_id()];
  cv_.notify_all();
}

}  // namespace gantry::load
