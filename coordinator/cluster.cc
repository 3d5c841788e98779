// The coordinator's cluster (cluster.h): the façade over membership (membership.h), the
// scheduler (scheduler.h), watchers, the spec cache and stall detection, and the job
// lifecycle itself: what ranks report (steps, ends, checkpoint parts) turned into the job's
// state changes, restarts and growth. Over 700 lines because that lifecycle (about 400 of
// them) is one state machine over one lock; each collaborator above has its own file and test.
#include "coordinator/cluster.h"

#include "coordinator/job_state.h"

#include "coordinator/placement.h"
#include "jobspec/job_spec.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/grpc_util.h"
#include "common/status.h"
#include "coordinator/kill_points.h"

namespace gantry::coordinator {

Cluster::Cluster(Store* store, metrics::Registry* registry, ClusterOptions options)
    : store_(store),
      registry_(registry),
      options_(options),
      members_(MembershipOptions{options.worker_timeout_ms, options.dead_worker_retention_ms, options.shard_timeout_ms}),
      specs_(store, registry),
      stalls_(options.stall_ms),
      scheduler_(store, &members_, &specs_, &watchers_, registry, &scheduler_host_,
                  Scheduler::Options{options.placement_grace_ms, options.checkpoint_server_wait_ms, options.planner_cluster,
                                     options.quotas},
                  NowUnixMs()) {
  // Every series exists from the start (at 0), so that rates, alerts and dashboards see the
  // first event rather than a series appearing.
  for (auto [name, help] : {std::pair{"gantry_coordinator_job_restarts_total", "Jobs placed again after a failure."},
                            std::pair{"gantry_coordinator_steps_redone_total", "Steps run again after restarts (lost work)."},
                            std::pair{"gantry_coordinator_workers_lost_total", "Workers declared dead."},
                            std::pair{"gantry_coordinator_stalls_total", "Steps that stalled past the limit."},
                            std::pair{"gantry_coordinator_checkpoints_committed_total", "Checkpoints committed."},
                            std::pair{"gantry_coordinator_checkpoints_failed_total",
                                      "Checkpoints whose commit a shard server refused or missed."},
                            std::pair{"gantry_coordinator_elastic_resizes_total", "Elastic jobs placed again at another dp."},
                            std::pair{"gantry_coordinator_stale_messages_total",
                                      "Messages of a job generation that is over, refused."}}) {
    registry_->GetCounter(name, help);
  }
  registry_->GetHistogram("gantry_coordinator_restart_seconds", "From a job's failure to its first resumed step.",
                          metrics::ExponentialBuckets(0.25, 2, 10));
  commits_ = std::make_unique<CheckpointCommitter>(
      options_.shard_deadlines,
      [this] {
        std::vector<std::string> servers;
        for (const auto& info : ShardServers()) servers.push_back(info.address());
        return servers;
      },
      [this](const CheckpointCommitter::Checkpoint& c, const absl::StatusOr<std::vector<std::string>>& servers) {
        CheckpointEnded(c, servers);
      });
  monitor_ = std::thread([this] { Monitor(); });
  pass_thread_ = std::thread([this] {
    std::unique_lock<std::mutex> sl(schedule_mu_);
    for (;;) {
      schedule_cv_.wait(sl, [&] { return schedule_requested_ || schedule_stop_; });
      if (schedule_stop_) return;
      schedule_requested_ = false;  // requests from now on ask for another pass
      scheduling_ = true;
      sl.unlock();
      {
        std::lock_guard<std::mutex> l(mu_);
        if (!stop_) ScheduleLocked();
      }
      sl.lock();
      scheduling_ = false;
      schedule_cv_.notify_all();  // WaitForCommits
    }
  });
}

Cluster::~Cluster() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  monitor_.join();
  {
    std::lock_guard<std::mutex> sl(schedule_mu_);
    schedule_stop_ = true;
  }
  schedule_cv_.notify_all();
  pass_thread_.join();
  commits_.reset();  // the commits in flight end (each call has a deadline) while the cluster is whole
}

absl::Status Cluster::Event(const std::string& job_id, std::function<void(v1::JobEvent&)> fill, bool sync) {
  v1::JobEvent e;
  e.set_job_id(job_id);
  e.set_time_unix_ms(NowUnixMs());
  fill(e);
  return AddEvent(std::move(e), sync);
}

absl::Status Cluster::AddEvent(v1::JobEvent e, bool sync) {
  const std::string job_id = e.job_id();
  auto s = store_->AppendEvent(std::move(e), sync);
  if (!s.ok()) return s.status();
  watchers_.Notify(job_id);
  return absl::OkStatus();
}

int Cluster::Subscribe(const std::string& job_id, std::function<void()> fn) {
  return watchers_.Subscribe(job_id, std::move(fn));
}

void Cluster::Unsubscribe(int id) { watchers_.Unsubscribe(id); }

absl::Status Cluster::Recover() {
  std::unique_lock<std::mutex> jl(job_mu_);
  // The jobs placed when the last coordinator stopped, from the store's index; their
  // transitions in one synced batch (a coordinator that held a thousand running jobs comes
  // back after one WAL sync, not a thousand).
  std::vector<std::string> placed = store_->JobsIn(v1::SCHEDULED);
  for (auto& id : store_->JobsIn(v1::RUNNING)) placed.push_back(std::move(id));
  std::vector<Store::Update> updates;
  for (const auto& id : placed) {
    auto got = store_->GetJob(id);
    if (!got.ok()) return got.status();
    v1::Job& j = *got;
    // Placed when the last coordinator stopped: placed again once its workers re-attach,
    // from its last committed checkpoint (not counted against scheduling.max_restarts).
    j.clear_workers();
    j.clear_preemption();  // a preemption under way ends here: the job resumes from its last checkpoint
    j.set_failure_time_unix_ms(NowUnixMs());
    j.set_steps_at_failure(j.steps_done());
    ASSIGN_OR_RETURN(auto events, PrepareTransition(
        j, v1::RESTARTING,
        "coordinator restarted: the job is placed again and resumes from its last committed checkpoint"));
    updates.push_back({std::move(j), std::move(events)});
  }
  if (!updates.empty()) {
    RETURN_IF_ERROR(store_->Commit(&updates));
    for (const auto& u : updates) {
      watchers_.Notify(u.job.id());
      LOG(INFO) << "recovered " << u.job.id() << ": to be placed again";
    }
  }
  jl.unlock();
  std::lock_guard<std::mutex> l(mu_);
  UpdateGaugesLocked(/*force=*/true);
  return absl::OkStatus();
}

