#include "common/security.h"
#include "worker/agent/param_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/param_wire.h"
#include "common/status.h"

namespace gantry::agent {

namespace {
constexpr size_t kChunkFloats = (4 << 20) / sizeof(float);  // 4 MiB per message

// A data port request's deadline: a minute, and its payload's time at 16 MB/s (the server
// holds a message to 30 s and the same rate, so a stall is its to report first).
std::chrono::steady_clock::time_point DataDeadline(size_t payload_bytes) {
  return std::chrono::steady_clock::now() + std::chrono::seconds(60) +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             std::chrono::duration<double>(static_cast<double>(payload_bytes) / 16e6));
}

// Calls fn(at, n) for the 4 MiB messages that cover [begin, end), in order; the first error.
template <typename F>
absl::Status ForEachMessage(size_t begin, size_t end, F&& fn) {
  for (size_t at = begin; at < end; at += kChunkFloats) RETURN_IF_ERROR(fn(at, std::min(kChunkFloats, end - at)));
  return absl::OkStatus();
}
}  // namespace

ParamServerClient::ParamServerClient(std::string job_id, int64_t generation, std::vector<jobspec::ParamRangeOf> ranges,
                                     const std::vector<jobspec::ParamTensor>& tensors, size_t num_params,
                                     kernels::AdamWConfig config)
    : job_id_(std::move(job_id)), generation_(generation), num_params_(num_params), config_(config) {
  for (auto& r : ranges) {
    servers_.push_back({r, v1::ParamServer::NewStub(MakeChannel(r.shard_server)), nullptr});
  }
  for (const auto& t : tensors) {
    if (t.decay) decay_.emplace_back(t.offset, t.offset + t.numel);
  }
}

ParamServerClient::~ParamServerClient() = default;

absl::Status ParamServerClient::DataRequest(Server& s, uint32_t op, v1::RangeBuffer which, int64_t step, double lr,
                                            size_t at, size_t n, const float* out, float* in) {
  const std::string where = absl::StrCat("parameter server ", s.range.shard_server, " (data port ", s.range.data_address, ")");
  const auto deadline = DataDeadline(n * sizeof(float));
  if (s.data == nullptr) {
    auto c = net::StreamClient::Connect(s.range.data_address, deadline);
    if (!c.ok()) return Annotate(c.status(), where);
    s.data = std::move(*c);
  }
  net::ParamWireHeader h;
  h.op = op;
  h.generation = generation_;
  h.step = step;
  h.lr = lr;
  h.offset = static_cast<int64_t>(at);
  h.count = static_cast<int64_t>(n);
  h.buffer = static_cast<uint32_t>(which);
  h.job_len = static_cast<uint32_t>(job_id_.size());
  std::vector<net::ConstBytes> request = {{&h, sizeof(h)}, {job_id_.data(), job_id_.size()}};
  if (out != nullptr) request.push_back({out, n * sizeof(float)});
  absl::Status st = s.data->Send(request, deadline);
  net::ParamWireReply reply;
  if (st.ok()) st = s.data->Receive(&reply, sizeof(reply), deadline);
  if (st.ok() && reply.message_len > (64u << 10)) {
    st = absl::DataLossError(absl::StrCat("a reply with ", reply.message_len, " bytes of message"));
  }
  std::string msg(st.ok() ? reply.message_len : 0, '\0');
  if (st.ok()) st = s.data->Receive(msg.data(), msg.size(), deadline);
  if (st.ok() && reply.code == 0 && in != nullptr) st = s.data->Receive(in, n * sizeof(float), deadline);
  if (!st.ok()) {  // the connection is in an unknown state: the next request opens another
    s.data.reset();
    return Annotate(st, where);
  }
  if (reply.code != 0) return Annotate(absl::Status(static_cast<absl::StatusCode>(reply.code), msg), where);
  return absl::OkStatus();
}

absl::Status ParamServerClient::Write(Server& s, v1::RangeBuffer which, const float* src) {
  if (!s.range.data_address.empty()) {
    return DataRequest(s, net::ParamWireHeader::kWrite, which, 0, 0, s.range.begin, s.range.end - s.range.begin,
                       src + s.range.begin, nullptr);
  }
  return ForEachMessage(s.range.begin, s.range.end, [&](size_t at, size_t n) {
    v1::ParamsChunk c;
    c.set_job_id(job_id_);
    c.set_generation(generation_);
    c.set_offset(static_cast<int64_t>(at));
    c.set_buffer(which);
    c.set_data(reinterpret_cast<const char*>(src + at), n * sizeof(float));
    v1::ParamsAck ack;
    return Annotate(FromGrpc(s.stub->WriteParams(ContextWithDeadline(30).get(), c, &ack)),
                    absl::StrCat("writing ", v1::RangeBuffer_Name(which), " to parameter server ", s.range.shard_server));
  });
}

