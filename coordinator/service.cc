#include "coordinator/service.h"

#include "coordinator/job_state.h"
#include "coordinator/placement.h"

#include <glog/logging.h>

#include <deque>
#include <functional>

#include "absl/strings/str_cat.h"
#include "common/rpc_edge.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "spec/job_spec.h"
#include "spec/planner.h"

namespace gantry::coordinator {
namespace {



// One worker's attach stream.
class AttachReactor : public grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>,
                      public WorkerSession {
 public:
  explicit AttachReactor(Cluster* cluster) : cluster_(cluster) { StartRead(&in_); }

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
      Close("its attach stream closed");
      return;
    }
    if (in_.has_register_()) {
      if (id_.empty()) id_ = cluster_->AddWorker(this, in_.register_());
    } else if (id_.empty()) {
      Close("first message was not a registration", grpc::Status(grpc::FAILED_PRECONDITION, "register first"));
      return;
    } else if (in_.has_heartbeat()) {
      cluster_->Heartbeat(id_, &in_.heartbeat());
    } else if (in_.has_step()) {
      cluster_->OnStep(id_, in_.step());
    } else if (in_.has_done()) {
      cluster_->OnDone(id_, in_.done());
    } else if (in_.has_checkpoint_part()) {
      cluster_->OnCheckpointPart(id_, in_.checkpoint_part());
    }
    StartRead(&in_);
  }
  void OnDone() override { delete this; }  // Close() ran before Finish()
  // The cluster counted this worker out (it holds its lock and forgets the session now).
  void End(const std::string& why) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(grpc::Status(grpc::UNAVAILABLE, "counted out: " + why + "; attach again"));
  }

 private:
  // Order matters: refuse further sends, leave the cluster (after which it never calls Send
  // on this session again), and only then Finish: OnDone, which deletes this reactor, can
  // run as soon as Finish is called.
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
  v1::WorkerMessage in_;
  std::mutex mu_;
  std::deque<v1::CoordinatorMessage> out_;
  bool writing_ = false;
  bool finished_ = false;
  std::string id_;
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
    sub_ = cluster_->Subscribe([this] { Pump(); });
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
    : store_(store), cluster_(cluster), registry_(registry) {}