absl::Status Cluster::Transition(v1::Job& job, v1::JobState to, const std::string& message, bool sync) {
  // The record and its events in one write (one WAL sync, not one per write).
  const v1::Job before = job;
  auto events = PrepareTransition(job, to, message);
  if (!events.ok()) return events.status();
  std::vector<Store::Update> update = {{job, *std::move(events)}};
  if (auto s = store_->Commit(&update, sync); !s.ok()) {
    job = before;
    return s;
  }
  watchers_.Notify(job.id());
  return absl::OkStatus();
}

void Cluster::RememberSpec(const std::string& job_id, std::shared_ptr<const jobspec::JobSpec> spec) {
  specs_.Remember(job_id, std::move(spec));
}

std::shared_ptr<const jobspec::JobSpec> Cluster::SpecOf(const v1::Job& job) { return specs_.Of(job); }

absl::Status Cluster::SchedulerHost::Transition(v1::Job& job, v1::JobState to, const std::string& message) {
  return c_->Transition(job, to, message);
}

void Cluster::SchedulerHost::ListStoredSteps(const std::string& job_id, int64_t generation,
                                            std::vector<std::string> servers, std::vector<std::string> jobs) {
  c_->commits_->ListNewest(job_id, std::move(servers), std::move(jobs),
                           [c = c_, job_id, generation](std::vector<int64_t> newest, std::vector<std::string> unreachable) {
                             std::lock_guard<std::mutex> l(c->mu_);
                             c->scheduler_.StoredStepsListed(job_id, generation, newest, unreachable);
                             if (unreachable.empty() && !c->stop_) c->ScheduleLocked();
                           });
}

absl::Status Cluster::SchedulerHost::Preempt(v1::Job& victim, const v1::Job& by, const std::string& reason) {
  return c_->StartPreemptionLocked(victim, by, reason);
}

namespace {
// "alice (team vision)", or "alice".
std::string OwnerOf(const v1::Job& j) {
  const std::string owner = j.owner().empty() ? "nobody" : j.owner();
  return j.team().empty() ? owner : absl::StrCat(owner, " (team ", j.team(), ")");
}
}  // namespace

absl::Status Cluster::StartPreemptionLocked(v1::Job& victim, const v1::Job& by, const std::string& reason) {
  const auto spec = SpecOf(victim);
  const int64_t grace_ms = spec && spec->scheduling.preemption_grace_s > 0
                               ? static_cast<int64_t>(spec->scheduling.preemption_grace_s * 1000)
                               : options_.preemption_grace_ms;
  // The step its ranks stop after: far enough ahead that the message reaches every rank before
  // it ends that step (a rank may be a step ahead of the last report), and at least 0.3 s of
  // steps ahead for fast ones. A rank that is past it anyway does not stop, and the job is
  // stopped at the deadline instead.
  const double step_s = stalls_.StepSeconds(victim.id(), victim.generation());
  const int64_t ahead = step_s > 0 ? std::max<int64_t>(2, 1 + static_cast<int64_t>(std::ceil(0.3 / step_s))) : 2;
  const int64_t now = NowUnixMs();
  v1::Preemption* p = victim.mutable_preemption();
  p->set_ahead(ahead);
  p->set_by_job(by.id());
  p->set_by(OwnerOf(by));
  p->set_reason(reason);
  p->set_generation(victim.generation());
  p->set_stop_step(victim.steps_done() + ahead);
  p->set_deadline_unix_ms(now + grace_ms);
  p->set_requested_unix_ms(now);
  victim.set_update_time_unix_ms(now);
  // The record and the audit event in one synced write, before any rank hears of it.
  v1::JobEvent e;
  e.set_job_id(victim.id());
  e.set_time_unix_ms(now);
  e.set_message(absl::StrFormat(
      "preemption requested by job %s of %s: %s; it checkpoints after step %d and releases its workers (grace "
      "period %.0f s)",
      by.id(), p->by(), reason, p->stop_step(), grace_ms / 1000.0));
  std::vector<Store::Update> update = {{victim, {std::move(e)}}};
  if (absl::Status s = store_->Commit(&update); !s.ok()) {
    victim.clear_preemption();
    return s;
  }
  watchers_.Notify(victim.id());
  kPreemptAfterRequest.Reach();
  LOG(INFO) << "job " << victim.id() << ": preempted for " << by.id() << " (" << reason << "): checkpoint after step "
            << p->stop_step();
  v1::CoordinatorMessage m;
  v1::PreemptJob* pj = m.mutable_preempt();
  pj->set_job_id(victim.id());
  pj->set_generation(victim.generation());
  pj->set_stop_step(p->stop_step());
  for (const auto& wid : std::set<std::string>(victim.workers().begin(), victim.workers().end())) {
    if (Member* w = members_.FindAttached(wid)) w->session->Send(m);
  }
  preempting_[victim.id()] = {victim.generation(), p->deadline_unix_ms()};
  return absl::OkStatus();
}

void Cluster::PreemptionMissed(const std::string& job_id, int64_t generation, int64_t step) {
  std::lock_guard<std::mutex> l(mu_);
  std::lock_guard<std::mutex> jl(job_mu_);
  auto job = store_->GetJob(job_id);
  if (!job.ok() || job->generation() != generation || !job->has_preemption() ||
      job->preemption().stop_step() >= step || (job->state() != v1::RUNNING && job->state() != v1::SCHEDULED)) {
    return;
  }
  // Rank 0 went past the stop step: the message came too late for every rank (they step
  // together). A later step, twice as far ahead; the deadline stays.
  v1::Preemption* p = job->mutable_preemption();
  p->set_ahead(2 * std::max<int64_t>(2, p->ahead()));
  p->set_stop_step(step + p->ahead());
  if (!store_->PutJob(*job).ok()) return;
  LOG(INFO) << "job " << job_id << ": past its preemption's step at step " << step << ": checkpoint after step "
            << p->stop_step() << " instead";
  v1::CoordinatorMessage m;
  v1::PreemptJob* pj = m.mutable_preempt();
  pj->set_job_id(job_id);
  pj->set_generation(generation);
  pj->set_stop_step(p->stop_step());
  for (const auto& wid : std::set<std::string>(job->workers().begin(), job->workers().end())) {
    if (Member* w = members_.FindAttached(wid)) w->session->Send(m);
  }
}

bool Cluster::ReleasePreemptedLocked(const std::string& job_id, int64_t generation, const std::string& how) {
  bool released = false;
  {
    std::lock_guard<std::mutex> jl(job_mu_);
    auto job = store_->GetJob(job_id);
    if (job.ok() && job->generation() == generation && job->has_preemption() &&
        (job->state() == v1::RUNNING || job->state() == v1::SCHEDULED)) {
      released = ReleaseJobLocked(*job, how);
    }
  }
  preempting_.erase(job_id);
  if (released) kPreemptAfterRelease.Reach();
  return released;
}

