#include "shardserver/param_service.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/status.h"
#include "kernels/adamw.h"

namespace gantry::shardserver {

namespace {
constexpr size_t kMaxPayloadBytes = 4 << 20;
}

template <typename F>
grpc::ServerUnaryReactor* ParamService::Handle(grpc::CallbackServerContext* ctx, const char* method, F&& body) {
  const auto t0 = std::chrono::steady_clock::now();
  const absl::Status s = body();
  metrics::RecordRpc(*registry_, "shardserver", method, absl::StatusCodeToString(s.code()),
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  auto* r = ctx->DefaultReactor();
  r->Finish(ToGrpc(s));
  return r;
}

absl::StatusOr<ParamService::Range*> ParamService::Find(const std::string& job, int64_t generation) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = ranges_.find(job);
  if (it == ranges_.end()) return absl::NotFoundError(absl::StrCat("job ", job, " has no parameter range here (InitRange first)"));
  if (it->second->generation != generation) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job, " is at generation ", it->second->generation,
                                                      " here, not ", generation));
  }
  return it->second.get();
}

grpc::ServerUnaryReactor* ParamService::InitRange(grpc::CallbackServerContext* ctx, const v1::InitRangeRequest* req,
                                                  v1::InitRangeResponse*) {
  return Handle(ctx, "InitRange", [&]() -> absl::Status {
    const int64_t b = req->range().begin(), e = req->range().end();
    if (req->job_id().empty() || b < 0 || e <= b) {
      return absl::InvalidArgumentError(absl::StrCat("InitRange needs a job and a range, got '", req->job_id(), "' [", b, ", ", e, ")"));
    }
    auto r = std::make_unique<Range>();
    r->generation = req->generation();
    r->begin = static_cast<size_t>(b);
    r->end = static_cast<size_t>(e);
    r->beta1 = req->beta1();
    r->beta2 = req->beta2();
    r->eps = req->eps();
    r->weight_decay = req->weight_decay();
    // Runs of [0, size) with one decay flag each.
    std::vector<char> decay(r->size(), 0);
    for (const auto& d : req->decay()) {
      const int64_t db = std::max(d.begin(), b), de = std::min(d.end(), e);
      for (int64_t i = db; i < de; ++i) decay[static_cast<size_t>(i - b)] = 1;
    }
    for (size_t i = 0; i < decay.size();) {
      size_t j = i;
      while (j < decay.size() && decay[j] == decay[i]) ++j;
      r->runs.push_back({i, j, decay[i] != 0});
      i = j;
    }
    r->params.Assign(r->size());
    r->m.Assign(r->size());
    r->v.Assign(r->size());
    r->grad.Assign(r->size());
    r->step = req->step();
    std::lock_guard<std::mutex> l(mu_);
    ranges_[req->job_id()] = std::move(r);
    registry_->GetGauge("gantry_shardserver_optimizer_params", "Parameters whose AdamW state this shard server holds.")
        .Set(static_cast<double>(e - b));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* ParamService::WriteParams(grpc::CallbackServerContext* ctx, const v1::ParamsChunk* req,
                                                    v1::ParamsAck*) {
  return Handle(ctx, "WriteParams", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(Range * r, Find(req->job_id(), req->generation()));
    const size_t n = req->data().size() / sizeof(float);
    if (req->data().size() % sizeof(float) != 0 || req->offset() < static_cast<int64_t>(r->begin) ||
        static_cast<size_t>(req->offset()) + n > r->end) {
      return absl::InvalidArgumentError(absl::StrCat("parameters [", req->offset(), ", +", req->data().size(),
                                                     " bytes) are not within the range [", r->begin, ", ", r->end, ")"));
    }
    std::lock_guard<std::mutex> l(r->mu);
    std::memcpy(r->Buffer(req->buffer())->data() + (req->offset() - r->begin), req->data().data(), req->data().size());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* ParamService::PushGradients(grpc::CallbackServerContext* ctx, const v1::GradientChunk* req,
                                                      v1::PushAck* resp) {
  return Handle(ctx, "PushGradients", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(Range * r, Find(req->job_id(), req->generation()));
    const size_t n = req->data().size() / sizeof(float);
    if (req->data().size() % sizeof(float) != 0 || req->data().size() > kMaxPayloadBytes ||
        req->offset() < static_cast<int64_t>(r->begin) || static_cast<size_t>(req->offset()) + n > r->end) {
      return absl::InvalidArgumentError(absl::StrCat("gradients [", req->offset(), ", +", n,
                                                     ") are not within the range [", r->begin, ", ", r->end, ")"));
    }
    std::lock_guard<std::mutex> l(r->mu);
    if (req->step() != r->step + 1) {
      return absl::FailedPreconditionError(absl::StrCat("gradients of step ", req->step(), " pushed; the range of ",
                                                        req->job_id(), " expects step ", r->step + 1));
    }
    std::memcpy(r->grad.data() + (req->offset() - r->begin), req->data().data(), req->data().size());
    r->covered += n;
    if (r->covered < r->size()) return absl::OkStatus();
    if (r->covered > r->size()) {
      r->covered = 0;
      return absl::InvalidArgumentError(absl::StrCat("step ", req->step(), ": more gradient pushed than the range holds "
                                                     "(overlapping pushes)"));
    }
    // The whole range's gradient is here: one AdamW step.
    for (const Run& run : r->runs) {
      kernels::AdamWParams hp{static_cast<float>(req->lr()), static_cast<float>(r->beta1), static_cast<float>(r->beta2),
                              static_cast<float>(r->eps), run.decay ? static_cast<float>(r->weight_decay) : 0.f,
                              static_cast<int>(req->step())};
      kernels::adamw_update(r->params.data() + run.begin, r->grad.data() + run.begin, r->m.data() + run.begin,
                            r->v.data() + run.begin, static_cast<int64_t>(run.end - run.begin), hp);
    }
    r->covered = 0;
    r->step = req->step();
    resp->set_applied(true);
    registry_->GetCounter("gantry_shardserver_optimizer_steps_total", "AdamW steps run for parameter-server jobs.").Inc();
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* ParamService::ReadParams(grpc::CallbackServerContext* ctx, const v1::ReadParamsRequest* req,
                                                   v1::ParamsChunk* resp) {
  return Handle(ctx, "ReadParams", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(Range * r, Find(req->job_id(), req->generation()));
    if (req->offset() < static_cast<int64_t>(r->begin) || req->count() < 0 ||
        static_cast<size_t>(req->offset() + req->count()) > r->end ||
        static_cast<size_t>(req->count()) * sizeof(float) > kMaxPayloadBytes) {
      return absl::InvalidArgumentError(absl::StrCat("read [", req->offset(), ", +", req->count(),
                                                     ") is not within the range [", r->begin, ", ", r->end,
                                                     ") or exceeds ", kMaxPayloadBytes, " bytes"));
    }
    std::lock_guard<std::mutex> l(r->mu);
    resp->set_job_id(req->job_id());
    resp->set_generation(req->generation());
    resp->set_offset(req->offset());
    resp->set_version(r->step);
    resp->set_buffer(req->buffer());
    resp->set_data(reinterpret_cast<const char*>(r->Buffer(req->buffer())->data() + (req->offset() - r->begin)),
                   static_cast<size_t>(req->count()) * sizeof(float));
    return absl::OkStatus();
  });
}

}  // namespace gantry::shardserver
