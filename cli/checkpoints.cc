// Checkpoints on the shard servers: list, export to Hugging Face, download, sample (on the
// cpu backend: the CLI links no GPU library).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/remote/shard_source.h"
#include "cli/commands.h"
#include "data/tokenizer.h"
#include "model/hf_io.h"
#include "model/sample.h"
#include "shardserver/client/shard_client.h"

namespace gantry::cli {

// checkpoints / export / download / sample: find the job's committed checkpoints on the
// shard servers.
int CheckpointCommand(const Options& o, v1::Coordinator::Stub* stub) {
  const std::string& cmd = o.args[0];
  std::string job_id, out_dir, prompt, dtype_name = "fp32";
  int64_t step = -1;
  int tokens = 200;
  for (size_t i = 1; i < o.args.size(); ++i) {
    const std::string& a = o.args[i];
    auto next = [&]() -> std::string { return i + 1 < o.args.size() ? o.args[++i] : ""; };
    if (a == "--step") {
      if (!absl::SimpleAtoi(next(), &step)) { std::fputs("gantry: --step takes a number\n", stderr); return 2; }
    } else if (a == "--out" || a == "-o") {
      out_dir = next();
    } else if (a == "--prompt") {
      prompt = next();
    } else if (a == "--dtype") {
      dtype_name = next();
    } else if (a == "--tokens") {
      if (!absl::SimpleAtoi(next(), &tokens)) { std::fputs("gantry: --tokens takes a number\n", stderr); return 2; }
    } else if (job_id.empty()) {
      job_id = a;
    } else {
      std::fprintf(stderr, "gantry: unexpected argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (job_id.empty()) { std::fprintf(stderr, "gantry: %s needs a job id\n", cmd.c_str()); return 2; }
  if ((cmd == "export" || cmd == "download") && out_dir.empty()) {
    std::fprintf(stderr, "gantry: %s needs -o DIR\n", cmd.c_str());
    return 2;
  }
  const auto dtype = model::ParseExportDtype(dtype_name);
  if (!dtype.ok()) {
    std::fprintf(stderr, "gantry: %s\n", std::string(dtype.status().message()).c_str());
    return 2;
  }
  v1::ListShardServersResponse ss;
  auto s = stub->ListShardServers(Ctx(o).get(), v1::ListShardServersRequest(), &ss);
  if (!s.ok()) return Fail(s);
  std::vector<std::string> servers, unreachable;
  for (const auto& srv : ss.shard_servers()) servers.push_back(srv.address());
  std::vector<shardserver::StoredCheckpoint> found = shardserver::ListStoredCheckpoints(servers, job_id, &unreachable);
  for (const auto& u : unreachable) std::fprintf(stderr, "gantry: cannot list checkpoints on %s\n", u.c_str());
  if (found.empty()) {
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
  if (cmd == "checkpoints") {
    if (o.output == "json") {
      v1::ListCheckpointsResponse r;
      for (const auto& c : found) {
        auto* info = r.add_checkpoints();
        info->set_job_id(c.job_id);
        info->set_step(c.step);
        info->set_bytes(c.bytes);
        info->set_commit_time_unix_ms(c.commit_time_unix_ms);
        info->set_manifest_json(c.manifest_json);
        for (const auto& [name, f] : c.files) {
          info->add_parts(name);
          info->add_part_bytes(f.bytes);
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
  const shardserver::StoredCheckpoint* pick = nullptr;
  for (const auto& c : found) {
    if (step < 0 || c.step == step) pick = &c;  // the newest, or the one asked for
  }
  if (pick == nullptr) {
    std::fprintf(stderr, "gantry: NOT_FOUND: job %s has no committed checkpoint%s\n", job_id.c_str(),
                 step >= 0 ? absl::StrCat(" at step ", step).c_str() : "");
    return 2;
  }
  if (cmd == "download") {  // every file from the server that committed it, crc32c-checked
    std::map<std::string, std::vector<std::string>> by_server;
    for (const auto& [name, f] : pick->files) by_server[f.server].push_back(name);
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
  // The checkpoint's parts (each rank's pieces, on the shard servers) are read in place and
  // assembled into one Hugging Face model directory.
  const std::string tmp = absl::StrCat(std::filesystem::temp_directory_path().string(), "/gantry-", cmd, "-", getpid());
  std::string dir = cmd == "sample" ? tmp + "/model" : out_dir;
  checkpoint::ShardCheckpointSource source(*pick);
  std::string missing;
  auto st = checkpoint::ExportCheckpoint(source, dir, cmd == "export" ? *dtype : kernels::Precision::kFp32, "", &missing);
  if (st.ok() && !missing.empty()) {
    std::fprintf(stderr, "note: the job's tokenizer %s is not on this machine; %s\n", missing.c_str(),
                 cmd == "export" ? "the export has no tokenizer.json" : "each sampled id is shown as a byte");
  }
  std::error_code ec;
  if (!st.ok()) {
    std::filesystem::remove_all(tmp, ec);
    std::fprintf(stderr, "gantry: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  if (cmd == "export") {
    std::printf("exported %s step %ld to %s (Hugging Face GPT-2: config.json + model.safetensors, %s)\n",
                job_id.c_str(), static_cast<long>(pick->step), dir.c_str(), dtype_name.c_str());
    return 0;
  }
  auto model = model::LoadHFModel(dir);
  std::filesystem::remove_all(tmp, ec);
  if (!model.ok()) {
    std::fprintf(stderr, "gantry: %s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  model::SampleOptions so;
  so.tokens = tokens;
  so.temperature = 0.8f;
  so.top_k = 40;
  std::fputs(prompt.c_str(), stdout);
  auto tok = data::TokenizerForModel(dir, "", (*model)->config().vocab_size);
  if (!tok.ok()) {
    std::fprintf(stderr, "gantry: %s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  if ((*tok)->end_of_text() >= 0) so.start = static_cast<uint32_t>((*tok)->end_of_text());
  auto out = model::Sample(**model, (*tok)->Encode(prompt), so, [&](uint32_t t) {
    std::fputs((*tok)->TokenText(t).c_str(), stdout);
    std::fflush(stdout);
  });
  std::fputc('\n', stdout);
  return out.ok() ? 0 : 1;
}

}  // namespace gantry::cli