bool Cluster::ReleaseJobLocked(v1::Job& job, const std::string& how) {
  const v1::Preemption pre = job.preemption();
  for (const auto& wid : std::set<std::string>(job.workers().begin(), job.workers().end())) {
    Member* w = members_.FindAttached(wid);
    if (w == nullptr) continue;
    v1::CoordinatorMessage m;
    m.set_restart_job_id(job.id());  // a rank still ending stops now
    w->session->Send(m);
    w->Free();
  }
  job.clear_workers();
  done_ranks_.erase({job.id(), job.generation()});
  job.clear_preemption();
  job.set_preemptions(job.preemptions() + 1);
  job.set_reason(absl::StrCat("preempted by job ", pre.by_job(), " of ", pre.by(), ": ", pre.reason()));
  if (absl::Status s = Transition(job, v1::PREEMPTED, absl::StrCat(job.reason(), "; ", how)); !s.ok()) {
    LOG(WARNING) << "job " << job.id() << ": recording its preemption: " << s;
    return false;
  }
  registry_->GetCounter("gantry_coordinator_preemptions_total", "Jobs preempted (their workers released), by team.",
                        {{"team", job.team()}})
      .Increment();
  rendezvous_.Drop(job.id());
  preempting_.erase(job.id());
  LOG(INFO) << "job " << job.id() << " PREEMPTED: " << how;
  return true;
}

void Cluster::JobSubmitted() {
  std::lock_guard<std::mutex> l(mu_);
  ScheduleLocked();
}

void Cluster::WaitForCommits() {
  commits_->Drain();
  std::unique_lock<std::mutex> sl(schedule_mu_);
  schedule_cv_.wait(sl, [&] { return (!schedule_requested_ && !scheduling_) || schedule_stop_; });
}

void Cluster::RequestSchedule() {
  {
    std::lock_guard<std::mutex> sl(schedule_mu_);
    schedule_requested_ = true;
  }
  schedule_cv_.notify_all();  // the scheduling thread, among WaitForCommits callers
}

absl::StatusOr<v1::Job> Cluster::CancelJob(const std::string& job_id, const std::string& by) {
  v1::Job before, after;
  {
    std::lock_guard<std::mutex> l(job_mu_);
    auto job = store_->GetJob(job_id);
    if (!job.ok()) return job.status();
    before = *job;
    if (!Terminal(job->state())) {
      job->clear_preemption();
      job->set_reason(absl::StrCat("cancelled by ", by));
      // Who cancelled it, in its events (the audit trail), with the state in one write.
      RETURN_IF_ERROR(Transition(*job, v1::CANCELLED, absl::StrCat("cancelled by ", by)));
    }
    after = *job;
  }
  if (!Terminal(before.state())) JobCancelled(before);
  return after;
}

void Cluster::JobCancelled(const v1::Job& job) {
  LOG(INFO) << "job " << job.id() << ": cancelled; its workers are told and free";
  rendezvous_.Drop(job.id());
  std::lock_guard<std::mutex> l(mu_);
  done_ranks_.erase({job.id(), job.generation()});
  preempting_.erase(job.id());
  // Its workers are free at once: each is told to drop the job, and joins the job's threads
  // before it starts the next assignment.
  for (const auto& wid : std::set<std::string>(job.workers().begin(), job.workers().end())) {
    Member* w = members_.FindAttached(wid);
    if (w == nullptr) continue;
    v1::CoordinatorMessage m;
    m.set_cancel_job_id(job.id());
    w->session->Send(m);
    if (w->info.job_id() == job.id() && w->generation == job.generation()) w->Free();
  }
  UpdateGaugesLocked(/*force=*/true);  // a user action: its count shows at once
  ScheduleLocked();
}

std::string Cluster::AddWorker(WorkerSession* s, const v1::Resources& r) {
  std::lock_guard<std::mutex> l(mu_);
  const std::string id = members_.Add(s, r, NowUnixMs()).info.id();
  LOG(INFO) << "worker " << id << " attached from " << r.host() << " (" << r.device_kind() << " x" << r.device_count()
            << (r.device_name().empty() ? std::string() : ", " + r.device_name()) << ")";
  if (placement::SlotsOf(r) == 0) {
    LOG(WARNING) << "worker " << id << " offers " << r.device_kind() << " but reports no GPU: no rank is placed on it";
  }
  v1::CoordinatorMessage m;
  m.set_worker_id(id);
  s->Send(m);
  UpdateGaugesLocked();
  ScheduleLocked();
  return id;
}

void Cluster::Heartbeat(const std::string& id, const v1::Heartbeat* hb) { members_.Heartbeat(id, NowUnixMs(), hb); }

void Cluster::DropIfStale(const std::string& id, const std::string& job_id, int64_t generation) {
  std::lock_guard<std::mutex> l(mu_);
  Member* w = members_.FindAttached(id);
  if (w == nullptr) return;
  // A worker now running the current generation of that job sent a late message of an
  // earlier one (its old job thread): nothing to drop. Otherwise it holds state of a
  // generation that is over.
  if (w->info.job_id() == job_id && w->generation != generation) return;
  v1::CoordinatorMessage m;
  m.set_restart_job_id(job_id);
  w->session->Send(m);
}

