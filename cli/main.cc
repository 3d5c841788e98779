// gantry: the command line over the coordinator's gRPC API.
//
//   gantry [--coordinator HOST:PORT] [-o table|json] submit FILE
//   gantry ... jobs [--state STATE] [--limit N | --all]
//   gantry ... describe JOB
//   gantry ... cancel JOB
//   gantry ... watch JOB           (also: submit FILE --wait)
//   gantry ... workers
//   gantry ... checkpoints JOB
//   gantry ... export JOB [--step N] -o DIR    (-o table|json elsewhere: the output format)
//   gantry ... sample JOB [--step N] --prompt TEXT [--tokens N]
//   gantry ... whoami
//   gantry principals hash < TOKEN_FILE
//
// The coordinator address comes from --coordinator, else $GANTRY_COORDINATOR, else
// 127.0.0.1:7070. Every call has a deadline. Exit status: 0 ok, 2 for a bad request
// (invalid spec, unknown job), 1 for anything else (coordinator unreachable, ...).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli/commands.h"
#include "common/security.h"

namespace gantry::cli {

const char kUsage[] =
    "usage: gantry [--coordinator HOST:PORT] [-o table|json] COMMAND\n"
    "  submit FILE          queue the job spec in FILE, print its id\n"
    "  jobs [--state S] [--limit N | --all]\n"
    "                       list jobs, newest first (S: PENDING, RUNNING, ...): the newest 50\n"
    "                       unless --limit or --all; -o json lists every one unless --limit\n"
    "  describe JOB         one job in full\n"
    "  cancel JOB           cancel a job that has not finished\n"
    "  watch JOB            follow a job's steps and events until it ends\n"
    "  workers              list the workers\n"
    "  checkpoints JOB      list a job's committed checkpoints\n"
    "  export JOB [--step N] [--dtype fp32|bf16] -o DIR   write a Hugging Face model directory\n"
    "  download JOB [--step N] -o DIR write the checkpoint's files as the shard servers hold them\n"
    "  sample JOB [--step N] --prompt TEXT [--tokens N]   generate text from a checkpoint\n"
    "  plan [JOB.yaml | --preset gpt2|gpt2-medium|gpt2-large|gpt2-xl | --n-layer L --d-model C --heads H\n"
    "       --vocab V [--arch gpt2|llama] [--kv-heads K] [--ffn-hidden F]\n"
    "       [--experts E [--top-k K] [--moe-every N] [--capacity-factor F]] | --params N] [--seq-len T]\n"
    "       [--gpus G] [--gpu-memory GB] [--precision fp32|bf16|fp16|mixed]\n"
    "       [--fp32-grad-accum] [--zero S] [--tp T] [--pp P] [--dp D] [--micro-batch B] [--microbatches M]\n"
    "       [--ep N] [--sequence-parallel] [--recompute none|selective|full] [--global-batch N] [--ranks]\n"
    "       [--device cpu|cuda|cuda-emulated]\n"
    "                       bytes per GPU, pipeline bubble, bytes sent per step; with --gpus,\n"
    "                       --gpu-memory and --global-batch, the recommended layout (no coordinator);\n"
    "                       --ranks: each rank's bytes (needs a model shape); --device: the\n"
    "                       backend whose activations to count (a job spec's resources.device; from\n"
    "                       flags cpu, with the probabilities of unfused attention)\n"
    "       [--cluster dgx-h100|dgx-h200|dgx-a100|CLUSTER.yaml --gpus G [--top K]\n"
    "        [--layout tp=T,pp=P[,vp=V][,dp=D][,zero=S][,mb=B][,recompute=R][,sp=1][,ep=E]]]\n"
    "                       with --cluster: every layout of G devices that fits, ranked by predicted\n"
    "                       tokens/s (step time, tokens/s and TFLOP/s per GPU, MFU, the time split,\n"
    "                       memory per GPU); --layout: that one; -o json for tools\n"
    "  health [ADDR]        gRPC health check of ADDR (default: the coordinator); exit 0 if SERVING\n"
    "  whoami               who the coordinator takes this caller for: name, kind, team, role\n"
    "  principals hash      read a token on stdin, print its SHA-256 for the principals file\n"
    "submit takes --wait to watch the job it queued.\n";

namespace {

int Run(const Options& o) {
  if (o.args.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (o.args[0] == "plan") return PlanCommand(o.args, o.output == "json");
  if (o.args[0] == "principals") return PrincipalsCommand(o.args);  // local: no coordinator
  if (o.args[0] == "health") {  // for probes (deploy/k8s): no token needed
    auto serving = CheckServing(o.args.size() > 1 ? o.args[1] : o.coordinator);
    if (!serving.ok()) {
      std::fprintf(stderr, "gantry: %s\n", std::string(serving.status().message()).c_str());
      return 1;
    }
    std::printf("%s\n", *serving ? "SERVING" : "NOT_SERVING");
    return *serving ? 0 : 1;
  }
  // TLS and the cluster token from the environment (common/security.h).
  auto stub = v1::Coordinator::NewStub(MakeChannel(o.coordinator, 64 << 20));
  const std::string& cmd = o.args[0];
  if (cmd == "submit") {
    return SubmitCommand(o, stub.get());
  }
  if (cmd == "jobs") {
    return JobsCommand(o, stub.get());
  }
  if (cmd == "describe" || cmd == "cancel") {
    return DescribeOrCancelCommand(o, stub.get());
  }
  if (cmd == "watch") {
    return WatchCommand(o, stub.get());
  }
  if (cmd == "workers") {
    return WorkersCommand(o, stub.get());
  }
  if (cmd == "whoami") {
    return WhoAmICommand(o, stub.get());
  }
  if (cmd == "checkpoints" || cmd == "export" || cmd == "download" || cmd == "sample") {
    return CheckpointCommand(o, stub.get());
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
    else if ((a == "-o" || a == "--output") && i + 1 < argc &&
             (std::string(argv[i + 1]) == "table" || std::string(argv[i + 1]) == "json")) {
      o.output = argv[++i];  // -o table|json: the output format; `export -o DIR` keeps its -o
    }
    else if (a == "-h" || a == "--help") {
      std::fputs(gantry::cli::kUsage, stdout);
      return 0;
    } else o.args.push_back(a);
  }
  return gantry::cli::Run(o);
}
