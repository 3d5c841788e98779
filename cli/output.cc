// The CLI's output and calls: errors, deadlines, JSON, times, job states.
#include <cstdio>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "common/grpc_util.h"
#include "common/security.h"
#include "google/protobuf/util/json_util.h"

namespace gantry::cli {

int Fail(const grpc::Status& s) {
  const absl::Status st = FromGrpc(s);
  std::fprintf(stderr, "gantry: %s: %s\n", absl::StatusCodeToString(st.code()).c_str(), s.error_message().c_str());
  return (absl::IsInvalidArgument(st) || absl::IsNotFound(st)) ? 2 : 1;
}

int FailStatus(const absl::Status& s) {
  std::fprintf(stderr, "gantry: %s\n", std::string(s.message()).c_str());
  return absl::IsInvalidArgument(s) || absl::IsNotFound(s) ? 2 : 1;
}

std::unique_ptr<v1::Coordinator::Stub> Connect(const Options& o) {
  return v1::Coordinator::NewStub(MakeChannel(o.coordinator, 64 << 20));
}

std::unique_ptr<grpc::ClientContext> Ctx(const Options& o) { return ContextWithDeadline(o.timeout_s); }

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions p;
  p.add_whitespace = true;
  p.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, p);
  return out;
}

std::string When(int64_t ms) {
  if (ms == 0) return "-";
  const std::time_t t = ms / 1000;
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

std::string State(const v1::Job& j) {
  std::string s = v1::JobState_Name(j.state());
  if ((j.state() == v1::PENDING || j.state() == v1::RESTARTING || j.state() == v1::PREEMPTED) && j.queue_position() > 0) {
    s += absl::StrCat(" (#", j.queue_position(), ")");
  }
  return s;
}

}  // namespace gantry::cli