void Cluster::OnStep(const std::string& id, const v1::StepUpdate& u) {
  Heartbeat(id);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stalls_.OnStep(u.job_id(), u.generation(), u.report().step(), u.report().step_seconds(), NowUnixMs())) {
      (void)Event(u.job_id(), [&](v1::JobEvent& e) {
        e.set_message(absl::StrCat("step ", u.report().step(), " done: the stall is over"));
      });
      std::lock_guard<std::mutex> jl(job_mu_);
      if (auto job = store_->GetJob(u.job_id()); job.ok() && !job->stalled().empty()) {
        job->clear_stalled();
        (void)store_->PutJob(*job);
      }
    }
  }
  std::unique_lock<std::mutex> jl(job_mu_);
  auto job = store_->GetJob(u.job_id());
  if (!job.ok()) return;
  if (job->generation() != u.generation()) {  // a stale worker: refused, and told to drop it
    jl.unlock();
    registry_->GetCounter("gantry_coordinator_stale_messages_total",
                          "Messages of a job generation that is over, refused.").Increment();
    DropIfStale(id, u.job_id(), u.generation());
    return;
  }
  if (job->state() != v1::SCHEDULED && job->state() != v1::RUNNING) return;  // ended: late report
  const bool first = job->state() != v1::RUNNING;
  if (first && job->failure_time_unix_ms() > 0 && u.report().step() > 0) {
    // The first step after a failure: how long the job was down, and what it did again.
    const double secs = static_cast<double>(NowUnixMs() - job->failure_time_unix_ms()) / 1000.0;
    const int64_t redone = std::max<int64_t>(0, job->steps_at_failure() - (u.report().step() - 1));
    registry_->GetHistogram("gantry_coordinator_restart_seconds", "From a job's failure to its first resumed step.",
                            metrics::ExponentialBuckets(0.25, 2, 10))
        .Observe(secs);
    registry_->GetCounter("gantry_coordinator_steps_redone_total", "Steps run again after restarts (lost work).")
        .Increment(static_cast<double>(redone));
    job->set_failure_time_unix_ms(0);
    (void)Event(job->id(), [&](v1::JobEvent& e) {
      e.set_message(absl::StrFormat("resumed: step %d done %.2f s after the failure (%d steps redone)",
                                    u.report().step(), secs, redone));
    });
  }
  if (job->has_preemption() && job->preemption().generation() == u.generation() &&
      u.report().step() > job->preemption().stop_step()) {
    const int64_t generation = u.generation(), step = u.report().step();
    jl.unlock();
    PreemptionMissed(u.job_id(), generation, step);  // takes mu_, then job_mu_
    jl.lock();
    job = store_->GetJob(u.job_id());
    if (!job.ok() || job->generation() != u.generation() ||
        (job->state() != v1::SCHEDULED && job->state() != v1::RUNNING)) {
      return;
    }
  }
  job->set_steps_done(u.report().step());
  job->set_last_loss(u.report().loss());
  job->set_update_time_unix_ms(NowUnixMs());
  // Step progress is not fsynced (a power loss may lose the last few step events), and
  // neither is RUNNING: a coordinator that comes back finds the job SCHEDULED or RUNNING,
  // and places either again alike (Recover), so nothing waits for this write to be durable.
  // (A SIGKILL loses neither: the write is in the WAL.) The other state changes are synced.
  if (first ? !Transition(*job, v1::RUNNING, "", /*sync=*/false).ok() : !store_->PutJob(*job, /*sync=*/false).ok()) {
    return;
  }
  v1::JobEvent e;
  e.set_job_id(job->id());
  e.set_time_unix_ms(NowUnixMs());
  *e.mutable_step() = u.report();
  (void)AddEvent(std::move(e), /*sync=*/false);
}

namespace {
// Errors of a rank that a new placement may not meet: a lost peer or server, a timeout.
bool Retryable(int code) {
  const auto c = static_cast<absl::StatusCode>(code);
  return c == absl::StatusCode::kUnavailable || c == absl::StatusCode::kAborted ||
         c == absl::StatusCode::kDeadlineExceeded;
}
}  // namespace

void Cluster::OnDone(const std::string& id, const v1::JobDone& d) {
  // A rank sends its checkpoint parts before its end: the end is applied after the commits
  // they started, so a job has SUCCEEDED only once its last checkpoint is committed.
  if (commits_->After(d.job_id(), [this, id, d] { ApplyDone(id, d); })) return;
  ApplyDone(id, d);
}

void Cluster::ApplyDone(const std::string& id, const v1::JobDone& d) {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& server : d.unreachable_shard_servers()) {
    if (members_.CountOutShardServer(server)) {
      LOG(WARNING) << "shard server " << server << " counted out until its next heartbeat: " << id << " could not reach it";
    }
  }
  Member* w = members_.Find(id);
  const bool current = w != nullptr && w->info.job_id() == d.job_id() && w->generation == d.generation();
  if (d.preempted()) {
    // A rank stopped after its preemption's checkpoint: the job's workers are released
    // together once that checkpoint commits, not one by one. This end is applied after the
    // commits its parts started (OnDone), so once every rank has stopped and the job is
    // still being preempted, that checkpoint did not commit (no shard server took it, or a
    // commit failed): it is released now rather than at its grace period's end.
    bool released = false;
    {
      std::lock_guard<std::mutex> jl(job_mu_);
      auto job = store_->GetJob(d.job_id());
      if (!job.ok() || job->generation() != d.generation() || !job->has_preemption() ||
          (job->state() != v1::RUNNING && job->state() != v1::SCHEDULED)) {
        // Released already (or the job moved on): applied as any end below.
      } else {
        auto& done = done_ranks_[{job->id(), job->generation()}];
        done.insert(d.rank());
        if (static_cast<int>(done.size()) < std::max(1, job->world_size())) return;
        const int64_t stop = job->preemption().stop_step();
        released = ReleaseJobLocked(
            *job, absl::StrCat("its ranks stopped after step ", stop,
                               " but that checkpoint was not committed: it resumes from its last committed "
                               "checkpoint (step ", job->checkpoint_step(), ")"));
        if (!released) return;
      }
    }
    if (released) {
      kPreemptAfterRelease.Reach();
      UpdateGaugesLocked(/*force=*/true);
      RequestSchedule();
      return;
    }
  }
  if (!d.ok()) {
    std::lock_guard<std::mutex> jl(job_mu_);
    auto job = store_->GetJob(d.job_id());
    if (job.ok() && job->generation() == d.generation() && (job->state() == v1::FAILED || job->state() == v1::RESTARTING)) {
      // Another rank's error after the placement ended (a peer lost mid-collective): kept
      // as an event, since it names what this rank saw (which rank did not arrive).
      (void)Event(job->id(), [&](v1::JobEvent& e) { e.set_message(absl::StrCat("rank ", d.rank(), " on ", id, ": ", d.error())); });
    }
  }
  if (d.ok()) {
    std::lock_guard<std::mutex> jl(job_mu_);
    auto job = store_->GetJob(d.job_id());
    if (job.ok() && job->generation() == d.generation() &&
        (job->state() == v1::RUNNING || job->state() == v1::SCHEDULED)) {
      // A gang job succeeds when every rank is done.
      auto& done = done_ranks_[{job->id(), job->generation()}];
      done.insert(d.rank());
      if (static_cast<int>(done.size()) >= std::max(1, job->world_size())) {
        done_ranks_.erase({job->id(), job->generation()});
        job->clear_workers();
        job->clear_preemption();  // it ended before its preemption's step
        preempting_.erase(job->id());
        if (absl::Status s = Transition(*job, v1::SUCCEEDED); !s.ok()) {
          // Its record stays RUNNING: a restarted coordinator places it again, and it
          // resumes from its last committed checkpoint.
          LOG(ERROR) << "job " << job->id() << " finished, but recording that failed: " << s;
        } else {
          LOG(INFO) << "job " << job->id() << " SUCCEEDED";
        }
        rendezvous_.Drop(job->id());
      }
    }
  } else {
    // One failing rank ends the placement at once: restarted if the error may pass.
    EndPlacementLocked(d.job_id(), d.generation(), absl::StrCat("rank ", d.rank(), " on ", id, ": ", d.error()),
                       Retryable(d.code()));
  }
  if (current) {  // not a late report of an earlier generation of a job it runs again
    w->running.erase(d.rank());
    if (w->running.empty()) w->Free();  // its last rank of the job
  }
  UpdateGaugesLocked();
  // The freed worker's next job is placed on the scheduling thread: ends come by the
  // hundred a second under load, and one pass places what they all freed in one write, where
  // a pass here would hold mu_ over a WAL sync per end.
  RequestSchedule();
}

