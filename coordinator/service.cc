#include "coordinator/service.h"

#include "common/paging.h"

#include "coordinator/job_state.h"
#include "coordinator/placement.h"

#include <glog/logging.h>

#include <deque>
#include <functional>

#include "absl/strings/str_cat.h"
#include "common/authz.h"
#include "common/rpc_edge.h"
#include "common/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "jobspec/job_spec.h"
#include "jobspec/planner.h"

namespace gantry::coordinator {
namespace {

// What authorisation knows of a job: its id, owner and team.
AuthzObject ObjectOf(const v1::Job& job) { return AuthzObject::Job(job.id(), job.owner(), job.team()); }

// Whether who may read every team's quota (viewers, admins), not only a team of their own.
bool MayReadQuotaOfEveryTeam(const Principal& who) {
  return Authorize(who, Action::kReadQuota, AuthzObject::Cluster()).ok();
}

// A listing's filters (ListJobsRequest's owner, team and mine) on a job.
bool Matches(const v1::ListJobsRequest& req, const Principal& who, const v1::Job& job) {
  if (!req.owner().empty() && job.owner() != req.owner()) return false;
  if (!req.team().empty() && job.team() != req.team()) return false;
  if (req.mine() && job.owner() != who.name) return false;
  return true;
}


// One worker's attach stream. Its messages are read on gRPC's threads, which must not wait
// (they serve every call of the server: a handler that waits for a lock or a WAL sync holds
// back every other worker's heartbeat). A heartbeat is applied at once (Cluster::Heartbeat
// takes no lock that slow work holds); the registration, step reports, checkpoint parts,
// ends of job and the stream's end go, in their order, to this session's queue on the
// service's executor.
//
// The queue is bounded, and that is the worker's back-pressure: past kMaxQueued messages not
// applied yet the stream is not read until the queue is half empty, so gRPC's flow control
// holds the worker's sends (its step loop waits, as it did when messages were applied on
// gRPC's threads) rather than the coordinator's memory growing with a backlog.
class AttachReactor : public grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>,
                      public WorkerSession {
 public:
  AttachReactor(Cluster* cluster, SerialQueues* queue, std::string key)
      : cluster_(cluster), queue_(queue), key_(std::move(key)) {
    StartRead(&in_);
  }

  void Send(const v1::CoordinatorMessage& m) override {
    std::lock_guard<std::mutex> l(mu_);
    if (finished_) return;
    out_.push_back(m);
    if (!writing_) {
      writing_ = true;
      StartWrite(&out_.front());
    }
  }
  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> l(mu_);
    out_.pop_front();
    if (ok && !out_.empty() && !finished_) {
      StartWrite(&out_.front());
    } else {
      writing_ = false;
    }
  }
  void OnReadDone(bool ok) override {
    if (!ok) {  // the worker closed its side, or the stream broke
      Queue([this] { Close("its attach stream closed"); });
      return;
    }
    if (in_.has_heartbeat()) {
      if (!registered_) {
        Queue([this] { Close("first message was not a registration", grpc::Status(grpc::FAILED_PRECONDITION, "register first")); });
        return;
      }
      std::string id;
      {
        std::lock_guard<std::mutex> l(mu_);
        id = id_;
      }
      // Before its registration is applied the worker is not counted yet: nothing to renew.
      if (!id.empty()) cluster_->Heartbeat(id, &in_.heartbeat());
      if (!id.empty() && in_.heartbeat().echo() != 0) {  // applied: the client times the round trip
        v1::CoordinatorMessage m;
        m.set_heartbeat_echo(in_.heartbeat().echo());
        Send(m);
      }
    } else if (in_.has_register_()) {
      if (!registered_) {
        registered_ = true;
        Queue([this, r = in_.register_()] {
          const std::string id = cluster_->AddWorker(this, r);
          std::lock_guard<std::mutex> l(mu_);
          id_ = id;
        });
      }
    } else if (!registered_) {
      Queue([this] { Close("first message was not a registration", grpc::Status(grpc::FAILED_PRECONDITION, "register first")); });
      return;
    } else {
      Queue([this, m = in_] {
        const std::string id = Id();
        if (m.has_step()) {
          cluster_->OnStep(id, m.step());
        } else if (m.has_done()) {
          cluster_->OnDone(id, m.done());
        } else if (m.has_checkpoint_part()) {
          cluster_->OnCheckpointPart(id, m.checkpoint_part());
        }
      });
    }
    ReadNext();
  }
  // Runs once every reaction has run; the reactor goes once its queued work has too.
  void OnDone() override {
    bool last = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      done_ = true;
      last = pending_ == 0;
    }
    if (last) delete this;
  }
  // The cluster counted this worker out (it holds its lock and forgets the session now).
  bool Backlogged() override {
    std::lock_guard<std::mutex> l(mu_);
    return pending_ > 0;
  }
  void End(const std::string& why) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(grpc::Status(grpc::UNAVAILABLE, "counted out: " + why + "; attach again"));
  }

 private:
  std::string Id() {
    std::lock_guard<std::mutex> l(mu_);
    return id_;
  }
  // fn after the session's earlier work; the reactor outlives it.
  void Queue(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> l(mu_);
      ++pending_;
    }
    queue_->Post(key_, [this, fn = std::move(fn)](std::function<void()> done) {
      fn();
      done();
      Applied();
    });
  }
  // An item is done: the stream is read again once the queue has room. The read starts under
  // mu_, as End and Close set finished_ under it: a read is never started after Finish (the
  // call may be gone by then).
  void Applied() {
    bool last = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      --pending_;
      last = pending_ == 0 && done_;
      if (paused_ && pending_ <= kMaxQueued / 2) {
        paused_ = false;
        if (!finished_) StartRead(&in_);
      }
    }
    if (last) delete this;
  }
  // Reads the next message, unless the queue is full (then Applied reads it) or the call is
  // finished.
  void ReadNext() {
    std::lock_guard<std::mutex> l(mu_);
    if (pending_ >= kMaxQueued) {
      paused_ = true;
      return;
    }
    if (!finished_) StartRead(&in_);
  }
  // On the queue. Order matters: refuse further sends, leave the cluster (after which it
  // never calls Send on this session again), and only then Finish.
  void Close(const std::string& why, grpc::Status status = grpc::Status::OK) {
    std::string id;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (finished_) return;
      finished_ = true;
      id = id_;
    }
    if (!id.empty()) cluster_->RemoveWorker(id, why);
    Finish(status);
  }

  Cluster* cluster_;
  SerialQueues* queue_;
  const std::string key_;
  v1::WorkerMessage in_;
  bool registered_ = false;  // a registration was read (gRPC's reading thread only)
  std::mutex mu_;
  std::deque<v1::CoordinatorMessage> out_;
  bool writing_ = false;
  bool finished_ = false;  // Finish was called
  bool done_ = false;      // OnDone ran
  int pending_ = 0;        // queued work not done yet
  bool paused_ = false;    // not reading: the queue is full
  static constexpr int kMaxQueued = 64;
  std::string id_;         // once the registration is applied
};

