// gantry plan: memory per GPU, the pipeline bubble and bytes sent for a layout, and a
// recommended layout, computed here (no coordinator).
#include <cmath>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/commands.h"
#include "jobspec/job_spec.h"
#include "jobspec/planner.h"

namespace gantry::cli {

// gantry plan: the planner, locally.
int PlanCommand(const std::vector<std::string>& args) {
  jobspec::PlanInput in;
  int gpus = 0, global_batch = 0;
  bool dp_given = false, per_rank = false;
  jobspec::GPTConfig shape;
  bool shape_given = false;
  std::vector<std::string> shape_flags;  // those given, to name them
  bool params_given = false;
  auto bad = [](const std::string& why) {
    std::fprintf(stderr, "gantry: plan: %s\n", why.c_str());
    return 2;
  };
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto next = [&]() -> std::string { return i + 1 < args.size() ? args[++i] : std::string(); };
    auto num = [&](auto* out) { return absl::SimpleAtoi(next(), out); };
    auto real = [&](double* out) { return absl::SimpleAtod(next(), out); };
    bool ok = true;
    const bool shape_flag = a == "--preset" || a == "--n-layer" || a == "--d-model" || a == "--heads" ||
                            a == "--arch" || a == "--kv-heads" || a == "--ffn-hidden" || a == "--experts" ||
                            a == "--top-k" || a == "--moe-every" || a == "--capacity-factor" || a == "--vocab";
    if (shape_flag) shape_flags.push_back(a);
    if (a == "--preset") {
      auto c = jobspec::ModelPreset(next());
      if (!c.ok()) return bad(std::string(c.status().message()));
      shape = *c, shape_given = true;
    } else if (a == "--n-layer") {
      ok = num(&shape.n_layer), shape_given = true;
    } else if (a == "--d-model") {
      ok = num(&shape.n_embd), shape_given = true;
    } else if (a == "--heads") {
      ok = num(&shape.n_head), shape_given = true;
    } else if (a == "--arch") {
      const std::string v = next();
      if (v != "gpt2" && v != "llama") return bad("--arch is gpt2 or llama");
      shape.arch = v == "llama" ? jobspec::Arch::kLlama : jobspec::Arch::kGpt2, shape_given = true;
    } else if (a == "--kv-heads") {
      ok = num(&shape.n_kv_head), shape_given = true;
    } else if (a == "--ffn-hidden") {
      ok = num(&shape.ffn_hidden), shape_given = true;
    } else if (a == "--experts") {
      ok = num(&shape.moe.num_experts), shape_given = true;
    } else if (a == "--top-k") {
      ok = num(&shape.moe.top_k), shape_given = true;
    } else if (a == "--moe-every") {
      ok = num(&shape.moe.every_n_layers), shape_given = true;
    } else if (a == "--capacity-factor") {
      ok = real(&shape.moe.capacity_factor), shape_given = true;
    } else if (a == "--ep") {
      ok = num(&in.ep);
    } else if (a == "--sequence-parallel") {
      in.sequence_parallel = true;
    } else if (a == "--vocab") {
      ok = num(&shape.vocab_size), shape_given = true;
    } else if (a == "--seq-len") {
      ok = num(&in.seq_len);
    } else if (a == "--params") {
      ok = real(&in.params), params_given = true;
    } else if (a == "--gpus") {
      ok = num(&gpus);
    } else if (a == "--gpu-memory") {
      ok = real(&in.device_memory), in.device_memory *= 1e9;
    } else if (a == "--precision") {
      const std::string v = next();
      if (v != "mixed" && v != "fp32" && v != "bf16" && v != "fp16") {
        return bad("--precision is fp32, bf16 or fp16 (Gantry's train.precision), or mixed (the textbook's accounting)");
      }
      in.precision = v == "fp32"   ? jobspec::Precision::kFp32
                     : v == "mixed" ? jobspec::Precision::kMixed
                                    : jobspec::Precision::kAutocast;
    } else if (a == "--fp32-grad-accum") {
      in.fp32_grad_accum = true;
    } else if (a == "--zero") {
      ok = num(&in.zero);
    } else if (a == "--tp") {
      ok = num(&in.tp);
    } else if (a == "--pp") {
      ok = num(&in.pp);
    } else if (a == "--dp") {
      ok = num(&in.dp), dp_given = true;
    } else if (a == "--micro-batch") {
      ok = num(&in.micro_batch);
    } else if (a == "--microbatches") {
      ok = num(&in.microbatches);
    } else if (a == "--recompute") {
      const std::string v = next();
      if (v != "none" && v != "selective" && v != "full") return bad("--recompute is none, selective or full");
      in.recompute = v == "full" ? jobspec::Recompute::kFull : v == "selective" ? jobspec::Recompute::kSelective
                                                                           : jobspec::Recompute::kNone;
    } else if (a == "--global-batch") {
      ok = num(&global_batch);
    } else if (a == "--ranks") {
      per_rank = true;
    } else if (a.rfind("--", 0) != 0) {  // a job spec
      auto spec = jobspec::LoadJobSpec(a);
      if (!spec.ok()) return bad(std::string(spec.status().message()));
      const double mem = in.device_memory;
      in = jobspec::PlanOfSpec(*spec);
      in.device_memory = mem;
      dp_given = true;
    } else {
      return bad(absl::StrCat("unknown flag ", a));
    }
    if (!ok) return bad(absl::StrCat(a, " takes a number"));
  }
  // Two descriptions of one model never mix: a shape flag alone takes the defaults for the rest
  // of the shape (12 layers, d_model 768, ...), which would silently replace the --params given.
  if (params_given && shape_given) {
    return bad(absl::StrCat("--params describes the model by its size and ", absl::StrJoin(shape_flags, ", "),
                            " by its shape: give one of the two (--params alone plans the model state without "
                            "activations; a shape flag takes defaults for the rest of the shape: give the whole "
                            "shape, or --preset)"));
  }
  if (shape_given) {
    shape.max_seq_len = std::max(shape.max_seq_len, in.seq_len);
    if (auto s = shape.Validate(); !s.ok()) return bad(std::string(s.message()));
    in.model = shape;
  }
  if (gpus > 0 && !dp_given) in.dp = std::max(1, gpus / (in.tp * in.pp));
  auto p = jobspec::MakePlan(in);
  if (!p.ok()) return bad(std::string(p.status().message()));
  double n = in.params;
  if (in.model && n <= 0) {
    for (const auto& t : jobspec::ParameterLayout(*in.model)) n += static_cast<double>(t.numel);
  }
  if (in.model && in.model->llama()) {
    std::printf("model: llama, %d layers, d_model %d, %d heads (%d key/value), ffn %d, vocab %d, T %d: %.4g parameters\n",
                in.model->n_layer, in.model->n_embd, in.model->n_head, in.model->kv_heads(), in.model->ffn(),
                in.model->vocab_size, in.seq_len, n);
  } else if (in.model && in.model->moe.num_experts > 0) {
    const jobspec::MoeConfig& m = in.model->moe;
    std::printf("model: %d layers, d_model %d, %d heads, vocab %d, T %d, %d experts (top %d) every %d layer(s): "
                "%.4g parameters\n",
                in.model->n_layer, in.model->n_embd, in.model->n_head, in.model->vocab_size, in.seq_len, m.num_experts,
                m.top_k, m.every_n_layers, n);
  } else if (in.model) {
    std::printf("model: %d layers, d_model %d, %d heads, vocab %d, T %d: %.4g parameters\n", in.model->n_layer,
                in.model->n_embd, in.model->n_head, in.model->vocab_size, in.seq_len, n);
  } else {
    std::printf("model: %.4g parameters (no shape: activations not estimated)\n", n);
  }
  std::fputs(jobspec::RenderPlan(in, *p).c_str(), stdout);
  if (per_rank) {
    auto ranks = jobspec::PlanRanks(in);
    if (!ranks.ok()) return bad(std::string(ranks.status().message()));
    std::printf("\nper rank, in bytes:\n%s", jobspec::RenderRanks(in, *ranks).c_str());
  }
  if (gpus > 0 && global_batch > 0 && in.device_memory > 0) {
    auto r = jobspec::Recommend(in, gpus, global_batch);
    if (!r.ok()) {
      std::printf("recommended: none: %s\n", std::string(r.status().message()).c_str());
      return 1;
    }
    std::printf("\nrecommended for %d GPUs of %.1f GB and a global batch of %d:\n", gpus, in.device_memory / 1e9,
                global_batch);
    std::fputs(jobspec::RenderPlan(*r, *jobspec::MakePlan(*r)).c_str(), stdout);
  }
  return p->fits ? 0 : 1;
}

}  // namespace gantry::cli