void Cluster::OnCheckpointPart(const std::string& id, const v1::CheckpointPart& p) {
  Heartbeat(id);
  CheckpointCommitter::Checkpoint c;
  bool complete = false, stale = false;
  {
    std::lock_guard<std::mutex> jl(job_mu_);
    auto job = store_->GetJob(p.job_id());
    if (!job.ok() || job->generation() != p.generation() || (job->state() != v1::RUNNING && job->state() != v1::SCHEDULED)) {
      LOG(WARNING) << "checkpoint part of " << p.job_id() << " generation " << p.generation() << " step " << p.step()
                   << " from " << id << " dropped: the job is not running at that generation";
      registry_->GetCounter("gantry_coordinator_stale_messages_total",
                            "Messages of a job generation that is over, refused.").Increment();
      stale = job.ok() && job->generation() != p.generation();
    } else {
      const auto key = std::make_tuple(p.job_id(), p.generation(), p.step());
      PendingCheckpoint& pc = pending_ckpt_[key];
      if (!pc.ranks.insert(p.rank()).second) return;  // a repeated report
      for (const auto& f : p.files()) pc.checkpoint.files[f.shard_server()].push_back(f.name());
      pc.checkpoint.bytes += p.bytes();
      if (p.rank() == 0) pc.checkpoint.manifest_json = p.manifest_json();
      if (static_cast<int>(pc.ranks.size()) < std::max(1, job->world_size())) return;
      const auto spec = SpecOf(*job);
      pc.checkpoint.keep = spec ? spec->checkpoint.keep : 0;
      pc.checkpoint.elastic = spec && spec->elastic.enabled();
      c = std::move(pc.checkpoint);
      c.job_id = p.job_id();
      c.owner = {job->owner(), job->team()};
      c.generation = p.generation();
      c.step = p.step();
      pending_ckpt_.erase(key);
      complete = true;
    }
  }
  if (stale) DropIfStale(id, p.job_id(), p.generation());
  // Every part is durable: the commit runs on the committer, not on this worker's reactor.
  // The worker's next messages are read meanwhile; its end of job, or its loss, is applied
  // after the commit (OnDone, RemoveWorker).
  if (complete) commits_->Commit(std::move(c));
}

void Cluster::CheckpointEnded(const CheckpointCommitter::Checkpoint& c,
                              const absl::StatusOr<std::vector<std::string>>& servers) {
  if (!servers.ok()) {
    registry_->GetCounter("gantry_coordinator_checkpoints_failed_total",
                          "Checkpoints whose commit a shard server refused or missed.")
        .Increment();
    (void)Event(c.job_id, [&](v1::JobEvent& e) {
      e.set_message(absl::StrCat("checkpoint of step ", c.step, " not committed: ", servers.status().message()));
    });
    return;
  }
  size_t n_files = 0;
  for (const auto& [server, files] : c.files) n_files += files.size();
  // Neither this event nor the job's checkpoint step below is synced: the checkpoint is
  // durable on the shard servers (their commit record is), and where a job resumes is the
  // later of this record and what the servers list (ResumePointLocked), so a power loss
  // that took these writes costs nothing. (A SIGKILL loses neither: they are in the WAL.)
  (void)Event(
      c.job_id,
      [&](v1::JobEvent& e) {
        e.set_message(absl::StrCat("checkpoint of step ", c.step, " committed on ", absl::StrJoin(*servers, ", "), " (",
                                   n_files, " files, ", c.bytes, " bytes)"));
      },
      /*sync=*/false);
  kCommitAfterEvent.Reach();
  bool preempted = false;  // the checkpoint a preemption waits for: its workers are released now
  {
    std::lock_guard<std::mutex> jl(job_mu_);
    auto job = store_->GetJob(c.job_id);
    preempted = job.ok() && job->has_preemption() && job->preemption().generation() == c.generation &&
                c.step >= job->preemption().stop_step();
    if (job.ok() && c.step > job->checkpoint_step()) {
      job->set_checkpoint_step(c.step);
      job->set_restarts_in_a_row(0);  // progress: the next failure restarts at once
      job->clear_checkpoint_servers();
      for (const auto& server : *servers) job->add_checkpoint_servers(server);
      if (auto st = store_->PutJob(*job, /*sync=*/false); !st.ok()) LOG(WARNING) << st;
    }
  }
  kCommitAfterJobUpdate.Reach();
  registry_->GetCounter("gantry_coordinator_checkpoints_committed_total", "Checkpoints committed.").Increment();
  if (preempted) {
    kPreemptAfterCheckpoint.Reach();
    std::lock_guard<std::mutex> l(mu_);
    if (ReleasePreemptedLocked(c.job_id, c.generation,
                               absl::StrCat("the checkpoint of step ", c.step,
                                            " is committed; its workers are released, and it resumes from that "
                                            "checkpoint when placed again"))) {
      UpdateGaugesLocked(/*force=*/true);
      ScheduleLocked();
    }
    return;
  }
  // Only an elastic job can grow. MaybeGrow holds mu_ while it waits for job_mu_, which
  // another commit's synced write may hold: the handlers that need mu_ (heartbeats, step
  // reports, GetJob and ListJobs of a queued job through Workers()) would wait behind that
  // write for nothing.
  if (c.elastic) MaybeGrow(c.job_id, c.generation, c.step);
}

