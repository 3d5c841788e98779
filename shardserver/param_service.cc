#include "shardserver/param_service.h"

#include "common/authz.h"
#include "common/rpc_edge.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_util.h"
#include "common/status.h"

namespace gantry::shardserver {

namespace {
constexpr size_t kMaxPayloadBytes = 4 << 20;
}

absl::Status ParamService::CheckWithin(const Range& r, const char* what, int64_t offset, size_t n) {
  if (offset < static_cast<int64_t>(r.begin) || static_cast<size_t>(offset) + n > r.end) {
    return absl::InvalidArgumentError(absl::StrCat(what, " [", offset, ", +", n, ") is not within the range [", r.begin,
                                                   ", ", r.end, ")"));
  }
  return absl::OkStatus();
}

absl::Status ParamService::CheckPayload(const Range& r, const char* what, int64_t offset, size_t bytes) {
  if (bytes % sizeof(float) != 0 || bytes > kMaxPayloadBytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", bytes, " bytes is not a whole number of floats within ",
                                                   kMaxPayloadBytes, " bytes"));
  }
  return CheckWithin(r, what, offset, bytes / sizeof(float));
}

absl::StatusOr<std::shared_ptr<ParamService::Range>> ParamService::Find(const std::string& job, int64_t generation) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = ranges_.find(job);
  if (it == ranges_.end()) return absl::NotFoundError(absl::StrCat("job ", job, " has no parameter range here (InitRange first)"));
  if (it->second->generation != generation) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job, " is at generation ", it->second->generation,
                                                      " here, not ", generation));
  }
  return it->second;
}