absl::Status CoordinatorService::FillQueuePosition(v1::Job* job, const std::vector<v1::Job>* all) {
  job->set_queue_position(0);
  job->clear_waiting_for();
  if (!placement::Queued(job->state())) return absl::OkStatus();
  std::vector<v1::Job> loaded;
  if (all == nullptr) {
    auto jobs = store_->ListJobs();
    if (!jobs.ok()) return jobs.status();
    loaded = std::move(*jobs);
    all = &loaded;
  }
  // The queue of its device kind: jobs of other kinds wait for other workers.
  const auto own_spec = cluster_->SpecOf(*job);
  const std::string own_device = own_spec ? own_spec->resources.device : "cpu";
  std::vector<v1::Job> queue;
  for (auto& q : placement::QueueOrder(*all)) {
    const auto qs = cluster_->SpecOf(q);
    if ((qs ? qs->resources.device : "cpu") == own_device) queue.push_back(std::move(q));
  }
  for (size_t i = 0; i < queue.size(); ++i) {
    if (queue[i].id() != job->id()) continue;
    job->set_queue_position(static_cast<int64_t>(i + 1));
    if (i > 0) {
      job->set_waiting_for(absl::StrCat("queued behind ", queue[i - 1].id(),
                                        " (placement is first come, first served within a priority and device kind)"));
      break;
    }
    int alive = 0, idle = 0, idle_gpus = 0;
    for (const auto& w : cluster_->Workers()) {
      if (!placement::Offers(w.resources(), own_device)) continue;
      alive += w.state() != "dead";
      idle += w.state() == "idle";
      if (w.state() == "idle") idle_gpus += placement::SlotsOf(w.resources());
    }
    const auto& spec = own_spec;
    const int want = spec ? spec->MinWorld() : std::max(1, job->world_size()), tp = spec ? spec->parallel.tp : 1;
    const std::string groups = tp > 1 ? absl::StrCat(" in groups of ", tp, " on one host") : "";
    if (own_device == "cpu") {
      job->set_waiting_for(absl::StrCat("waiting for ", want, want == 1 ? " worker" : " workers", groups, " (", idle,
                                        " idle of ", alive, " attached)"));
    } else {  // one rank per GPU
      job->set_waiting_for(absl::StrCat("waiting for ", want, " ", own_device, want == 1 ? " GPU" : " GPUs", groups,
                                        " (", idle_gpus, " on ", idle, " idle of ", alive, " ", own_device,
                                        " workers attached)"));
    }
    if (auto missing = cluster_->MissingCheckpointServers(*job); !missing.empty()) {
      job->set_waiting_for(absl::StrCat(job->waiting_for(), " and shard server ", absl::StrJoin(missing, ", "),
                                        " (holding its checkpoint of step ", job->checkpoint_step(), ")"));
    }
    if (spec && spec->optimizer.placement == "shardserver" && cluster_->ShardServers().empty()) {
      job->set_waiting_for(absl::StrCat(job->waiting_for(), " and a shard server (parameter-server mode)"));
    }
    break;
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* CoordinatorService::SubmitJob(grpc::CallbackServerContext* ctx,
                                                        const v1::SubmitJobRequest* req,
                                                        v1::SubmitJobResponse* resp) {
  return ServeUnary(ctx, [&]() -> absl::Status {
    auto spec = train::ParseJobSpec(req->spec_yaml());
    if (!spec.ok()) return spec.status();  // INVALID_ARGUMENT naming the field
    // The planner's bytes per rank against the workers there are: a job that cannot fit is
    // refused now, saying why, rather than failing when a worker runs out of memory.
    if (auto plan = train::MakePlan(train::PlanOfSpec(*spec)); plan.ok()) {
      int64_t largest = 0;
      for (const auto& w : cluster_->Workers()) {
        if (w.state() != "dead") largest = std::max<int64_t>(largest, w.resources().memory_bytes());
      }
      if (largest > 0 && plan->total() > 0.9 * static_cast<double>(largest)) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "the job needs %.2f GB per worker (parameters %.2f, gradients %.2f, optimizer %.2f, activations %.2f GB "
            "at micro_batch %d), more than 90%% of the largest worker's %.2f GB: lower train.micro_batch, set "
            "train.recompute: full or raise parallel.zero_stage (gantry plan JOB.yaml shows the figures)",
            plan->total() / 1e9, plan->params / 1e9, plan->grads / 1e9, plan->optimizer / 1e9, plan->activations / 1e9,
            spec->train.micro_batch, static_cast<double>(largest) / 1e9));
      }
    }
    v1::Job job;
    job.set_name(spec->name);
    job.set_state(v1::PENDING);
    job.set_spec_yaml(req->spec_yaml());
    job.set_spec_normalised(train::ToYaml(*spec));
    job.set_submit_time_unix_ms(NowUnixMs());
    job.set_update_time_unix_ms(job.submit_time_unix_ms());
    job.set_steps_total(spec->train.steps);
    job.set_world_size(spec->world_size());
    job.set_priority(spec->scheduling.priority);
    {
      std::lock_guard<std::mutex> l(cluster_->job_mu());
      auto id = store_->CreateJob(job);
      if (!id.ok()) return id.status();
      resp->set_job_id(*id);
      cluster_->RememberSpec(*id, *spec);  // parsed once: what placement and the ranks use
      if (auto s = cluster_->AddEvent([&] {
            v1::JobEvent e;
            e.set_job_id(*id);
            e.set_time_unix_ms(job.submit_time_unix_ms());
            e.set_state(v1::PENDING);
            return e;
          }());
          !s.ok()) {
        return s;
      }
    }
    registry_->GetCounter("gantry_coordinator_jobs_submitted_total", "Jobs accepted by SubmitJob.").Inc();
    LOG(INFO) << "job " << resp->job_id() << " (" << job.name() << ") submitted";
    cluster_->JobSubmitted();
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::GetJob(grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
                                                     v1::Job* resp) {
  return ServeUnary(ctx, [&]() -> absl::Status {
    auto job = store_->GetJob(req->job_id());
    if (!job.ok()) return job.status();
    *resp = *job;
    return FillQueuePosition(resp, nullptr);
  });
}

grpc::ServerUnaryReactor* CoordinatorService::ListJobs(grpc::CallbackServerContext* ctx,
                                                       const v1::ListJobsRequest* req,
                                                       v1::ListJobsResponse* resp) {
  return ServeUnary(ctx, [&]() -> absl::Status {
    auto jobs = store_->ListJobs();
    if (!jobs.ok()) return jobs.status();
    for (auto it = jobs->rbegin(); it != jobs->rend(); ++it) {  // newest first
      if (req->state() != v1::JOB_STATE_UNSPECIFIED && it->state() != req->state()) continue;
      v1::Job* j = resp->add_jobs();
      *j = *it;
      if (auto s = FillQueuePosition(j, &*jobs); !s.ok()) return s;
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::CancelJob(grpc::CallbackServerContext* ctx,
                                                        const v1::CancelJobRequest* req, v1::Job* resp) {
  return ServeUnary(ctx, [&]() -> absl::Status {
    v1::Job before;
    {
      std::lock_guard<std::mutex> l(cluster_->job_mu());
      auto job = store_->GetJob(req->job_id());
      if (!job.ok()) return job.status();
      before = *job;
      if (!Terminal(job->state())) {
        job->set_reason("cancelled by the user");
        if (auto s = cluster_->Transition(*job, v1::CANCELLED); !s.ok()) return s;
      }
      *resp = *job;
    }
    if (!Terminal(before.state())) cluster_->JobCancelled(before);
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<v1::JobEvent>* CoordinatorService::WatchJob(grpc::CallbackServerContext* ctx,
                                                                     const v1::WatchJobRequest* req) {
  return ServeStream<grpc::ServerWriteReactor<v1::JobEvent>>(ctx, [&] { return new WatchReactor(store_, cluster_, *req); });
}

grpc::ServerUnaryReactor* CoordinatorService::ListWorkers(grpc::CallbackServerContext* ctx,
                                                          const v1::ListWorkersRequest*,
                                                          v1::ListWorkersResponse* resp) {
  return ServeUnary(ctx, [&]() -> absl::Status {
    for (auto& w : cluster_->Workers()) *resp->add_workers() = std::move(w);
    return absl::OkStatus();
  });
}

grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>* CoordinatorService::Attach(
    grpc::CallbackServerContext* ctx) {
  return ServeStream<grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>>(
      ctx, [&] { return new AttachReactor(cluster_); });
}

grpc::ServerUnaryReactor* CoordinatorService::RendezvousPut(grpc::CallbackServerContext* ctx,
                                                            const v1::RendezvousPutRequest* req,
                                                            v1::RendezvousPutResponse*) {
  return ServeUnary(ctx, [&]() {
    return cluster_->RendezvousPut(req->job_id(), req->generation(), req->key(), req->value());
  });
}

grpc::ServerUnaryReactor* CoordinatorService::RendezvousGet(grpc::CallbackServerContext* ctx,
                                                            const v1::RendezvousGetRequest* req,
                                                            v1::RendezvousGetResponse* resp) {
  // Completes when the key is put or the wait ends, on whichever thread that happens; the
  // handler itself returns at once.
  return ServeUnaryLater(ctx, [&](std::function<void(const absl::Status&)> finish) {
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
  return ServeUnary(ctx, [&]() -> absl::Status {
    if (req->address().empty()) return absl::InvalidArgumentError("address is required");
    cluster_->RegisterShardServer(*req);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::ListShardServers(grpc::CallbackServerContext* ctx,
                                                               const v1::ListShardServersRequest*,
                                                               v1::ListShardServersResponse* resp) {
  return ServeUnary(ctx, [&]() -> absl::Status {
    for (auto& s : cluster_->ShardServers()) *resp->add_shard_servers() = std::move(s);
    return absl::OkStatus();
  });
}

}  // namespace gantry::coordinator