void Cluster::EndPlacementLocked(const std::string& job_id, int64_t generation, const std::string& why,
                                 bool retryable, bool planned) {
  std::lock_guard<std::mutex> jl(job_mu_);
  auto job = store_->GetJob(job_id);
  if (!job.ok() || job->generation() != generation) return;
  if (job->state() != v1::RUNNING && job->state() != v1::SCHEDULED) return;
  if (job->has_preemption() && job->preemption().generation() == generation && !planned) {
    // Being preempted: it ends as preempted, not as a failure (no restart counted).
    const int64_t stop = job->preemption().stop_step();
    if (ReleaseJobLocked(*job, absl::StrCat(why, " before the checkpoint of step ", stop,
                                            ": stopped; it resumes from its last committed checkpoint (step ",
                                            job->checkpoint_step(), ")"))) {
      kPreemptAfterRelease.Reach();
    }
    return;
  }
  const auto spec = SpecOf(*job);
  const int max_restarts = spec ? spec->scheduling.max_restarts : 0;
  const bool restart = planned || (retryable && job->restarts() < max_restarts);
  // The other ranks drop this generation now: their collectives fail at once rather than
  // wait out the timeout.
  for (const auto& wid : std::set<std::string>(job->workers().begin(), job->workers().end())) {
    Member* w = members_.FindAttached(wid);
    if (w == nullptr) continue;
    v1::CoordinatorMessage m;
    if (restart) {
      m.set_restart_job_id(job_id);
    } else {
      m.set_abort_job_id(job_id);
    }
    w->session->Send(m);
    w->Free();  // an assignment waits for the job's threads to end
  }
  job->clear_workers();
  done_ranks_.erase({job_id, generation});
  const int64_t now = NowUnixMs();
  if (!planned) job->set_reason(why);
  if (planned) {
    job->set_failure_time_unix_ms(0);
  } else if (restart) {
    job->set_restarts(job->restarts() + 1);
    job->set_restarts_in_a_row(job->restarts_in_a_row() + 1);
    job->set_failure_time_unix_ms(now);
    job->set_steps_at_failure(job->steps_done());
  } else {
    if (retryable && max_restarts > 0) {
      job->set_reason(absl::StrCat(why, " (after ", job->restarts(), " restarts: scheduling.max_restarts is ",
                                   max_restarts, ")"));
    }
  }
  if (planned) {
    if (!Transition(*job, v1::RESTARTING, why).ok()) return;
    LOG(INFO) << "job " << job_id << ": " << why;
  } else if (restart) {
    if (!Transition(*job, v1::RESTARTING,
                    absl::StrCat("restart ", job->restarts(), " of ", max_restarts, " at step ", job->steps_done(), ": ",
                                 why, "; the job resumes from its last committed checkpoint"))
             .ok()) {
      return;
    }
    registry_->GetCounter("gantry_coordinator_job_restarts_total", "Jobs placed again after a failure.").Increment();
    LOG(WARNING) << "job " << job_id << " RESTARTING (" << job->restarts() << "/" << max_restarts << "): " << why;
  } else {
    if (!Transition(*job, v1::FAILED, job->reason()).ok()) return;
    LOG(WARNING) << "job " << job_id << " FAILED: " << job->reason();
  }
  rendezvous_.Drop(job_id);
}

void Cluster::RemoveWorker(const std::string& id, const std::string& why, bool end_stream) {
  std::lock_guard<std::mutex> l(mu_);
  Member* w = members_.FindAttached(id);
  if (w == nullptr) return;
  // Counted out for silence (the Monitor, off the lock): not if it was heard from since.
  if (end_stream && !members_.Silent(*w, NowUnixMs())) return;
  if (end_stream) w->session->End(why);
  members_.MarkDead(*w, NowUnixMs());
  LOG(WARNING) << "worker " << id << " lost: " << why;
  registry_->GetCounter("gantry_coordinator_workers_lost_total", "Workers declared dead.").Increment();
  const std::string job_id = w->info.job_id();
  if (!job_id.empty()) {
    auto job = store_->GetJob(job_id);
    if (job.ok()) {
      std::vector<int> ranks;
      for (int r = 0; r < job->workers_size(); ++r) {
        if (job->workers(r) == id) ranks.push_back(r);
      }
      const std::string reason =
          absl::StrCat("worker ", id, " (", w->info.resources().host(),
                       ranks.empty() ? std::string() : absl::StrCat(ranks.size() > 1 ? ", ranks " : ", rank ", absl::StrJoin(ranks, ", ")),
                       ") was lost at step ", job->steps_done(), ": ", why);
      const int64_t generation = job->generation();
      // After the job's commits in flight, as its end of job: the restart then resumes
      // from the checkpoint its parts completed.
      const bool deferred = commits_->After(job_id, [this, job_id, generation, reason] {
        std::lock_guard<std::mutex> l(mu_);
        EndPlacementLocked(job_id, generation, reason, /*retryable=*/true);
        UpdateGaugesLocked();
        ScheduleLocked();
      });
      if (!deferred) EndPlacementLocked(job_id, generation, reason, /*retryable=*/true);
    }
    w->Free();
    w->info.set_state("dead");
  }
  UpdateGaugesLocked();
  ScheduleLocked();
}

void Cluster::ScheduleLocked() {
  {
    std::lock_guard<std::mutex> jl(job_mu_);
    scheduler_.Pass(NowUnixMs());
  }
  {
    std::lock_guard<std::mutex> hl(holds_mu_);
    holds_ = scheduler_.quota_holds();
  }
  UpdateGaugesLocked();
}

void Cluster::UpdateGaugesLocked(bool force) {
  // At most every 20 ms (every event of a busy coordinator would otherwise walk every
  // worker); the monitor's round brings them up to date within 100 ms.
  const int64_t now = NowUnixMs();
  if (!force && now - gauges_ms_ < 20) return;
  gauges_ms_ = now;
  const auto [alive, busy] = members_.AliveAndBusy();
  registry_->GetGauge("gantry_coordinator_workers_alive", "Workers attached and heartbeating.").Set(alive);
  registry_->GetGauge("gantry_coordinator_workers_busy", "Workers running a job.").Set(busy);
  auto by_state = store_->CountByState();  // the store's index: no record is read
  for (int s = v1::PENDING; s <= v1::PREEMPTED; ++s) {
    registry_->GetGauge("gantry_coordinator_jobs", "Jobs known to the coordinator, by state.",
                        {{"state", v1::JobState_Name(static_cast<v1::JobState>(s))}})
        .Set(static_cast<double>(by_state[static_cast<v1::JobState>(s)]));
  }
  if (force) UpdateTeamGaugesLocked(now);
}

