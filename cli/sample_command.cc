// gantry sample: the one gantry command that runs the model (on the cpu backend). It is built
// into the gantry binary beside main.cc, not into gantry_cli, so that the other commands'
// library links neither the model nor its kernels (scripts/check_deps.py); the model's part
// is gantry_cli_model (cli/model_commands.h), which gantry-train shares.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/remote/shard_source.h"
#include "cli/commands.h"
#include "cli/model_commands.h"
#include "shardserver/client/shard_client.h"

namespace gantry::cli {

// sample JOB [--step N] [--prompt TEXT] [--tokens N] ...: the checkpoint exported to a
// temporary model directory, and sampled there on the cpu backend.
int SampleCommand(const Options& o) {
  std::vector<std::string> job;
  int64_t step = -1;
  SampleFlags sf;
  sf.tokens = 200;
  CommandFlags f = CommandFlagsFor(o);
  DefineStep(f, &step);
  f.Operands(&job, 1, 1);
  DefineSampleFlags(f, &sf);
  if (int rc = ParseCommand(f, o); rc >= 0) return rc;
  std::vector<shardserver::StoredCheckpoint> found;
  const shardserver::StoredCheckpoint* pick = nullptr;
  if (int rc = PickCheckpoint(o, job[0], step, &found, &pick); rc >= 0) return rc;
  const std::string tmp = absl::StrCat(std::filesystem::temp_directory_path().string(), "/gantry-sample-", getpid());
  const std::string dir = tmp + "/model";
  checkpoint::ShardCheckpointSource source(*pick);
  std::string missing;
  auto st = checkpoint::ExportCheckpoint(source, dir, kernels::Precision::kFp32, "", &missing);
  if (st.ok() && !missing.empty() && sf.tokenizer.empty()) {
    std::fprintf(stderr, "note: the job's tokenizer %s is not on this machine; each sampled id is shown as a byte "
                 "(name it with --tokenizer)\n", missing.c_str());
  }
  if (st.ok()) st = SampleModel(dir, sf);
  std::error_code ec;
  std::filesystem::remove_all(tmp, ec);
  if (!st.ok()) {
    std::fprintf(stderr, "gantry: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace gantry::cli
