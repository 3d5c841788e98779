// The gantry CLI's commands, a file per group: jobs.cc (submit, jobs, describe, cancel,
// watch), workers.cc, checkpoints.cc (checkpoints, export, download, sample), plan.cc,
// principals.cc (whoami, principals hash); main.cc
// parses the global flags and dispatches. Each command returns the process's exit status: 0
// ok, 2 for a bad request (a bad argument, an invalid spec, an unknown job), 1 otherwise.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "gantry/v1/coordinator.grpc.pb.h"

namespace gantry::cli {

struct Options {
  std::string coordinator;
  std::string output = "table";  // table or json
  std::vector<std::string> args;  // the command and its arguments
  double timeout_s = 10;
};

extern const char kUsage[];

// Output and calls (output.cc).
int Fail(const grpc::Status& s);  // prints the error; the exit status it means
std::unique_ptr<grpc::ClientContext> Ctx(const Options& o);  // a context with the call deadline
std::string Json(const google::protobuf::Message& m);
std::string When(int64_t ms);  // local time, "-" for 0
std::string State(const v1::Job& j);  // the state, with the queue position while waiting

// jobs.cc
int SubmitCommand(const Options& o, v1::Coordinator::Stub* stub);
int JobsCommand(const Options& o, v1::Coordinator::Stub* stub);
int DescribeOrCancelCommand(const Options& o, v1::Coordinator::Stub* stub);
int WatchCommand(const Options& o, v1::Coordinator::Stub* stub);
// Follows a job's events. Exit status: 0 when it SUCCEEDED, 1 when it FAILED or was
// CANCELLED (or the stream broke).
int Watch(const Options& o, v1::Coordinator::Stub* stub, const std::string& job_id);
// workers.cc
int WorkersCommand(const Options& o, v1::Coordinator::Stub* stub);
// checkpoints.cc: checkpoints, export, download, sample.
int CheckpointCommand(const Options& o, v1::Coordinator::Stub* stub);
// plan.cc: the planner, locally (no coordinator).
int PlanCommand(const std::vector<std::string>& args, bool json);
// principals.cc: whoami; principals hash (locally, no coordinator).
int WhoAmICommand(const Options& o, v1::Coordinator::Stub* stub);
int PrincipalsCommand(const std::vector<std::string>& args);

}  // namespace gantry::cli