grpc::ServerUnaryReactor* ParamService::InitRange(grpc::CallbackServerContext* ctx, const v1::InitRangeRequest* req,
                                                  v1::InitRangeResponse*) {
  return ServeUnary(ctx, [&](const Principal& who) -> absl::Status {
    RETURN_IF_ERROR(Authorize(who, Action::kParamServer, AuthzObject::Job(req->job_id(), "", "")));
    const int64_t b = req->range().begin(), e = req->range().end();
    if (req->job_id().empty() || b < 0 || e <= b) {
      return absl::InvalidArgumentError(absl::StrCat("InitRange needs a job and a range, got '", req->job_id(), "' [", b, ", ", e, ")"));
    }
    // The range's buffers (parameters, gradient, AdamW's m and v: 16 bytes an element, and a
    // byte of the decay map) are allocated below: a range past this machine's memory is
    // refused, not attempted (found by tests/fuzz/param_wire_fuzz: [0, 2^62) threw
    // std::bad_alloc out of the handler, which ends the process).
    const double need = 17.0 * static_cast<double>(e - b);
    const double have = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
    if (need > have) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "InitRange of job %s: [%d, %d) is %d parameters, %.1f GB with their AdamW state, more than this machine's "
          "%.1f GB",
          req->job_id(), b, e, e - b, need / 1e9, have / 1e9));
    }
    auto r = std::make_unique<Range>();
    r->generation = req->generation();
    r->begin = static_cast<size_t>(b);
    r->end = static_cast<size_t>(e);
    r->adamw.beta1 = req->beta1();
    r->adamw.beta2 = req->beta2();
    r->adamw.eps = req->eps();
    r->adamw.weight_decay = req->weight_decay();
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
    std::shared_ptr<Range>& slot = ranges_[req->job_id()];
    if (slot) {  // requests still holding the old range fail rather than change it unseen
      std::lock_guard<std::mutex> old(slot->mu);
      slot->retired = true;
    }
    slot = std::move(r);
    registry_->GetGauge("gantry_shardserver_optimizer_params", "Parameters whose AdamW state this shard server holds.")
        .Set(static_cast<double>(e - b));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* ParamService::WriteParams(grpc::CallbackServerContext* ctx, const v1::ParamsChunk* req,
                                                    v1::ParamsAck*) {
  return ServeUnary(ctx, [&](const Principal& who) -> absl::Status {
    RETURN_IF_ERROR(Authorize(who, Action::kParamServer, AuthzObject::Job(req->job_id(), "", "")));
    ASSIGN_OR_RETURN(std::shared_ptr<Range> r, Find(req->job_id(), req->generation()));
    RETURN_IF_ERROR(CheckPayload(*r, "parameters", req->offset(), req->data().size()));
    std::lock_guard<std::mutex> l(r->mu);
    ++r->changes;
    std::memcpy(r->Buffer(req->buffer())->data() + (req->offset() - r->begin), req->data().data(), req->data().size());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* ParamService::PushGradients(grpc::CallbackServerContext* ctx, const v1::GradientChunk* req,
                                                      v1::PushAck* resp) {
  return ServeUnary(ctx, [&](const Principal& who) -> absl::Status {
    RETURN_IF_ERROR(Authorize(who, Action::kParamServer, AuthzObject::Job(req->job_id(), "", "")));
    ASSIGN_OR_RETURN(std::shared_ptr<Range> r, Find(req->job_id(), req->generation()));
    const size_t n = req->data().size() / sizeof(float);
    RETURN_IF_ERROR(CheckPayload(*r, "gradients", req->offset(), req->data().size()));
    std::lock_guard<std::mutex> l(r->mu);
    RETURN_IF_ERROR(CheckPushStepLocked(*r, req->job_id(), req->step()));
    RETURN_IF_ERROR(CheckNotArrivingLocked(*r, static_cast<size_t>(req->offset()) - r->begin, n));
    std::memcpy(r->grad.data() + (req->offset() - r->begin), req->data().data(), req->data().size());
    bool applied = false;
    RETURN_IF_ERROR(CompletePushLocked(r.get(), req->step(), req->lr(), n, &applied));
    resp->set_applied(applied);
    return absl::OkStatus();
  });
}

absl::Status ParamService::CheckPushStepLocked(const Range& r, const std::string& job, int64_t step) {
  if (step == r.step + 1) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("gradients of step ", step, " pushed; the range of ", job, " expects step ", r.step + 1));
}

absl::Status ParamService::CheckNotArrivingLocked(const Range& r, size_t at, size_t n) {
  for (const auto& [b, e] : r.arriving) {
    if (at < e && b < at + n) {
      return absl::FailedPreconditionError(absl::StrCat("gradients [", r.begin + at, ", +", n, ") overlap a push of [",
                                                        r.begin + b, ", ", r.begin + e, ") still arriving"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParamService::CompletePushLocked(Range* r, int64_t step, double lr, size_t n, bool* applied) {
  r->covered += n;
  if (r->covered < r->size()) return absl::OkStatus();
  // Complete with a data port push still arriving: pushes overlap, and AdamW must not read
  // the gradient that push is writing.
  if (r->covered > r->size() || !r->arriving.empty()) {
    r->covered = 0;
    return absl::InvalidArgumentError(absl::StrCat("step ", step, ": more gradient pushed than the range holds "
                                                   "(overlapping pushes)"));
  }
  // The whole range's gradient is here: one AdamW step.
  for (const Run& run : r->runs) {
    const kernels::AdamWParams hp = r->adamw.Params(lr, step, run.decay);
    kernels::adamw_update(r->params.data() + run.begin, r->grad.data() + run.begin, r->m.data() + run.begin,
                          r->v.data() + run.begin, static_cast<int64_t>(run.end - run.begin), hp);
  }
  r->covered = 0;
  r->step = step;
  ++r->changes;
  *applied = true;
  registry_->GetCounter("gantry_shardserver_optimizer_steps_total", "AdamW steps run for parameter-server jobs.").Increment();
  return absl::OkStatus();
}

ParamService::~ParamService() { data_port_.reset(); }

grpc::ServerUnaryReactor* ParamService::ReadParams(grpc::CallbackServerContext* ctx, const v1::ReadParamsRequest* req,
                                                   v1::ParamsChunk* resp) {
  return ServeUnary(ctx, [&](const Principal& who) -> absl::Status {
    RETURN_IF_ERROR(Authorize(who, Action::kParamServer, AuthzObject::Job(req->job_id(), "", "")));
    ASSIGN_OR_RETURN(std::shared_ptr<Range> r, Find(req->job_id(), req->generation()));
    if (req->count() < 0) return absl::InvalidArgumentError(absl::StrCat("read of ", req->count(), " values"));
    RETURN_IF_ERROR(CheckPayload(*r, "read", req->offset(), static_cast<size_t>(req->count()) * sizeof(float)));
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