void Cluster::UpdateTeamGaugesLocked(int64_t now) {
  // From the store's index (brief records) and the last pass's holds: no record is read.
  std::vector<quota::QueuedJob> queued;
  const std::shared_ptr<const Scheduler::QuotaHolds> holds = scheduler_.quota_holds();
  for (const std::string& device : store_->QueuedDevices()) {
    for (const auto& [key, brief] : store_->QueuedBriefs(device)) {
      const int64_t since = brief->update_time_unix_ms() > 0 ? brief->update_time_unix_ms() : brief->submit_time_unix_ms();
      queued.push_back({brief->team(), since, holds->count({device, brief->team()}) > 0});
    }
  }
  const std::shared_ptr<const TeamQuotas> quotas = scheduler_.Quotas();
  const auto figures = quota::Figures(quotas ? *quotas : TeamQuotas(), scheduler_.PlacedUse(), queued, now);
  std::set<std::pair<std::string, metrics::Labels>> exported;
  auto set = [&](const char* name, const char* help, metrics::Labels labels, double v) {
    registry_->GetGauge(name, help, labels).Set(v);
    exported.emplace(name, std::move(labels));
  };
  for (const auto& [team_name, f] : figures) {
    const std::string team = team_name.empty() ? "(none)" : team_name;
    for (const auto& [device, n] : f.used) {
      set("gantry_coordinator_team_slots_used", "Slots (GPUs; cpu workers) of the team's placed jobs, by device kind.",
          {{"team", team}, {"device", device}}, static_cast<double>(n));
      set("gantry_coordinator_team_slots_borrowed",
          "Slots the team uses beyond its nominal quota (lent by its cohort), by device kind.",
          {{"team", team}, {"device", device}}, static_cast<double>(f.borrowed.at(device)));
    }
    for (const auto& [device, n] : f.nominal) {
      set("gantry_coordinator_team_slots_quota", "The team's nominal quota of slots, by device kind (absent: not limited).",
          {{"team", team}, {"device", device}}, static_cast<double>(n));
    }
    set("gantry_coordinator_team_jobs_queued", "The team's queued jobs (PENDING, RESTARTING).", {{"team", team}},
        static_cast<double>(f.queued));
    set("gantry_coordinator_team_jobs_held", "The team's queued jobs held for its own quota or cap.", {{"team", team}},
        static_cast<double>(f.held));
    set("gantry_coordinator_team_oldest_wait_seconds",
        "How long the team's oldest queued job that its own quota does not hold has waited (0: none).",
        {{"team", team}}, f.oldest_wait_seconds);
  }
  for (const auto& [name, labels] : team_series_) {
    if (!exported.count({name, labels})) registry_->RemoveGauge(name, labels);
  }
  team_series_ = std::move(exported);
}

void Cluster::CheckPreemptionsLocked(int64_t now) {
  bool released = false;
  for (const auto& [job_id, gd] : std::map<std::string, std::pair<int64_t, int64_t>>(preempting_)) {
    const auto [generation, deadline] = gd;
    if (now < deadline) continue;
    int64_t stop = 0, checkpoint = 0;
    double grace_s = 0;
    {
      std::lock_guard<std::mutex> jl(job_mu_);
      auto job = store_->GetJob(job_id);
      if (job.ok() && job->has_preemption()) {
        stop = job->preemption().stop_step();
        checkpoint = job->checkpoint_step();
        grace_s = (job->preemption().deadline_unix_ms() - job->preemption().requested_unix_ms()) / 1000.0;
      }
    }
    // Its ranks are stopped now; a checkpoint still being committed is not waited for (the
    // scheduler's lookup of stored steps finds it if it lands).
    released |= ReleasePreemptedLocked(
        job_id, generation,
        absl::StrFormat("no checkpoint of step %d within its grace period of %.1f s: stopped; it resumes from its "
                        "last committed checkpoint (step %d)",
                        stop, grace_s, checkpoint));
  }
  if (released) ScheduleLocked();
}

void Cluster::CheckStallsLocked(int64_t now) {
  for (const StallDetector::Entry& p : stalls_.Overdue(now)) {
    const std::string& job_id = p.job_id;
    std::lock_guard<std::mutex> jl(job_mu_);
    auto job = store_->GetJob(job_id);
    if (!job.ok() || job->generation() > p.generation || job->state() == v1::SUCCEEDED ||
        job->state() == v1::FAILED || job->state() == v1::CANCELLED) {
      stalls_.Forget(job_id);
      continue;
    }
    if (p.reported || job->generation() != p.generation || job->state() != v1::RUNNING) continue;
    // Stalled: the ranks' last completed collectives, from their heartbeats.
    const std::map<int, RankProgress> ranks = members_.RankProgressOf(job_id, p.generation);
    const std::string what = DescribeStall(p.step + 1, (now - p.at_ms) / 1000.0, job->world_size(), ranks);
    stalls_.MarkReported(job_id);
    (void)Event(job_id, [&](v1::JobEvent& e) { e.set_message(what); });  // before the record says so
    job->set_stalled(what);
    (void)store_->PutJob(*job);
    registry_->GetCounter("gantry_coordinator_stalls_total", "Steps that stalled past the limit.").Increment();
    LOG(WARNING) << "job " << job_id << ": " << what;
  }
}

void Cluster::MaybeGrow(const std::string& job_id, int64_t generation, int64_t step) {
  std::lock_guard<std::mutex> l(mu_);
  int world = 0, target = 0;
  {
    std::lock_guard<std::mutex> jl(job_mu_);
    auto job = store_->GetJob(job_id);
    if (!job.ok() || job->generation() != generation || job->state() != v1::RUNNING || job->has_preemption()) return;
    const auto spec = SpecOf(*job);
    if (!spec) return;
    world = job->world_size();
    target = scheduler_.GrowTarget(*job, *spec);
  }
  if (target == 0) return;
  registry_->GetCounter("gantry_coordinator_elastic_resizes_total", "Elastic jobs placed again at another dp.").Increment();
  EndPlacementLocked(job_id, generation,
                     absl::StrCat("growing from dp ", world, " to dp ", target, " from the checkpoint of step ", step,
                                  " (workers came free)"),
                     /*retryable=*/true, /*planned=*/true);
  ScheduleLocked();
}

std::vector<std::string> Cluster::MissingCheckpointServers(const v1::Job& job) {
  std::vector<std::string> live;
  for (const auto& s : ShardServers()) live.push_back(s.address());
  return placement::MissingCheckpointServers(job, live, NowUnixMs(), options_.checkpoint_server_wait_ms);
}

std::vector<v1::Worker> Cluster::Workers() {
  std::lock_guard<std::mutex> l(mu_);
  return members_.List();
}

int64_t Cluster::LargestWorkerMemory() { return members_.LargestMemory(); }  // no lock: SubmitJob reads it

std::string Cluster::AutoWaitReason(const std::string& job_id) {
  std::lock_guard<std::mutex> l(mu_);
  return scheduler_.AutoWaitReason(job_id);
}

std::string Cluster::QuotaHold(const std::string& job_id) {
  std::shared_ptr<const Scheduler::QuotaHolds> holds;
  {
    std::lock_guard<std::mutex> hl(holds_mu_);
    holds = holds_;
  }
  return Scheduler::HeldFor(*holds, *store_, job_id);
}

