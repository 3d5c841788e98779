#include "shardserver/param_service.h"

#include "common/rpc_edge.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_util.h"
#include "common/net.h"
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
  return ServeUnary(ctx, [&]() -> absl::Status {
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
    ranges_[req->job_id()] = std::move(r);
    registry_->GetGauge("gantry_shardserver_optimizer_params", "Parameters whose AdamW state this shard server holds.")
        .Set(static_cast<double>(e - b));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* ParamService::WriteParams(grpc::CallbackServerContext* ctx, const v1::ParamsChunk* req,
                                                    v1::ParamsAck*) {
  return ServeUnary(ctx, [&]() -> absl::Status {
    ASSIGN_OR_RETURN(Range * r, Find(req->job_id(), req->generation()));
    RETURN_IF_ERROR(CheckPayload(*r, "parameters", req->offset(), req->data().size()));
    std::lock_guard<std::mutex> l(r->mu);
    std::memcpy(r->Buffer(req->buffer())->data() + (req->offset() - r->begin), req->data().data(), req->data().size());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* ParamService::PushGradients(grpc::CallbackServerContext* ctx, const v1::GradientChunk* req,
                                                      v1::PushAck* resp) {
  return ServeUnary(ctx, [&]() -> absl::Status {
    ASSIGN_OR_RETURN(Range * r, Find(req->job_id(), req->generation()));
    const size_t n = req->data().size() / sizeof(float);
    RETURN_IF_ERROR(CheckPayload(*r, "gradients", req->offset(), req->data().size()));
    std::lock_guard<std::mutex> l(r->mu);
    if (req->step() != r->step + 1) {
      return absl::FailedPreconditionError(absl::StrCat("gradients of step ", req->step(), " pushed; the range of ",
                                                        req->job_id(), " expects step ", r->step + 1));
    }
    std::memcpy(r->grad.data() + (req->offset() - r->begin), req->data().data(), req->data().size());
    bool applied = false;
    RETURN_IF_ERROR(CompletePushLocked(r, req->step(), req->lr(), n, &applied));
    resp->set_applied(applied);
    return absl::OkStatus();
  });
}

absl::Status ParamService::CompletePushLocked(Range* r, int64_t step, double lr, size_t n, bool* applied) {
  r->covered += n;
  if (r->covered < r->size()) return absl::OkStatus();
  if (r->covered > r->size()) {
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
  *applied = true;
  registry_->GetCounter("gantry_shardserver_optimizer_steps_total", "AdamW steps run for parameter-server jobs.").Increment();
  return absl::OkStatus();
}

ParamService::~ParamService() {
  if (listen_fd_ >= 0) {
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    acceptor_.join();
  }
  {
    std::lock_guard<std::mutex> l(conn_mu_);
    for (int fd : conns_) ::shutdown(fd, SHUT_RDWR);  // their threads see the close and end
  }
  for (auto& [id, t] : conn_threads_) t.join();
}

absl::StatusOr<std::string> ParamService::StartDataPort(const std::string& host) {
  int port = 0;
  ASSIGN_OR_RETURN(listen_fd_, net::Listen(host, &port));
  acceptor_ = std::thread([this] {
    for (;;) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR) continue;
        return;  // the listener was shut down
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      std::vector<std::thread> done;
      {
        std::lock_guard<std::mutex> l(conn_mu_);
        for (uint64_t id : finished_) {
          auto it = conn_threads_.find(id);
          done.push_back(std::move(it->second));
          conn_threads_.erase(it);
        }
        finished_.clear();
        conns_.push_back(fd);
        const uint64_t id = next_conn_++;
        conn_threads_.emplace(id, std::thread([this, fd, id] { ServeConnection(fd, id); }));
      }
      for (auto& t : done) t.join();  // they have returned, or are returning: no wait
    }
  });
  return absl::StrCat(host, ":", port);
}

void ParamService::ServeConnection(int fd, uint64_t id) {
  // Requests one after another until the client closes. A malformed request (bad magic,
  // absurd sizes) closes the connection; a refused one (unknown job, wrong step, out of
  // range) is answered with the error and the payload is drained.
  std::vector<char> scratch;
  for (;;) {
    net::ParamWireHeader h;
    if (!net::RecvAll(fd, &h, sizeof(h)).ok() || h.magic != net::ParamWireHeader::kMagic || h.job_len > 4096 ||
        h.count < 0 || static_cast<uint64_t>(h.count) > (uint64_t{1} << 32)) {
      break;
    }
    std::string job(h.job_len, '\0');
    if (!net::RecvAll(fd, job.data(), job.size()).ok()) break;
    const size_t n = static_cast<size_t>(h.count), bytes = n * sizeof(float);
    const bool inbound = h.op == net::ParamWireHeader::kPush || h.op == net::ParamWireHeader::kWrite;
    const auto t0 = std::chrono::steady_clock::now();
    net::ParamWireReply reply;
    bool payload_read = false;
    absl::Status s = [&]() -> absl::Status {
      ASSIGN_OR_RETURN(Range * r, Find(job, h.generation));
      RETURN_IF_ERROR(CheckWithin(*r, "payload", h.offset, n));
      std::lock_guard<std::mutex> l(r->mu);
      reply.version = r->step;
      const size_t at = static_cast<size_t>(h.offset) - r->begin;
      if (h.op == net::ParamWireHeader::kPush) {
        if (h.step != r->step + 1) {
          return absl::FailedPreconditionError(absl::StrCat("gradients of step ", h.step, " pushed; the range of ", job,
                                                            " expects step ", r->step + 1));
        }
        payload_read = true;  // straight into the gradient buffer
        RETURN_IF_ERROR(net::RecvAll(fd, r->grad.data() + at, bytes));
        bool applied = false;
        RETURN_IF_ERROR(CompletePushLocked(r, h.step, h.lr, n, &applied));
        reply.version = r->step;
        return absl::OkStatus();
      }
      if (h.op == net::ParamWireHeader::kWrite) {
        payload_read = true;
        return net::RecvAll(fd, r->Buffer(static_cast<v1::RangeBuffer>(h.buffer))->data() + at, bytes);
      }
      if (h.op == net::ParamWireHeader::kRead) {
        const std::string ok;
        net::ParamWireReply head = reply;
        RETURN_IF_ERROR(net::SendAll(fd, &head, sizeof(head)));
        return net::SendAll(fd, r->Buffer(static_cast<v1::RangeBuffer>(h.buffer))->data() + at, bytes);
      }
      return absl::InvalidArgumentError(absl::StrCat("unknown operation ", h.op));
    }();
    const char* method = h.op == net::ParamWireHeader::kPush ? "DataPush" : h.op == net::ParamWireHeader::kRead ? "DataRead" : "DataWrite";
    metrics::RecordRpc(*registry_, "shardserver", method, absl::StatusCodeToString(s.code()),
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (s.ok() && h.op == net::ParamWireHeader::kRead) continue;  // answered above
    if (!s.ok() && absl::IsUnavailable(s) && payload_read) break;  // the connection broke mid-payload
    if (!s.ok() && inbound && !payload_read) {  // drain the refused payload
      scratch.resize(1 << 20);
      size_t left = bytes;
      bool broken = false;
      while (left > 0 && !broken) {
        const size_t k = std::min(left, scratch.size());
        broken = !net::RecvAll(fd, scratch.data(), k).ok();
        left -= k;
      }
      if (broken) break;
    }
    const std::string msg(s.message());
    reply.code = static_cast<int32_t>(s.code());
    reply.message_len = static_cast<uint32_t>(msg.size());
    if (!net::SendAll(fd, &reply, sizeof(reply)).ok() || !net::SendAll(fd, msg.data(), msg.size()).ok()) break;
  }
  {
    // Out of conns_ before the close, so that the destructor never shuts down the fd number
    // once another connection may have it.
    std::lock_guard<std::mutex> l(conn_mu_);
    conns_.erase(std::remove(conns_.begin(), conns_.end(), fd), conns_.end());
    finished_.push_back(id);
  }
  ::close(fd);
}

grpc::ServerUnaryReactor* ParamService::ReadParams(grpc::CallbackServerContext* ctx, const v1::ReadParamsRequest* req,
                                                   v1::ParamsChunk* resp) {
  return ServeUnary(ctx, [&]() -> absl::Status {
    ASSIGN_OR_RETURN(Range * r, Find(req->job_id(), req->generation()));
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