// WatchJob: replays the job's events from from_seq, then follows new ones until the job
// ends (or the client goes away).
class WatchReactor : public grpc::ServerWriteReactor<v1::JobEvent> {
 public:
  WatchReactor(Store* store, Cluster* cluster, const v1::WatchJobRequest& req)
      : store_(store), cluster_(cluster), job_id_(req.job_id()), next_(std::max<int64_t>(1, req.from_seq())) {
    if (!store_->GetJob(job_id_).ok()) {
      Finish(grpc::Status(grpc::NOT_FOUND, absl::StrCat("job ", job_id_, " not found")));
      done_ = true;
      return;
    }
    sub_ = cluster_->Subscribe(job_id_, [this] { Pump(); });
    Pump();
  }
  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      writing_ = false;
      if (!ok) {
        Stop(grpc::Status(grpc::CANCELLED, "client went away"));
        return;
      }
    }
    Pump();
  }
  void OnCancel() override {
    std::lock_guard<std::mutex> l(mu_);
    if (!writing_) Stop(grpc::Status::CANCELLED);
    cancelled_ = true;
  }
  void OnDone() override {
    cluster_->Unsubscribe(sub_);
    delete this;
  }

 private:
  void Pump() {
    std::lock_guard<std::mutex> l(mu_);
    if (done_ || writing_) return;
    if (cancelled_) {
      Stop(grpc::Status::CANCELLED);
      return;
    }
    auto events = store_->Events(job_id_, next_, /*limit=*/1);
    if (events.ok() && !events->empty()) {
      out_ = (*events)[0];
      next_ = out_.seq() + 1;
      if (out_.has_state()) sent_terminal_ = Terminal(out_.state());
      writing_ = true;
      StartWrite(&out_);
      return;
    }
    // Every terminal transition appends its state event after writing the job record, so
    // the stream ends once such an event has gone out (not merely when the record says the
    // job ended: its event may not be written yet, and would be lost).
    if (sent_terminal_) Stop(grpc::Status::OK);
  }
  void Stop(const grpc::Status& s) {
    if (done_) return;
    done_ = true;
    Finish(s);
  }
  Store* store_;
  Cluster* cluster_;
  std::string job_id_;
  int64_t next_;
  int sub_ = 0;
  std::mutex mu_;
  bool writing_ = false, done_ = false, cancelled_ = false, sent_terminal_ = false;
  v1::JobEvent out_;
};

}  // namespace

