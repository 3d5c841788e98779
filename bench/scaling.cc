// Predicted scaling (issue 39, item 5): for GPT-2 124M, a Llama 2 7B and a Llama 3 70B on a
// described cluster, the best layout the step cost model (jobspec/cost_model.h) finds at each
// GPU count from 1 to 16,384, and its tokens/s and MFU: strong scaling (a fixed global batch)
// and weak scaling (a fixed batch per GPU). A prediction, not a measurement: docs/perf/planner.md
// tables the model against measured and published runs.
//   scaling [--cluster dgx-h100|FILE] [--max-gpus 16384] [--csv FILE]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "jobspec/cluster.h"
#include "jobspec/cost_model.h"

namespace {

using gantry::jobspec::GPTConfig;

struct Model {
  const char* name;
  GPTConfig config;
  int seq_len;
  int strong_batch;    // sequences a step, strong scaling
  int weak_per_gpu;    // sequences a step per GPU, weak scaling
};

std::vector<Model> Models() {
  GPTConfig gpt2;  // GPT-2 124M
  gpt2.n_layer = 12, gpt2.n_head = 12, gpt2.n_embd = 768, gpt2.vocab_size = 50257, gpt2.max_seq_len = 1024;
  GPTConfig l7;  // Llama 2 7B
  l7.arch = gantry::jobspec::Arch::kLlama;
  l7.n_layer = 32, l7.n_head = 32, l7.n_embd = 4096, l7.ffn_hidden = 11008, l7.vocab_size = 32000;
  l7.max_seq_len = 4096;
  GPTConfig l70;  // Llama 3 70B
  l70.arch = gantry::jobspec::Arch::kLlama;
  l70.n_layer = 80, l70.n_head = 64, l70.n_kv_head = 8, l70.n_embd = 8192, l70.ffn_hidden = 28672;
  l70.vocab_size = 128256, l70.max_seq_len = 4096;
  // Batches of the published recipes' order: GPT-2's 0.5M tokens (llm.c), Llama's 4M.
  return {{"gpt2-124m", gpt2, 1024, 512, 16}, {"llama-7b", l7, 4096, 1024, 2}, {"llama-70b", l70, 4096, 1024, 1}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string cluster_name = "dgx-h100", csv_path;
  int max_gpus = 16384;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--cluster")) cluster_name = argv[i + 1];
    else if (!std::strcmp(argv[i], "--max-gpus")) max_gpus = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--csv")) csv_path = argv[i + 1];
    else {
      std::fprintf(stderr, "scaling: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  auto cluster = gantry::jobspec::LoadCluster(cluster_name);
  if (!cluster.ok()) {
    std::fprintf(stderr, "scaling: %s\n", std::string(cluster.status().message()).c_str());
    return 2;
  }
  FILE* csv = csv_path.empty() ? nullptr : std::fopen(csv_path.c_str(), "w");
  if (csv) std::fprintf(csv, "model,mode,gpus,global_batch,tokens_per_s,tokens_per_s_per_gpu,mfu,step_s,layout\n");
  std::printf("cluster %s (%s, %d a node)\n", cluster->name.c_str(), cluster->device.name.c_str(),
              cluster->gpus_per_node);
  std::printf("%-10s %-6s %6s %7s %14s %10s %6s %9s  %s\n", "model", "mode", "gpus", "batch", "tokens/s",
              "tok/s/GPU", "MFU", "step_s", "layout");
  for (const Model& m : Models()) {
    for (const char* mode : {"strong", "weak"}) {
      for (int gpus = 1; gpus <= max_gpus; gpus *= 2) {
        const bool strong = !std::strcmp(mode, "strong");
        const int batch = strong ? m.strong_batch : m.weak_per_gpu * gpus;
        gantry::jobspec::PlanInput in;
        in.model = m.config;
        in.seq_len = m.seq_len;
        in.precision = gantry::jobspec::Precision::kAutocast;
        auto ranked = gantry::jobspec::RankLayouts(in, *cluster, gpus, batch, 1);
        if (!ranked.ok()) {
          std::printf("%-10s %-6s %6d %7d %14s %10s %6s %9s  none fits\n", m.name, mode, gpus, batch, "-", "-", "-",
                      "-");
          continue;
        }
        const auto& r = (*ranked)[0];
        const std::string layout =
            absl::StrFormat("tp%d pp%d dp%d z%d mb%d x%d rc%s%s", r.in.tp, r.in.pp, r.in.dp, r.in.zero,
                            r.in.micro_batch, r.in.microbatches,
                            r.in.recompute == gantry::jobspec::Recompute::kFull        ? "full"
                            : r.in.recompute == gantry::jobspec::Recompute::kSelective ? "sel"
                                                                                       : "none",
                            r.in.sequence_parallel ? " sp" : "");
        std::printf("%-10s %-6s %6d %7d %14.0f %10.0f %5.1f%% %9.3f  %s\n", m.name, mode, gpus, batch,
                    r.cost.tokens_per_s, r.cost.tokens_per_s_per_gpu, 100 * r.cost.mfu, r.cost.step, layout.c_str());
        if (csv) {
          std::fprintf(csv, "%s,%s,%d,%d,%.6g,%.6g,%.6g,%.6g,%s\n", m.name, mode, gpus, batch, r.cost.tokens_per_s,
                       r.cost.tokens_per_s_per_gpu, r.cost.mfu, r.cost.step, layout.c_str());
        }
        std::fflush(stdout);
      }
    }
  }
  if (csv) std::fclose(csv);
  return 0;
}