absl::Status ParamServerClient::Read(Server& s, v1::RangeBuffer which, size_t begin, size_t end, float* out,
                                     size_t out_begin) {
  if (begin >= end) return absl::OkStatus();
  if (!s.range.data_address.empty()) {
    return DataRequest(s, net::ParamWireHeader::kRead, which, 0, 0, begin, end - begin, nullptr, out + (begin - out_begin));
  }
  return ForEachMessage(begin, end, [&](size_t at, size_t n) -> absl::Status {
    v1::ReadParamsRequest req;
    req.set_job_id(job_id_);
    req.set_generation(generation_);
    req.set_offset(static_cast<int64_t>(at));
    req.set_count(static_cast<int64_t>(n));
    req.set_buffer(which);
    v1::ParamsChunk c;
    RETURN_IF_ERROR(Annotate(FromGrpc(s.stub->ReadParams(ContextWithDeadline(30).get(), req, &c)),
                             absl::StrCat("reading ", v1::RangeBuffer_Name(which), " from ", s.range.shard_server)));
    if (c.data().size() != n * sizeof(float)) {
      return absl::DataLossError(absl::StrCat(s.range.shard_server, " sent ", c.data().size(), " bytes for ", n, " values"));
    }
    std::memcpy(out + (at - out_begin), c.data().data(), c.data().size());
    return absl::OkStatus();
  });
}

absl::Status ParamServerClient::Init(const float* params, const float* m, const float* v, int64_t step) {
  for (auto& s : servers_) {
    if (s.range.begin >= s.range.end) continue;
    const std::string where = absl::StrCat("parameter server ", s.range.shard_server);
    v1::InitRangeRequest req;
    req.set_job_id(job_id_);
    req.set_generation(generation_);
    req.mutable_range()->set_begin(static_cast<int64_t>(s.range.begin));
    req.mutable_range()->set_end(static_cast<int64_t>(s.range.end));
    req.set_beta1(config_.beta1);
    req.set_beta2(config_.beta2);
    req.set_eps(config_.eps);
    req.set_weight_decay(config_.weight_decay);
    req.set_step(step);
    for (const auto& [b, e] : decay_) {
      auto* d = req.add_decay();
      d->set_begin(static_cast<int64_t>(b));
      d->set_end(static_cast<int64_t>(e));
    }
    v1::InitRangeResponse resp;
    RETURN_IF_ERROR(Annotate(FromGrpc(s.stub->InitRange(ContextWithDeadline(30).get(), req, &resp)), where));
    RETURN_IF_ERROR(Write(s, v1::PARAMS, params));
    if (m != nullptr) RETURN_IF_ERROR(Write(s, v1::ADAM_M, m));
    if (v != nullptr) RETURN_IF_ERROR(Write(s, v1::ADAM_V, v));
  }
  return absl::OkStatus();
}

absl::Status ParamServerClient::Push(int step, double lr, const float* grads, size_t begin, size_t end) {
  for (auto& s : servers_) {  // the part of [begin, end) each server owns, in 4 MiB messages
    const size_t b = std::max(begin, s.range.begin), e = std::min(end, s.range.end);
    if (b >= e) continue;
    if (!s.range.data_address.empty()) {  // one request, the payload straight from the gradients
      RETURN_IF_ERROR(DataRequest(s, net::ParamWireHeader::kPush, v1::PARAMS, step, lr, b, e - b, grads + (b - begin), nullptr));
      continue;
    }
    RETURN_IF_ERROR(ForEachMessage(b, e, [&](size_t at, size_t n) {
      v1::GradientChunk c;
      c.set_job_id(job_id_);
      c.set_generation(generation_);
      c.set_step(step);
      c.set_lr(lr);
      c.set_offset(static_cast<int64_t>(at));
      c.set_data(reinterpret_cast<const char*>(grads + (at - begin)), n * sizeof(float));
      v1::PushAck ack;
      return Annotate(FromGrpc(s.stub->PushGradients(ContextWithDeadline(60).get(), c, &ack)),
                      absl::StrCat("pushing step ", step, " to parameter server ", s.range.shard_server));
    }));
  }
  return absl::OkStatus();
}

absl::Status ParamServerClient::Pull(float* params) {
  for (auto& s : servers_) RETURN_IF_ERROR(Read(s, v1::PARAMS, s.range.begin, s.range.end, params, 0));
  return absl::OkStatus();
}

absl::Status ParamServerClient::ReadState(size_t begin, size_t end, float* m, float* v) {
  for (auto& s : servers_) {
    const size_t b = std::max(begin, s.range.begin), e = std::min(end, s.range.end);
    if (b >= e) continue;
    RETURN_IF_ERROR(Read(s, v1::ADAM_M, b, e, m, begin));
    RETURN_IF_ERROR(Read(s, v1::ADAM_V, b, e, v, begin));
  }
  return absl::OkStatus();
}

}  // namespace gantry::agent
