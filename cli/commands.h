// The gantry CLI's commands, a file per group: jobs.cc (submit, jobs, describe, cancel,
// watch), workers.cc, checkpoints.cc (checkpoints, export, download), sample_command.cc, plan.cc,
// principals.cc (whoami, quota, principals hash, health); main.cc parses the global flags and
// dispatches. Each command defines its flags once (common/command_flags.h), from which its
// --help is generated; kCommands lists them. Each returns the process's exit status: 0 ok, 2
// for a bad request (a bad argument, an invalid spec, an unknown job), 1 otherwise.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/command_flags.h"
#include "gantry/v1/coordinator.grpc.pb.h"

namespace gantry::shardserver {
struct StoredCheckpoint;  // shardserver/client/shard_client.h
}  // namespace gantry::shardserver

namespace gantry::cli {

struct Options {
  std::string coordinator;
  std::string output = "table";  // table or json
  double timeout_s = 10;
  std::string command;            // the command's name
  std::vector<std::string> args;  // its arguments (after its name)
  // The flags every command takes (main.cc): bound to coordinator and output above, so a
  // command's parse (which inherits them) sets those fields of main's Options.
  const CommandFlags* globals = nullptr;
};

// A command: its name, operands and summary (for gantry --help and its own), and what runs it.
struct Command {
  const char* name;
  const char* operands;
  const char* summary;
  int (*run)(const Options& o);
};
extern const std::vector<Command> kCommands;
// The command named `name`, or null.
const Command* FindCommand(const std::string& name);

// The command's flag table, with the global flags (for commands: main.cc's Options).
CommandFlags CommandFlagsFor(const Options& o);
// Parses o.args into f. Returns -1 to go on; else the exit status: 0 after printing --help, 2
// after printing the error.
int ParseCommand(CommandFlags& f, const Options& o);

// Output and calls (output.cc).
int Fail(const grpc::Status& s);  // prints the error; the exit status it means
int FailStatus(const absl::Status& s);  // prints "gantry: MESSAGE"; 2 for a bad argument, 1 otherwise
std::unique_ptr<v1::Coordinator::Stub> Connect(const Options& o);  // TLS and the token from the environment
std::unique_ptr<grpc::ClientContext> Ctx(const Options& o);  // a context with the call deadline
std::string Json(const google::protobuf::Message& m);
std::string When(int64_t ms);  // local time, "-" for 0
std::string State(const v1::Job& j);  // the state, with the queue position while waiting

// jobs.cc
int SubmitCommand(const Options& o);
int JobsCommand(const Options& o);
int DescribeCommand(const Options& o);
int CancelCommand(const Options& o);
int WatchCommand(const Options& o);
// Follows a job's events. Exit status: 0 when it SUCCEEDED, 1 when it FAILED or was
// CANCELLED (or the stream broke).
int Watch(const Options& o, v1::Coordinator::Stub* stub, const std::string& job_id);
// workers.cc
int WorkersCommand(const Options& o);
// checkpoints.cc: checkpoints, export, download.
int CheckpointsCommand(const Options& o);
int ExportCommand(const Options& o);
int DownloadCommand(const Options& o);
// The checkpoint at `step` (< 0: the newest) of the job's: -1 with *pick set, or the exit status
// of a failure it printed.
int PickCheckpoint(const Options& o, const std::string& job_id, int64_t step,
                   std::vector<shardserver::StoredCheckpoint>* found, const shardserver::StoredCheckpoint** pick);
// --step N, the checkpoint a command reads.
void DefineStep(CommandFlags& f, int64_t* step);
// sample_command.cc (built into the gantry binary, not gantry_cli: it runs the model).
int SampleCommand(const Options& o);
// plan.cc: the planner, locally (no coordinator).
int PlanCommand(const Options& o);
// principals.cc: whoami; quota; principals hash (locally, no coordinator); health (no token).
int WhoAmICommand(const Options& o);
int QuotaCommand(const Options& o);
int PrincipalsCommand(const Options& o);
int HealthCommand(const Options& o);

}  // namespace gantry::cli