CoordinatorService::CoordinatorService(Store* store, Cluster* cluster, metrics::Registry* registry)
    : store_(store), cluster_(cluster), registry_(registry), calls_(kCallThreads), sessions_work_(kSessionThreads),
      sessions_(&sessions_work_) {}

CoordinatorService::~CoordinatorService() {
  sessions_.WaitIdle();  // before the executors: a queued item finishes through sessions_
}

template <typename F>
grpc::ServerUnaryReactor* CoordinatorService::ServeSlow(grpc::CallbackServerContext* ctx, F body) {
  // The body runs on the service's executor and finishes the call there: it may wait for
  // the cluster's locks and the store's WAL syncs, which gRPC's threads must not.
  // body() or body(principal), as ServeUnary's.
  return ServeUnaryLater(ctx, [&](const Principal& who, std::function<void(const absl::Status&)> finish) {
    calls_.Post([finish = std::move(finish), body = std::move(body), who]() mutable {
      finish(edge_internal::CallWith(body, who));
    });
  });
}

absl::Status CoordinatorService::FillQueuePosition(v1::Job* job, const QueuePositions* positions) {
  job->set_queue_position(0);
  job->clear_waiting_for();
  if (!placement::Queued(job->state())) return absl::OkStatus();
  // The queue of its device kind: jobs of other kinds wait for other workers. Its place is in
  // the order the scheduler places them (with quotas the fair share's: Cluster::QueuePosition),
  // from the store's index of the queues, not from reading every job.
  const auto own_spec = cluster_->SpecOf(*job);
  const std::string own_device = own_spec ? own_spec->resources.device : "cpu";
  std::pair<int64_t, std::string> at;
  if (positions != nullptr) {
    if (auto it = positions->find(job->id()); it != positions->end()) at = it->second;
  } else {
    at = cluster_->QueuePosition(job->id());
  }
  if (at.first == 0) return absl::OkStatus();
  job->set_queue_position(at.first);
  // Held by its team's quota or cap at the last pass: that is why, wherever it stands.
  if (std::string hold = cluster_->QuotaHold(job->id()); !hold.empty()) {
    job->set_waiting_for(std::move(hold));
    return absl::OkStatus();
  }
  if (at.first > 1) {
    job->set_waiting_for(absl::StrCat("queued behind ", at.second,
                                      cluster_->QuotasInForce()
                                          ? " (placement is by priority, then the team's share of its quota, then age, "
                                            "within a device kind)"
                                          : " (placement is first come, first served within a priority and device kind)"));
    return absl::OkStatus();
  }
  const Cluster::WorkerCounts n = cluster_->CountWorkers(own_device);
  const auto& spec = own_spec;
  const int want = spec ? spec->MinWorld() : std::max(1, job->world_size()), tp = spec ? spec->parallel.tp : 1;
  const std::string groups = tp > 1 ? absl::StrCat(" in groups of ", tp, " on one host") : "";
  if (own_device == "cpu") {
    job->set_waiting_for(absl::StrCat("waiting for ", want, want == 1 ? " worker" : " workers", groups, " (", n.idle,
                                      " idle of ", n.alive, " attached)"));
  } else {  // one rank per GPU
    job->set_waiting_for(absl::StrCat("waiting for ", want, " ", own_device, want == 1 ? " GPU" : " GPUs", groups, " (",
                                      n.idle_slots, " on ", n.idle, " idle of ", n.alive, " ", own_device,
                                      " workers attached)"));
  }
  if (auto missing = cluster_->MissingCheckpointServers(*job); !missing.empty()) {
    job->set_waiting_for(absl::StrCat(job->waiting_for(), " and shard server ", absl::StrJoin(missing, ", "),
                                      " (holding its checkpoint of step ", job->checkpoint_step(), ")"));
  }
  if (spec && spec->optimizer.placement == "shardserver" && cluster_->ShardServers().empty()) {
    job->set_waiting_for(absl::StrCat(job->waiting_for(), " and a shard server (parameter-server mode)"));
  }
  if (spec && spec->auto_layout()) {  // parallel: auto: the planner's own reason, when it has one
    if (const std::string why = cluster_->AutoWaitReason(job->id()); !why.empty()) job->set_waiting_for(why);
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* CoordinatorService::SubmitJob(grpc::CallbackServerContext* ctx,
                                                        const v1::SubmitJobRequest* req,
                                                        v1::SubmitJobResponse* resp) {
  return ServeSlow(ctx, [this, req, resp](const Principal& who) -> absl::Status {
    RETURN_IF_ERROR(Authorize(who, Action::kSubmitJob, AuthzObject::Cluster()));
    // Parsed here, once (gantry submit checked it with the same parser: the coordinator
    // trusts no client), and kept for the job's life in this coordinator.
    ASSIGN_OR_RETURN(const std::shared_ptr<const jobspec::JobSpec> spec,
                     cluster_->ParseSpec(req->spec_yaml()));  // INVALID_ARGUMENT naming the field
    // Starting from another job's checkpoint reads it: only from a job the submitter may read
    // (one the coordinator no longer knows is nobody's).
    if (const std::string& from = spec->checkpoint.resume_from; !from.empty()) {
      const std::string from_job = from.substr(0, from.find('@'));
      auto source = store_->GetJob(from_job);
      const absl::Status may = Authorize(who, Action::kReadCheckpoint,
                                         source.ok() ? ObjectOf(*source) : AuthzObject::Job(from_job, "", ""));
      if (!may.ok()) return absl::PermissionDeniedError(absl::StrCat("checkpoint.resume_from: ", may.message()));
    }
    // The planner's bytes per rank against the workers there are: a job that cannot fit is
    // refused now, saying why, rather than failing when a worker runs out of memory.
    // (parallel: auto: the layout is the planner's at placement, which fails the job if no
    // layout fits the workers it has, naming the memory needed.)
    if (auto plan = jobspec::MakePlan(jobspec::PlanOfSpec(*spec)); plan.ok() && !spec->auto_layout()) {
      const int64_t largest = cluster_->LargestWorkerMemory();
      if (largest > 0 && plan->total() > 0.9 * static_cast<double>(largest)) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "the job needs %.2f GB per worker (parameters %.2f, gradients %.2f, optimizer %.2f, activations %.2f GB "
            "at micro_batch %d), more than 90%% of the largest worker's %.2f GB: lower train.micro_batch, set "
            "train.recompute: full or raise parallel.zero_stage (gantry plan JOB.yaml shows the figures)",
            plan->total() / 1e9, plan->params / 1e9, plan->grads / 1e9, plan->optimizer / 1e9, plan->activations / 1e9,
            spec->train.micro_batch, static_cast<double>(largest) / 1e9));
      }
    }
    if (!spec->scheduling.preemptible) {
      RETURN_IF_ERROR(cluster_->AdmitNotPreemptible(who.team, spec->resources.device, spec->MinWorld()));
    }
    v1::Job job;
    job.set_name(spec->name);
    job.set_state(v1::PENDING);
    job.set_not_preemptible(!spec->scheduling.preemptible);
    job.set_spec_yaml(req->spec_yaml());  // what the ranks read, as submitted
    job.set_submit_time_unix_ms(NowUnixMs());
    job.set_update_time_unix_ms(job.submit_time_unix_ms());
    job.set_steps_total(spec->train.steps);
    job.set_world_size(spec->auto_layout() ? spec->MinWorld() : spec->world_size());
    job.set_priority(spec->scheduling.priority);
    job.set_owner(who.name);
    job.set_team(who.team);
    // The record, its PENDING event and the audit trail's first line (who submitted it) in
    // one synced write. No lock of the cluster's: a new job is nobody else's to read and
    // change until it has an id, and the store orders this write with the others. The parsed
    // spec is kept, and the job given its queue, before the index shows the job to a
    // scheduling pass: the spec is parsed once.
    v1::JobEvent pending, submitted;
    pending.set_time_unix_ms(job.submit_time_unix_ms());
    pending.set_state(v1::PENDING);
    submitted.set_time_unix_ms(job.submit_time_unix_ms());
    submitted.set_message(absl::StrCat("submitted by ", who.Describe()));
    auto id = store_->CreateJob(job, {pending, submitted}, spec->resources.device,
                                [&](const std::string& new_id) { cluster_->RememberSpec(new_id, spec); });
    if (!id.ok()) return id.status();
    resp->set_job_id(*id);
    registry_->GetCounter("gantry_coordinator_jobs_submitted_total", "Jobs accepted by SubmitJob.").Increment();
    LOG(INFO) << "job " << resp->job_id() << " (" << job.name() << ") submitted by " << who.Describe();
    cluster_->RequestSchedule();  // placed on the cluster's thread, not in this call
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::GetJob(grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
                                                     v1::Job* resp) {
  return ServeSlow(ctx, [this, req, resp](const Principal& who) -> absl::Status {
    auto job = store_->GetJob(req->job_id());
    if (!job.ok()) return job.status();
    RETURN_IF_ERROR(Authorize(who, Action::kReadJob, ObjectOf(*job)));
    *resp = *job;
    return FillQueuePosition(resp, nullptr);
  });
}

grpc::ServerUnaryReactor* CoordinatorService::ListJobs(grpc::CallbackServerContext* ctx,
                                                       const v1::ListJobsRequest* req,
                                                       v1::ListJobsResponse* resp) {
  return ServeSlow(ctx, [this, req, resp](const Principal& who) -> absl::Status {
    RETURN_IF_ERROR(Authorize(who, Action::kListJobs, AuthzObject::Cluster()));
    // Every queued job's place, in one walk of the queues (the specs of queued jobs stored by
    // an earlier coordinator read first: such a job joins its device's queue then).
    for (const auto& id : store_->Unresolved()) {
      if (auto full = store_->GetJob(id); full.ok()) cluster_->SpecOf(*full);
    }
    const QueuePositions positions = cluster_->QueuePositions();
    // A page, newest first: the index gives its jobs (brief records, no read), the store their
    // full records when asked for.
    ASSIGN_OR_RETURN(const size_t size, PageSize(req->page_size()));
    // A token continues the listing of one state and one set of filters.
    const std::string listing = absl::StrCat("jobs/", v1::JobState_Name(req->state()), "/", req->owner(), "/",
                                             req->team(), req->mine() ? "/mine" : "");
    std::string before;
    if (!req->page_token().empty()) {
      ASSIGN_OR_RETURN(before, PageTokenKey(req->page_token(), listing));
    }
    // Pages of the index until this page is full: jobs the filters leave out, or that the
    // caller may not read (a user: other teams'), are passed over.
    bool more = true;
    std::string last;  // the last job looked at
    while (more && static_cast<size_t>(resp->jobs_size()) < size) {
      const auto page = store_->BriefPage(req->state(), before, size - resp->jobs_size(), &more);
      if (page.empty()) break;
      for (const auto& brief : page) {
        last = brief->id();
        if (!Matches(*req, who, *brief) || !MayReadJob(who, brief->owner(), brief->team())) continue;
        v1::Job* j = resp->add_jobs();
        if (req->brief()) {
          *j = *brief;
        } else {
          ASSIGN_OR_RETURN(*j, store_->GetJob(brief->id()));
        }
        RETURN_IF_ERROR(FillQueuePosition(j, &positions));
      }
      before = last;
    }
    if (more && !last.empty()) resp->set_next_page_token(PageToken(listing, last));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::CancelJob(grpc::CallbackServerContext* ctx,
                                                        const v1::CancelJobRequest* req, v1::Job* resp) {
  return ServeSlow(ctx, [this, req, resp](const Principal& who) -> absl::Status {
    // The owner never changes once submitted: read before the cancellation takes its locks.
    ASSIGN_OR_RETURN(const v1::Job job, store_->GetJob(req->job_id()));
    RETURN_IF_ERROR(Authorize(who, Action::kCancelJob, ObjectOf(job)));
    ASSIGN_OR_RETURN(*resp, cluster_->CancelJob(req->job_id(), who.Describe()));
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<v1::JobEvent>* CoordinatorService::WatchJob(grpc::CallbackServerContext* ctx,
                                                                     const v1::WatchJobRequest* req) {
  using Reactor = grpc::ServerWriteReactor<v1::JobEvent>;
  return ServeStream<Reactor>(ctx, [&](const Principal& who) -> Reactor* {
    // An unknown job is WatchReactor's NOT_FOUND; a known one is read only by who may.
    if (auto job = store_->GetJob(req->job_id()); job.ok()) {
      if (absl::Status s = Authorize(who, Action::kReadJob, ObjectOf(*job)); !s.ok()) return new Refused<Reactor>(ToGrpc(s));
    }
    return new WatchReactor(store_, cluster_, *req);
  });
}

grpc::ServerUnaryReactor* CoordinatorService::ListWorkers(grpc::CallbackServerContext* ctx,
                                                          const v1::ListWorkersRequest* req,
                                                          v1::ListWorkersResponse* resp) {
  return ServeSlow(ctx, [this, req, resp](const Principal& who) -> absl::Status {
    RETURN_IF_ERROR(Authorize(who, Action::kListWorkers, AuthzObject::Cluster()));
    ASSIGN_OR_RETURN(const size_t size, PageSize(req->page_size()));
    std::string after;
    if (!req->page_token().empty()) {
      ASSIGN_OR_RETURN(after, PageTokenKey(req->page_token(), "workers"));
    }
    std::vector<v1::Worker> workers = cluster_->Workers();  // in id order
    auto it = workers.begin();
    if (!after.empty()) {
      it = std::upper_bound(workers.begin(), workers.end(), after, [](const std::string& key, const v1::Worker& w) {
        return placement::JobIdLess()(key, w.id());  // ids of one width: by length, then text
      });
    }
    for (; it != workers.end() && static_cast<size_t>(resp->workers_size()) < size; ++it) *resp->add_workers() = std::move(*it);
    if (it != workers.end()) resp->set_next_page_token(PageToken("workers", resp->workers().rbegin()->id()));
    return absl::OkStatus();
  });
}

grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>* CoordinatorService::Attach(
    grpc::CallbackServerContext* ctx) {
  using Reactor = grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>;
  return ServeStream<Reactor>(ctx, [&](const Principal& who) -> Reactor* {
    if (absl::Status s = Authorize(who, Action::kAttach, AuthzObject::Cluster()); !s.ok()) {
      return new Refused<Reactor>(ToGrpc(s));
    }
    return new AttachReactor(cluster_, &sessions_, absl::StrCat("attach-", next_session_++));
  });
}

grpc::ServerUnaryReactor* CoordinatorService::RendezvousPut(grpc::CallbackServerContext* ctx,
                                                            const v1::RendezvousPutRequest* req,
                                                            v1::RendezvousPutResponse*) {
  return ServeUnary(ctx, [&](const Principal& who) {
    RETURN_IF_ERROR(Authorize(who, Action::kRendezvous, AuthzObject::Job(req->job_id(), "", "")));
    return cluster_->RendezvousPut(req->job_id(), req->generation(), req->key(), req->value());
  });
}

grpc::ServerUnaryReactor* CoordinatorService::RendezvousGet(grpc::CallbackServerContext* ctx,
                                                            const v1::RendezvousGetRequest* req,
                                                            v1::RendezvousGetResponse* resp) {
  // Completes when the key is put or the wait ends, on whichever thread that happens; the
  // handler itself returns at once.
  return ServeUnaryLater(ctx, [&](const Principal& who, std::function<void(const absl::Status&)> finish) {
    if (absl::Status s = Authorize(who, Action::kRendezvous, AuthzObject::Job(req->job_id(), "", "")); !s.ok()) {
      return finish(s);
    }
    const int64_t wait_ms = std::min<int64_t>(std::max<int64_t>(req->wait_ms(), 0), 10 * 60 * 1000);
    cluster_->RendezvousGet(req->job_id(), req->generation(), req->key(), wait_ms,
                            [finish, resp](absl::StatusOr<std::string> v) {
                              if (v.ok()) resp->set_value(*std::move(v));
                              finish(v.status());
                            });
  });
}

grpc::ServerUnaryReactor* CoordinatorService::RegisterShardServer(grpc::CallbackServerContext* ctx,
                                                                  const v1::RegisterShardServerRequest* req,
                                                                  v1::RegisterShardServerResponse*) {
  return ServeSlow(ctx, [this, req](const Principal& who) -> absl::Status {
    RETURN_IF_ERROR(Authorize(who, Action::kRegisterShardServer, AuthzObject::Cluster()));
    if (req->address().empty()) return absl::InvalidArgumentError("address is required");
    cluster_->RegisterShardServer(*req);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::ListShardServers(grpc::CallbackServerContext* ctx,
                                                               const v1::ListShardServersRequest*,
                                                               v1::ListShardServersResponse* resp) {
  return ServeSlow(ctx, [this, resp](const Principal& who) -> absl::Status {
    RETURN_IF_ERROR(Authorize(who, Action::kListShardServers, AuthzObject::Cluster()));
    for (auto& s : cluster_->ShardServers()) *resp->add_shard_servers() = std::move(s);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::WhoAmI(grpc::CallbackServerContext* ctx, const v1::WhoAmIRequest*,
                                                     v1::WhoAmIResponse* resp) {
  return ServeUnary(ctx, [resp](const Principal& who) {
    RETURN_IF_ERROR(Authorize(who, Action::kWhoAmI, AuthzObject::Cluster()));
    resp->set_name(who.name);
    resp->set_kind(std::string(KindName(who.kind)));
    resp->set_team(who.team);
    resp->set_role(std::string(RoleName(who.role)));
    resp->set_authenticated_by(who.via);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::GetQuotas(grpc::CallbackServerContext* ctx,
                                                        const v1::GetQuotasRequest* req, v1::GetQuotasResponse* resp) {
  return ServeSlow(ctx, [this, req, resp](const Principal& who) -> absl::Status {
    // One team asked for, or a user's own; viewers and admins may ask for every team.
    const bool every = req->team().empty() && MayReadQuotaOfEveryTeam(who);
    const std::string team = req->team().empty() ? who.team : req->team();
    if (!every) RETURN_IF_ERROR(Authorize(who, Action::kReadQuota, AuthzObject::Team(team)));
    v1::GetQuotasResponse all = cluster_->QuotaReport();
    resp->set_quotas_in_force(all.quotas_in_force());
    for (auto& t : *all.mutable_teams()) {
      if (every || t.team() == team) *resp->add_teams() = std::move(t);
    }
    return absl::OkStatus();
  });
}

}  // namespace gantry::coordinator
