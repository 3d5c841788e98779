// Checkpoints on the shard servers: list, export to Hugging Face, download. None runs the
// model (sample, which does, is sample_command.cc).
#include <cstdio>
#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/remote/shard_source.h"
#include "cli/commands.h"
#include "cli/export_checkpoint.h"
#include "hf/hf_format.h"
#include "shardserver/client/shard_client.h"

namespace gantry::cli {

namespace {

// The job's committed checkpoints on the shard servers, oldest first. Returns -1, or the exit
// status of a failure it printed.
int FindCheckpoints(const Options& o, v1::Coordinator::Stub* stub, const std::string& job_id,
                    std::vector<shardserver::StoredCheckpoint>* found) {
  v1::ListShardServersResponse ss;
  auto s = stub->ListShardServers(Ctx(o).get(), v1::ListShardServersRequest(), &ss);
  if (!s.ok()) return Fail(s);
  std::vector<std::string> servers, unreachable;
  for (const auto& srv : ss.shard_servers()) servers.push_back(srv.address());
  *found = shardserver::ListStoredCheckpoints(servers, job_id, &unreachable);
  for (const auto& u : unreachable) std::fprintf(stderr, "gantry: cannot list checkpoints on %s\n", u.c_str());
  if (found->empty()) {
    // Nothing stored: a job the coordinator does not know either is a wrong id, not an empty
    // listing. (Checkpoints are found on the shard servers by job id alone, so a job whose
    // checkpoints are stored lists them even where the coordinator no longer has it.)
    v1::GetJobRequest gr;
    gr.set_job_id(job_id);
    v1::Job job;
    const grpc::Status gs = stub->GetJob(Ctx(o).get(), gr, &job);
    if (gs.error_code() == grpc::StatusCode::NOT_FOUND) {
      std::fprintf(stderr, "gantry: NOT_FOUND: job %s not found: the coordinator has no such job, and no shard server "
                   "holds a checkpoint of it\n", job_id.c_str());
      return 2;
    }
  }
  return -1;
}

// -o DIR: required (export, download). Returns -1, or 2 after the error.
int NeedOut(const Options& o, const std::string& out_dir) {
  if (!out_dir.empty()) return -1;
  std::fprintf(stderr, "gantry: %s needs -o DIR\n", o.command.c_str());
  return 2;
}

}  // namespace

int PickCheckpoint(const Options& o, const std::string& job_id, int64_t step,
                   std::vector<shardserver::StoredCheckpoint>* found, const shardserver::StoredCheckpoint** pick) {
  auto stub = Connect(o);
  if (int rc = FindCheckpoints(o, stub.get(), job_id, found); rc >= 0) return rc;
  *pick = nullptr;
  for (const auto& c : *found) {
    if (step < 0 || c.step == step) *pick = &c;  // the newest, or the one asked for
  }
  if (*pick == nullptr) {
    std::fprintf(stderr, "gantry: NOT_FOUND: job %s has no committed checkpoint%s\n", job_id.c_str(),
                 step >= 0 ? absl::StrCat(" at step ", step).c_str() : "");
    return 2;
  }
  return -1;
}

void DefineStep(CommandFlags& f, int64_t* step) {
  f.Int("step", step, "N", "the checkpoint of step N").Default("the newest");
}

// checkpoints JOB
int CheckpointsCommand(const Options& o) {
  std::vector<std::string> job;
  CommandFlags f = CommandFlagsFor(o);
  f.Operands(&job, 1, 1);
  if (int rc = ParseCommand(f, o); rc >= 0) return rc;
  std::vector<shardserver::StoredCheckpoint> found;
  if (int rc = FindCheckpoints(o, Connect(o).get(), job[0], &found); rc >= 0) return rc;
  if (o.output == "json") {
    v1::ListCheckpointsResponse r;
    for (const auto& c : found) {
      auto* info = r.add_checkpoints();
      info->set_job_id(c.job_id);
      info->set_step(c.step);
      info->set_bytes(c.bytes);
      info->set_commit_time_unix_ms(c.commit_time_unix_ms);
      info->set_manifest_json(c.manifest_json);
      for (const auto& [name, file] : c.files) {
        info->add_parts(name);
        info->add_part_bytes(file.bytes);
      }
    }
    std::printf("%s\n", Json(r).c_str());
    return 0;
  }
  std::printf("%-8s %-20s %12s %-22s %s\n", "STEP", "COMMITTED", "BYTES", "SHARD SERVERS", "LAYOUT");
  for (const auto& c : found) {
    std::string layout = "-";
    const auto& m = c.manifest_json;
    if (auto p = m.find("\"layout\":"); p != std::string::npos) layout = m.substr(p + 9, m.find('}', p) - p - 8);
    std::printf("%-8ld %-20s %12ld %-22s %s\n", static_cast<long>(c.step), When(c.commit_time_unix_ms).c_str(),
                static_cast<long>(c.bytes), absl::StrJoin(c.servers, ",").c_str(), layout.c_str());
  }
  return 0;
}

// download JOB [--step N] -o DIR: every file from the server that committed it, crc32c-checked.
int DownloadCommand(const Options& o) {
  std::vector<std::string> job;
  int64_t step = -1;
  std::string out_dir;
  CommandFlags f = CommandFlagsFor(o);
  DefineStep(f, &step);
  f.String("out", &out_dir, "DIR", "the directory to write the files to").Short('o').Operands(&job, 1, 1);
  if (int rc = ParseCommand(f, o); rc >= 0) return rc;
  if (int rc = NeedOut(o, out_dir); rc >= 0) return rc;
  const std::string& job_id = job[0];
  std::vector<shardserver::StoredCheckpoint> found;
  const shardserver::StoredCheckpoint* pick = nullptr;
  if (int rc = PickCheckpoint(o, job_id, step, &found, &pick); rc >= 0) return rc;
  std::map<std::string, std::vector<std::string>> by_server;
  for (const auto& [name, file] : pick->files) by_server[file.server].push_back(name);
  for (const auto& [server, names] : by_server) {
    if (auto st = shardserver::DownloadCheckpoint(server, job_id, pick->step, names, out_dir); !st.ok()) {
      std::fprintf(stderr, "gantry: %s\n", std::string(st.message()).c_str());
      return 1;
    }
  }
  std::printf("downloaded %s step %ld to %s (%zu files, %ld bytes)\n", job_id.c_str(), static_cast<long>(pick->step),
              out_dir.c_str(), pick->files.size(), static_cast<long>(pick->bytes));
  return 0;
}

// export JOB [--step N] -o DIR [--dtype fp32|bf16] [--tokenizer PATH]: the checkpoint's parts
// (each rank's pieces, on the shard servers) are read in place and assembled into one Hugging
// Face model directory.
int ExportCommand(const Options& o) {
  std::vector<std::string> job;
  int64_t step = -1;
  std::string out_dir;
  ExportFlags e;
  CommandFlags f = CommandFlagsFor(o);
  DefineStep(f, &step);
  f.String("out", &out_dir, "DIR", "the model directory to write").Short('o').Operands(&job, 1, 1);
  DefineExportFlags(f, &e);
  if (int rc = ParseCommand(f, o); rc >= 0) return rc;
  if (int rc = NeedOut(o, out_dir); rc >= 0) return rc;
  if (auto dtype = hf::ParseExportDtype(e.dtype); !dtype.ok()) return FailStatus(dtype.status());
  std::vector<shardserver::StoredCheckpoint> found;
  const shardserver::StoredCheckpoint* pick = nullptr;
  if (int rc = PickCheckpoint(o, job[0], step, &found, &pick); rc >= 0) return rc;
  checkpoint::ShardCheckpointSource source(*pick);
  auto st = ExportModel(source, absl::StrCat(job[0], " step ", pick->step), out_dir, e);
  if (!st.ok()) {
    std::fprintf(stderr, "gantry: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace gantry::cli
