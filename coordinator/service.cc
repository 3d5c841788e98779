#include "coordinator/service.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "worker/train/job_spec.h"

namespace gantry::coordinator {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool Terminal(v1::JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
}

}  // namespace

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

CoordinatorService::CoordinatorService(Store* store, metrics::Registry* registry)
    : store_(store), registry_(registry) {
  RefreshJobGauges();
}

template <typename F>
grpc::ServerUnaryReactor* CoordinatorService::Handle(grpc::CallbackServerContext* ctx, const char* method, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = f();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  registry_->GetHistogram("gantry_coordinator_rpc_seconds", "Coordinator RPC handling time.",
                          metrics::ExponentialBuckets(1e-4, 4, 10), {{"method", method}})
      .Observe(secs);
  registry_->GetCounter("gantry_coordinator_rpcs_total", "Coordinator RPCs by method and code.",
                        {{"method", method}, {"code", absl::StatusCodeToString(s.code())}})
      .Inc();
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpc(s));
  return reactor;
}

void CoordinatorService::RefreshJobGauges() {
  auto jobs = store_->ListJobs();
  if (!jobs.ok()) return;
  std::map<int, int> by_state;
  for (const auto& j : *jobs) ++by_state[j.state()];
  for (int s = v1::PENDING; s <= v1::CANCELLED; ++s) {
    registry_->GetGauge("gantry_coordinator_jobs", "Jobs known to the coordinator, by state.",
                        {{"state", v1::JobState_Name(static_cast<v1::JobState>(s))}})
        .Set(by_state[s]);
  }
}

absl::Status CoordinatorService::FillQueuePosition(v1::Job* job, const std::vector<v1::Job>* all) {
  job->set_queue_position(0);
  if (job->state() != v1::PENDING) return absl::OkStatus();
  std::vector<v1::Job> loaded;
  if (all == nullptr) {
    auto jobs = store_->ListJobs();
    if (!jobs.ok()) return jobs.status();
    loaded = std::move(*jobs);
    all = &loaded;
  }
  int64_t pos = 0;
  for (const auto& j : *all) {  // id order = submission order (FIFO)
    if (j.state() == v1::PENDING) ++pos;
    if (j.id() == job->id()) break;
  }
  job->set_queue_position(pos);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* CoordinatorService::SubmitJob(grpc::CallbackServerContext* ctx,
                                                        const v1::SubmitJobRequest* req,
                                                        v1::SubmitJobResponse* resp) {
  return Handle(ctx, "SubmitJob", [&]() -> absl::Status {
    auto spec = train::ParseJobSpec(req->spec_yaml());
    if (!spec.ok()) return spec.status();  // INVALID_ARGUMENT naming the field
    v1::Job job;
    job.set_name(spec->name);
    job.set_state(v1::PENDING);
    job.set_spec_yaml(req->spec_yaml());
    job.set_submit_time_unix_ms(NowMs());
    job.set_update_time_unix_ms(job.submit_time_unix_ms());
    job.set_steps_total(spec->train.steps);
    job.set_world_size(1);
    std::lock_guard<std::mutex> l(mu_);
    auto id = store_->CreateJob(job);
    if (!id.ok()) return id.status();
    v1::JobEvent e;
    e.set_job_id(*id);
    e.set_time_unix_ms(job.submit_time_unix_ms());
    e.set_state(v1::PENDING);
    if (auto s = store_->AppendEvent(e); !s.ok()) return s.status();
    resp->set_job_id(*id);
    registry_->GetCounter("gantry_coordinator_jobs_submitted_total", "Jobs accepted by SubmitJob.").Inc();
    RefreshJobGauges();
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::GetJob(grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
                                                     v1::Job* resp) {
  return Handle(ctx, "GetJob", [&]() -> absl::Status {
    auto job = store_->GetJob(req->job_id());
    if (!job.ok()) return job.status();
    *resp = *job;
    return FillQueuePosition(resp, nullptr);
  });
}

grpc::ServerUnaryReactor* CoordinatorService::ListJobs(grpc::CallbackServerContext* ctx,
                                                       const v1::ListJobsRequest* req,
                                                       v1::ListJobsResponse* resp) {
  return Handle(ctx, "ListJobs", [&]() -> absl::Status {
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
  return Handle(ctx, "CancelJob", [&]() -> absl::Status {
    std::lock_guard<std::mutex> l(mu_);
    auto job = store_->GetJob(req->job_id());
    if (!job.ok()) return job.status();
    if (!Terminal(job->state())) {
      job->set_state(v1::CANCELLED);
      job->set_reason("cancelled by the user");
      job->set_update_time_unix_ms(NowMs());
      if (auto s = store_->PutJob(*job); !s.ok()) return s;
      v1::JobEvent e;
      e.set_job_id(job->id());
      e.set_time_unix_ms(job->update_time_unix_ms());
      e.set_state(v1::CANCELLED);
      if (auto s = store_->AppendEvent(e); !s.ok()) return s.status();
      RefreshJobGauges();
    }
    *resp = *job;
    return absl::OkStatus();
  });
}

}  // namespace gantry::coordinator
