// gantry: the command line over the coordinator's gRPC API.
//
//   gantry [--coordinator HOST:PORT] [-o table|json] COMMAND [flags] [operands]
//
// The commands are kCommands (below); each defines its flags once, and `gantry COMMAND --help`
// lists them (generated from those definitions, common/command_flags.h). The global flags
// may also follow the command. The coordinator address comes from --coordinator, else
// $GANTRY_COORDINATOR, else 127.0.0.1:7070. Every call has a deadline. Exit status: 0 ok, 2
// for a bad request (a bad flag, an invalid spec, an unknown job), 1 for anything else
// (coordinator unreachable, ...).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"

namespace gantry::cli {

const std::vector<Command> kCommands = {
    {"submit", "FILE", "queue the job spec in FILE, print its id", SubmitCommand},
    {"jobs", "", "list the jobs you may read, newest first: the newest 50 unless --limit or --all; -o json lists "
                 "every one unless --limit; --owner, --team and --mine filter them", JobsCommand},
    {"describe", "JOB", "one job in full", DescribeCommand},
    {"cancel", "JOB", "cancel a job that has not finished", CancelCommand},
    {"watch", "JOB", "follow a job's steps and events until it ends (exit 0 if it succeeded)", WatchCommand},
    {"workers", "", "list the workers, their ranks and GPUs", WorkersCommand},
    {"checkpoints", "JOB", "list a job's committed checkpoints on the shard servers", CheckpointsCommand},
    {"export", "JOB", "write a job's checkpoint as a Hugging Face model directory (-o DIR)", ExportCommand},
    {"download", "JOB", "write a job's checkpoint files as the shard servers hold them (-o DIR)", DownloadCommand},
    {"sample", "JOB", "generate text from a job's checkpoint (on this machine's CPU)", SampleCommand},
    {"plan", "[JOB.yaml]",
     "bytes per GPU, pipeline bubble and bytes sent per step for a job spec or a model given by flags; with --gpus, "
     "--gpu-memory and --global-batch, the recommended layout; with --cluster, every layout that fits ranked by "
     "predicted tokens/s (no coordinator)", PlanCommand},
    {"health", "[ADDR]", "gRPC health check of ADDR (default: the coordinator); exit 0 if SERVING", HealthCommand},
    {"whoami", "", "who the coordinator takes this caller for: name, kind, team, role", WhoAmICommand},
    {"quota", "", "each team's quota, use and queued jobs (yours, or every team's for viewers and admins)",
     QuotaCommand},
    {"principals", "hash", "read a token on stdin, print its SHA-256 for the principals file", PrincipalsCommand},
};

namespace {

// gantry --help: the global flags and every command.
std::string Overview(const CommandFlags& globals) {
  std::string out = globals.Help();
  absl::StrAppend(&out, "commands:\n");
  for (const Command& c : kCommands) {
    const std::string left = absl::StrCat("  ", c.name, *c.operands ? " " : "", c.operands);
    absl::StrAppend(&out, HelpRow(left, c.summary, 22, 76));
  }
  absl::StrAppend(&out, "gantry COMMAND --help lists a command's flags.\n");
  return out;
}

}  // namespace
}  // namespace gantry::cli

int main(int argc, char** argv) {
  using gantry::cli::Options;
  Options o;
  const char* env = std::getenv("GANTRY_COORDINATOR");
  o.coordinator = env && *env ? env : "127.0.0.1:7070";
  gantry::CommandFlags globals("gantry", "", "COMMAND [flags] [operands]",
                               "the command line over a Gantry cluster's coordinator");
  globals.String("coordinator", &o.coordinator, "HOST:PORT", "the coordinator (else $GANTRY_COORDINATOR)")
      .Default("127.0.0.1:7070")
      .Choice("output", &o.output, {"table", "json"}, "the output format")
      .Short('o');
  const std::vector<std::string> args(argv + 1, argv + argc);
  auto at = globals.ParseLeading(args);
  if (!at.ok()) {
    std::fprintf(stderr, "gantry: %s\n", std::string(at.status().message()).c_str());
    return 2;
  }
  if (globals.help() || *at == args.size()) {
    std::fputs(gantry::cli::Overview(globals).c_str(), globals.help() ? stdout : stderr);
    return globals.help() ? 0 : 2;
  }
  o.command = args[*at];
  o.args.assign(args.begin() + static_cast<std::ptrdiff_t>(*at) + 1, args.end());
  o.globals = &globals;
  const gantry::cli::Command* c = gantry::cli::FindCommand(o.command);
  if (c == nullptr) {
    std::fprintf(stderr, "gantry: unknown command '%s' (gantry --help lists them)\n", o.command.c_str());
    return 2;
  }
  return c->run(o);
}
