// gantry: the command line over the coordinator's gRPC API.
//
//   gantry [--coordinator HOST:PORT] [-o table|json] submit FILE
//   gantry ... jobs [--state STATE]
//   gantry ... describe JOB
//   gantry ... cancel JOB
//
// The coordinator address comes from --coordinator, else $GANTRY_COORDINATOR, else
// 127.0.0.1:7070. Every call has a deadline. Exit status: 0 ok, 2 for a bad request
// (invalid spec, unknown job), 1 for anything else (coordinator unreachable, ...).
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "gantry/v1/coordinator.grpc.pb.h"
#include "google/protobuf/util/json_util.h"

namespace gantry::cli {
namespace {

constexpr char kUsage[] =
    "usage: gantry [--coordinator HOST:PORT] [-o table|json] COMMAND\n"
    "  submit FILE          queue the job spec in FILE, print its id\n"
    "  jobs [--state S]     list jobs, newest first (S: PENDING, RUNNING, ...)\n"
    "  describe JOB         one job in full\n"
    "  cancel JOB           cancel a job that has not finished\n";

struct Options {
  std::string coordinator;
  std::string output = "table";
  std::vector<std::string> args;
  double timeout_s = 10;
};

int Fail(const grpc::Status& s) {
  static const char* kNames[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                                 "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
                                 "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  const int code = s.error_code();
  std::fprintf(stderr, "gantry: %s: %s\n", code >= 0 && code <= 16 ? kNames[code] : "ERROR",
               s.error_message().c_str());
  return (code == grpc::INVALID_ARGUMENT || code == grpc::NOT_FOUND) ? 2 : 1;
}

std::unique_ptr<grpc::ClientContext> Ctx(const Options& o) {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000)));
  return c;
}

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
  if (j.state() == v1::PENDING && j.queue_position() > 0) s += absl::StrCat(" (#", j.queue_position(), ")");
  return s;
}

int Run(const Options& o) {
  if (o.args.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  auto stub = v1::Coordinator::NewStub(
      grpc::CreateCustomChannel(o.coordinator, grpc::InsecureChannelCredentials(), args));
  const std::string& cmd = o.args[0];
  if (cmd == "submit") {
    if (o.args.size() != 2) {
      std::fputs("gantry: submit takes one job spec file\n", stderr);
      return 2;
    }
    auto text = ReadFileToString(o.args[1]);
    if (!text.ok()) {
      std::fprintf(stderr, "gantry: %s\n", std::string(text.status().message()).c_str());
      return 2;
    }
    v1::SubmitJobRequest req;
    req.set_spec_yaml(*text);
    v1::SubmitJobResponse resp;
    auto s = stub->SubmitJob(Ctx(o).get(), req, &resp);
    if (!s.ok()) return Fail(s);
    if (o.output == "json") std::printf("%s\n", Json(resp).c_str());
    else std::printf("%s\n", resp.job_id().c_str());
    return 0;
  }
  if (cmd == "jobs") {
    v1::ListJobsRequest req;
    if (o.args.size() == 3 && o.args[1] == "--state") {
      v1::JobState st;
      if (!v1::JobState_Parse(o.args[2], &st)) {
        std::fprintf(stderr, "gantry: unknown state '%s'\n", o.args[2].c_str());
        return 2;
      }
      req.set_state(st);
    } else if (o.args.size() != 1) {
      std::fputs(kUsage, stderr);
      return 2;
    }
    v1::ListJobsResponse resp;
    auto s = stub->ListJobs(Ctx(o).get(), req, &resp);
    if (!s.ok()) return Fail(s);
    if (o.output == "json") {
      std::printf("%s\n", Json(resp).c_str());
      return 0;
    }
    std::printf("%-10s %-20s %-16s %-13s %s\n", "JOB", "NAME", "STATE", "STEP", "SUBMITTED");
    for (const auto& j : resp.jobs()) {
      std::printf("%-10s %-20s %-16s %-13s %s\n", j.id().c_str(), j.name().c_str(), State(j).c_str(),
                  absl::StrCat(j.steps_done(), "/", j.steps_total()).c_str(), When(j.submit_time_unix_ms()).c_str());
    }
    return 0;
  }
  if (cmd == "describe" || cmd == "cancel") {
    if (o.args.size() != 2) {
      std::fprintf(stderr, "gantry: %s takes one job id\n", cmd.c_str());
      return 2;
    }
    v1::Job job;
    grpc::Status s;
    if (cmd == "describe") {
      v1::GetJobRequest req;
      req.set_job_id(o.args[1]);
      s = stub->GetJob(Ctx(o).get(), req, &job);
    } else {
      v1::CancelJobRequest req;
      req.set_job_id(o.args[1]);
      s = stub->CancelJob(Ctx(o).get(), req, &job);
    }
    if (!s.ok()) return Fail(s);
    if (o.output == "json") {
      std::printf("%s\n", Json(job).c_str());
      return 0;
    }
    std::printf("Job:        %s\nName:       %s\nState:      %s\n", job.id().c_str(), job.name().c_str(), State(job).c_str());
    if (!job.reason().empty()) std::printf("Reason:     %s\n", job.reason().c_str());
    std::printf("Steps:      %ld/%ld\nSubmitted:  %s\nUpdated:    %s\nSpec:\n", static_cast<long>(job.steps_done()),
                static_cast<long>(job.steps_total()), When(job.submit_time_unix_ms()).c_str(),
                When(job.update_time_unix_ms()).c_str());
    std::string spec = job.spec_yaml();
    size_t pos = 0;
    while (pos < spec.size()) {
      size_t nl = spec.find('\n', pos);
      if (nl == std::string::npos) nl = spec.size();
      std::printf("  %s\n", spec.substr(pos, nl - pos).c_str());
      pos = nl + 1;
    }
    return 0;
  }
  std::fprintf(stderr, "gantry: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}

}  // namespace
}  // namespace gantry::cli

int main(int argc, char** argv) {
  gantry::cli::Options o;
  const char* env = std::getenv("GANTRY_COORDINATOR");
  o.coordinator = env && *env ? env : "127.0.0.1:7070";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gantry: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--coordinator") o.coordinator = value("--coordinator");
    else if (a.rfind("--coordinator=", 0) == 0) o.coordinator = a.substr(14);
    else if (a == "-o" || a == "--output") o.output = value("-o");
    else if (a == "-h" || a == "--help") {
      std::fputs(gantry::cli::kUsage, stdout);
      return 0;
    } else o.args.push_back(a);
  }
  if (o.output != "table" && o.output != "json") {
    std::fprintf(stderr, "gantry: -o takes table or json, not '%s'\n", o.output.c_str());
    return 2;
  }
  return gantry::cli::Run(o);
}