v1::GetQuotasResponse Cluster::QuotaReport() {
  std::lock_guard<std::mutex> l(mu_);
  const std::shared_ptr<const TeamQuotas> quotas = scheduler_.Quotas();
  const TeamQuotas none;
  const TeamQuotas& q = quotas ? *quotas : none;
  const quota::Usage usage = scheduler_.PlacedUse();
  std::map<std::string, v1::TeamQuotaStatus> teams;
  for (const auto& [team, t] : q) {
    teams[team].set_max_running_jobs(t.max_running_jobs);
    teams[team].set_cohort(t.cohort);
  }
  for (const auto& [team, u] : usage) teams[team].set_running_jobs(u.jobs);
  for (const auto& job : store_->ListBrief()) {  // the index: no record is read
    if (!placement::Queued(job->state())) continue;
    v1::TeamQuotaStatus& t = teams[job->team()];
    t.set_queued_jobs(t.queued_jobs() + 1);
    if (!scheduler_.QuotaHold(job->id()).empty()) t.set_held_jobs(t.held_jobs() + 1);
  }
  v1::GetQuotasResponse out;
  out.set_quotas_in_force(quotas != nullptr);
  for (auto& [team, t] : teams) {
    t.set_team(team);
    std::map<std::string, std::pair<int64_t, int64_t>> devices;  // kind → (nominal, used)
    if (auto it = q.find(team); it != q.end()) {
      for (const auto& [device, nominal] : it->second.nominal) devices[device] = {nominal, 0};
    }
    if (auto it = usage.find(team); it != usage.end()) {
      for (const auto& [device, used] : it->second.slots) {
        auto [d, fresh] = devices.emplace(device, std::make_pair(int64_t{-1}, used));
        if (!fresh) d->second.second = used;
      }
    }
    for (const auto& [device, nu] : devices) {
      v1::DeviceQuota* d = t.add_devices();
      d->set_device(device);
      d->set_nominal(nu.first);
      d->set_used(nu.second);
      d->set_borrowed(quota::Borrowed(q, usage, team, device));
      d->set_borrowable(quota::Borrowable(q, usage, team, device).value_or(0));
      if (auto it = q.find(team); it != q.end()) {
        if (auto b = it->second.borrowing_limit.find(device); b != it->second.borrowing_limit.end()) {
          d->set_borrowing_limit(b->second);
        }
        if (auto l = it->second.lending_limit.find(device); l != it->second.lending_limit.end()) {
          d->set_lending_limit(l->second);
        }
      }
    }
    t.set_dominant_share(quota::DominantShare(q, usage, team));
    *out.add_teams() = std::move(t);
  }
  return out;
}

bool Cluster::QuotasInForce() { return scheduler_.QuotasInForce(); }  // the options alone: no lock

std::pair<int64_t, std::string> Cluster::QueuePosition(const std::string& job_id) {
  return scheduler_.QueuePosition(job_id);  // the store's index and the options: no lock of ours
}

std::map<std::string, std::pair<int64_t, std::string>> Cluster::QueuePositions() {
  return scheduler_.QueuePositions();
}

absl::Status Cluster::AdmitNotPreemptible(const std::string& team, const std::string& device, int64_t want) {
  const std::shared_ptr<const TeamQuotas> quotas = scheduler_.Quotas();  // the options alone
  if (!quotas) return absl::OkStatus();
  // What the team's other non-preemptible jobs of the kind hold or will: the store's index.
  int64_t others = 0;
  auto count = [&](const Store::BriefJob& j) {
    if (j->team() == team && j->not_preemptible()) others += j->world_size();
  };
  for (const auto& [key, brief] : store_->QueuedBriefs(device)) count(brief);
  for (const auto& [brief, kind] : store_->PlacedBriefs()) {
    if (kind == device) count(brief);
  }
  const std::string why = quota::NotPreemptibleRefusal(*quotas, team, device, want, others);
  return why.empty() ? absl::OkStatus() : absl::FailedPreconditionError(why);
}

Cluster::WorkerCounts Cluster::CountWorkers(const std::string& device) {
  std::lock_guard<std::mutex> l(mu_);
  return members_.Count(device);
}

absl::Status Cluster::CheckGeneration(const std::string& job_id, int64_t generation, const std::string& key) {
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  if (job->state() != v1::SCHEDULED && job->state() != v1::RUNNING && !Rendezvous::IsFailureReport(key)) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is ", v1::JobState_Name(job->state()),
                                                      ": no rendezvous outside a placement"));
  }
  if (job->generation() != generation) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is at generation ", job->generation(),
                                                      ", not ", generation, ": drop this stale state"));
  }
  return absl::OkStatus();
}

absl::Status Cluster::RendezvousPut(const std::string& job_id, int64_t generation, const std::string& key,
                                    const std::string& value) {
  if (key.empty()) return absl::InvalidArgumentError("rendezvous key is empty");
  RETURN_IF_ERROR(CheckGeneration(job_id, generation, key));
  rendezvous_.Put(job_id, generation, key, value);
  return absl::OkStatus();
}

void Cluster::RendezvousGet(const std::string& job_id, int64_t generation, const std::string& key, int64_t wait_ms,
                            std::function<void(absl::StatusOr<std::string>)> done) {
  if (auto s = CheckGeneration(job_id, generation, key); !s.ok()) {
    done(s);
    return;
  }
  rendezvous_.Get(job_id, generation, key, wait_ms, NowUnixMs(), std::move(done));
}

void Cluster::RegisterShardServer(const v1::RegisterShardServerRequest& r) {
  std::lock_guard<std::mutex> l(mu_);
  if (members_.RegisterShardServer(r, NowUnixMs())) {
    LOG(INFO) << "shard server " << r.address() << " registered";
    ScheduleLocked();  // jobs held back for want of a shard server
  }
}

std::vector<v1::ShardServerInfo> Cluster::ShardServers() {
  std::lock_guard<std::mutex> l(mu_);
  return members_.LiveShardServers(NowUnixMs());
}

void Cluster::Monitor() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    cv_.wait_for(l, std::chrono::milliseconds(100));
    if (stop_) break;
    const int64_t now = NowUnixMs();
    if (scheduler_.Due(now)) ScheduleLocked();  // the start's grace is over, or a wait that ends with time
    CheckPreemptionsLocked(now);
    CheckStallsLocked(now);
    members_.ForgetDead(now);
    UpdateGaugesLocked(/*force=*/true);
    const std::vector<std::string> silent = members_.SilentIds(now);
    l.unlock();
    rendezvous_.Expire(now);
    for (const auto& id : silent) {
      RemoveWorker(id, absl::StrFormat("no heartbeat for %.1f s", options_.worker_timeout_ms / 1000.0),
                   /*end_stream=*/true);
    }
    l.lock();
  }
}

}  // namespace gantry::coordinator
