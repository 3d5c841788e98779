// export for both front ends (export_checkpoint.h).
#include "cli/export_checkpoint.h"

#include <cstdio>
#include <filesystem>

#include "hf/hf_format.h"

namespace gantry::cli {

void DefineExportFlags(CommandFlags& flags, ExportFlags* e) {
  flags.String("dtype", &e->dtype, "fp32|bf16", "the exported weights' type (the checkpoint holds fp32)")
      .String("tokenizer", &e->tokenizer, "PATH",
              "the tokenizer to write as tokenizer.json; default: the job's data.tokenizer where it is on this "
              "machine");
}

absl::Status ExportModel(checkpoint::CheckpointSource& source, const std::string& what, const std::string& out,
                         const ExportFlags& e) {
  auto dtype = hf::ParseExportDtype(e.dtype);
  if (!dtype.ok()) return dtype.status();
  std::string missing;
  if (auto s = checkpoint::ExportCheckpoint(source, out, *dtype, e.tokenizer, &missing); !s.ok()) return s;
  if (!missing.empty()) {
    std::fprintf(stderr, "note: the job's tokenizer %s is not on this machine; the export has no tokenizer.json "
                 "(name it with --tokenizer)\n", missing.c_str());
  }
  auto layout = checkpoint::ReadCheckpointLayout(source);
  if (!layout.ok()) return layout.status();
  std::error_code ec;
  const bool with_tokenizer = std::filesystem::exists(std::filesystem::path(out) / "tokenizer.json", ec);
  std::printf("exported %s (written by dp %d ZeRO %d) to %s (Hugging Face GPT-2: config.json + model.safetensors, "
              "%s%s)\n",
              what.c_str(), layout->dp, layout->zero_stage, out.c_str(), e.dtype.c_str(),
              with_tokenizer ? ", tokenizer.json" : "");
  return absl::OkStatus();
}

}  // namespace gantry::cli
