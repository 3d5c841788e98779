// The job spec's parser, validation and normal form (job_spec.h). Over 700 lines because the
// parser is one table of every field, and each section's rules sit beside it in the order they
// are checked; `parallel: auto`'s own rules are in auto_layout.cc.
#include "absl/strings/string_view.h"
#include "jobspec/job_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <limits>
#include <set>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/status.h"
#include "jobspec/auto_layout.h"
#include "jobspec/pipeline.h"
#include "jobspec/yaml_fields.h"
#include "yaml-cpp/yaml.h"

namespace gantry::jobspec {
namespace {

// The most ranks a job may have: past the largest training runs there are (tens of
// thousands of GPUs), and small enough that products of ranks and batch sizes fit an int.
constexpr int64_t kMaxWorld = 1 << 20;

absl::Status FieldError(absl::string_view field, absl::string_view why) {
  return jobspec::FieldError("job spec", field, why);
}

template <typename T>
absl::Status Get(const YAML::Node& n, const std::string& field, absl::string_view type, T* out) {
  if (!n.IsScalar()) return FieldError(field, absl::StrCat("must be ", type, ", got ", DescribeNode(n)));
  try {
    *out = n.as<T>();
  } catch (const YAML::Exception&) {
    return FieldError(field, absl::StrCat("must be ", type, ", got '", n.Scalar(), "'"));
  }
  return absl::OkStatus();
}

// Visits a mapping section, calling handlers by key; any other key is an error (yaml_fields.h).
using Handler = FieldHandler;
absl::Status Section(const YAML::Node& node, const std::string& name,
                     const std::map<std::string, Handler>& handlers) {
  return ReadSection("job spec", node, name, handlers);
}

template <typename T>
Handler Num(T* out, absl::string_view type) {
  return [out, type](const YAML::Node& n, const std::string& f) { return Get(n, f, type, out); };
}
Handler Int(int* out) { return Num(out, "an integer"); }
Handler Int64(int64_t* out) { return Num(out, "an integer"); }
Handler Real(double* out) { return Num(out, "a number"); }
Handler Str(std::string* out) { return Num(out, "a string"); }
Handler Bool(bool* out) { return Num(out, "true or false"); }
Handler IntList(std::vector<int>* out) {
  return [out](const YAML::Node& n, const std::string& f) -> absl::Status {
    if (!n.IsSequence()) return FieldError(f, absl::StrCat("must be a list of integers, got ", DescribeNode(n)));
    out->clear();
    for (size_t i = 0; i < n.size(); ++i) {
      int v = 0;
      RETURN_IF_ERROR(Get(n[i], absl::StrCat(f, "[", i, "]"), "an integer", &v));
      out->push_back(v);
    }
    return absl::OkStatus();
  };
}

// A double in the fewest digits that read back to it (1e-05, 500000, 0.1).
std::string Shortest(double x) {
  char buf[64];
  if (x == std::trunc(x) && std::abs(x) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", x);
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

// The job spec's model keys that describe the model (seq_len is the job's), in the order
// errors list them: each one's value with defaults resolved, and whether two models differ in
// it as GPTConfig's == sees them (rope_theta only between two Llamas: GPT-2 has no RoPE).
struct ModelKey {
  const char* key;
  std::function<std::string(const jobspec::GPTConfig&)> value;
  std::function<bool(const jobspec::GPTConfig&, const jobspec::GPTConfig&)> differs;
};

const std::vector<ModelKey>& ModelKeys() {
  using C = const jobspec::GPTConfig&;
  auto int_key = [](const char* key, int (*get)(C)) {
    return ModelKey{key, [get](C c) { return std::to_string(get(c)); }, [get](C a, C b) { return get(a) != get(b); }};
  };
  static const std::vector<ModelKey> keys = {
      int_key("n_layer", [](C c) { return c.n_layer; }),
      int_key("n_head", [](C c) { return c.n_head; }),
      int_key("n_embd", [](C c) { return c.n_embd; }),
      int_key("vocab_size", [](C c) { return c.vocab_size; }),
      int_key("max_seq_len", [](C c) { return c.max_seq_len; }),
      {"arch", [](C c) { return std::string(jobspec::ArchName(c.arch)); }, [](C a, C b) { return a.arch != b.arch; }},
      int_key("n_kv_head", [](C c) { return c.kv_heads(); }),
      int_key("ffn_hidden", [](C c) { return c.ffn(); }),
      {"rope_theta", [](C c) { return Shortest(c.rope_theta); },
       [](C a, C b) { return a.llama() && b.llama() && a.rope_theta != b.rope_theta; }},
      {"norm_eps", [](C c) { return Shortest(c.norm_eps); }, [](C a, C b) { return a.norm_eps != b.norm_eps; }},
  };
  return keys;
}

// A stated model key as the spec states it: n_kv_head and ffn_hidden 0 say which value the
// default resolves to.
std::string StatedValue(const ModelKey& k, const jobspec::GPTConfig& c) {
  const std::string key = k.key;
  if (key == "n_kv_head" && c.n_kv_head == 0) return absl::StrCat("0 (n_head, ", c.kv_heads(), ")");
  if (key == "ffn_hidden" && c.ffn_hidden == 0) return absl::StrCat("0 (the ", jobspec::ArchName(c.arch), " default, ", c.ffn(), ")");
  return k.value(c);
}

// --init-from: every model key the spec states agrees with the model it starts from.
absl::Status AgreesWith(const jobspec::GPTConfig& spec, const jobspec::GPTConfig& from, const std::string& from_name,
                        const std::set<std::string>& present) {
  std::vector<std::string> wrong;
  for (const ModelKey& k : ModelKeys()) {
    const std::string field = absl::StrCat("model.", k.key);
    if (!present.count(field) || !k.differs(spec, from)) continue;
    wrong.push_back(absl::StrCat("field '", field, "' is ", StatedValue(k, spec), " but ", from_name, " says ", k.value(from)));
  }
  if (wrong.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("job spec: ", absl::StrJoin(wrong, "; ")));
}

// The model's own check (GPTConfig::Validate, "model.FIELD: why") as a job spec error.
absl::Status ModelError(const absl::Status& st) {
  const absl::string_view m = st.message();
  const size_t colon = m.find(": ");
  if (m.substr(0, 6) == "model." && colon != absl::string_view::npos) {
    return FieldError(m.substr(0, colon), m.substr(colon + 2));
  }
  return absl::InvalidArgumentError(absl::StrCat("job spec: ", m));
}

// The keys every spec states (the model's shape may come from the model a job starts from).
// parallel: auto: the planner chooses micro_batch, and keeps the global batch, which is stated.
absl::Status RequiredFields(const std::set<std::string>& present, bool from_model, bool auto_layout) {
  for (const char* f : {"model.n_layer", "model.n_head", "model.n_embd", "model.vocab_size"}) {
    if (!from_model && !present.count(f)) return FieldError(f, "is required");
  }
  for (const char* f : {"model.seq_len", "data.train", "train.steps", "train.micro_batch", "train.lr"}) {
    if (!present.count(f) && !(auto_layout && std::string(f) == "train.micro_batch")) return FieldError(f, "is required");
  }
  if (auto_layout && !present.count("train.global_batch")) {
    return FieldError("train.global_batch",
                      "is required with parallel: auto (the planner keeps it and chooses micro_batch x grad_accum x dp)");
  }
  return absl::OkStatus();
}

// The model and the sequence length.
absl::Status ValidateModel(const JobSpec& s, const std::set<std::string>& present) {
  if (!s.model.llama() && present.count("model.rope_theta")) {
    return FieldError("model.rope_theta", "applies to arch llama (GPT-2 has learned positions, no RoPE)");
  }
  if (auto st = s.model.Validate(); !st.ok()) return ModelError(st);
  if (s.seq_len < 1) return FieldError("model.seq_len", "must be >= 1");
  if (s.seq_len > s.model.max_seq_len) {
    return FieldError("model.seq_len", absl::StrCat(s.seq_len, " exceeds model.max_seq_len ",
                                                    s.model.max_seq_len));
  }
  return absl::OkStatus();
}

// Steps and batch sizes.
absl::Status ValidateBatchSizes(const TrainSpec& t) {
  if (t.steps < 1) return FieldError("train.steps", "must be >= 1");
  if (t.micro_batch < 1) return FieldError("train.micro_batch", "must be >= 1");
  if (t.global_batch < 1) return FieldError("train.global_batch", "must be >= 1");
  return absl::OkStatus();
}

// The parallel degrees: each at least 1, their product within kMaxWorld, and each dividing what
// it splits; the ZeRO stage.
absl::Status ValidateDegrees(const JobSpec& s) {
  if (s.parallel.dp < 1) return FieldError("parallel.dp", "must be >= 1");
  if (s.parallel.tp < 1) return FieldError("parallel.tp", "must be >= 1");
  if (s.parallel.pp < 1) return FieldError("parallel.pp", "must be >= 1");
  // Ranks, and the batch's products with them, are ints throughout (placement, the rank
  // formula, micro_batch x dp): a bound here keeps every product from wrapping.
  if (s.parallel.cp < 1) return FieldError("parallel.cp", "must be >= 1");
  if (static_cast<int64_t>(s.parallel.dp) * s.parallel.cp * s.parallel.tp * s.parallel.pp > kMaxWorld) {
    return FieldError("parallel", absl::StrCat(s.parallel.cp > 1 ? "dp x cp x tp x pp = " : "dp x tp x pp = ",
                                               static_cast<int64_t>(s.parallel.dp) * s.parallel.cp * s.parallel.tp *
                                                   s.parallel.pp,
                                               " ranks, more than ", kMaxWorld));
  }
  if (s.model.n_head % s.parallel.tp != 0) {
    return FieldError("parallel.tp", absl::StrCat(s.parallel.tp, " does not divide model.n_head ", s.model.n_head,
                                                  " (each tensor-parallel rank takes whole heads)"));
  }
  if (s.model.kv_heads() % s.parallel.tp != 0) {
    return FieldError("parallel.tp", absl::StrCat(s.parallel.tp, " does not divide model.n_kv_head ", s.model.kv_heads(),
                                                  " (each tensor-parallel rank takes whole key/value heads with their "
                                                  "query heads)"));
  }
  if (s.model.ffn() % s.parallel.tp != 0) {
    return FieldError("parallel.tp", absl::StrCat(s.parallel.tp, " does not divide model.ffn_hidden ", s.model.ffn(),
                                                  " (the MLP's width, split across the tensor-parallel ranks)"));
  }
  // Stages need not take as many layers: jobspec::BalanceStages splits them by cost (Llama 3
  // 405B: 126 layers over 16 stages), one layer each at least.
  if (s.parallel.pp > s.model.n_layer) {
    return FieldError("parallel.pp", absl::StrCat(s.parallel.pp, " stages for model.n_layer ", s.model.n_layer,
                                                  " layers (each stage takes one layer at least)"));
  }
  if (!s.parallel.stage_layers.empty()) {
    if (s.parallel.auto_layout.enabled) {
      return FieldError("parallel.stage_layers", "is not for parallel: auto (the planner chooses pp)");
    }
    // The interleaved schedule: one entry a chunk (pp x virtual_stages).
    const int chunks = s.parallel.pp * std::max(1, s.parallel.virtual_stages);
    if (chunks != s.parallel.pp && static_cast<int>(s.parallel.stage_layers.size()) != chunks) {
      return FieldError("parallel.stage_layers",
                        absl::StrCat("gives ", s.parallel.stage_layers.size(), " stages' layers; with virtual_stages ",
                                     s.parallel.virtual_stages, " it gives each chunk's: pp x virtual_stages = ", chunks,
                                     " entries, chunk c·pp + s on stage s"));
    }
    if (auto st = CheckStageLayers(s.parallel.stage_layers, chunks, s.model.n_layer); !st.ok()) {
      return FieldError("parallel.stage_layers", st.message());
    }
  }
  if (s.parallel.zero_stage < 0 || s.parallel.zero_stage > 3) return FieldError("parallel.zero_stage", "must be 0, 1, 2 or 3");
  return absl::OkStatus();
}

// Context parallelism: seq_len cut into 2·cp chunks, and the combinations not built yet refused,
// each with what is missing.
absl::Status ValidateContextParallel(const JobSpec& s) {
  const int cp = s.parallel.cp;
  if (cp == 1) return absl::OkStatus();
  if (s.seq_len % (2 * cp) != 0) {
    return FieldError("parallel.cp", absl::StrCat(cp, " needs model.seq_len a multiple of 2·cp = ", 2 * cp, ", not ",
                                                  s.seq_len, " (each sequence is cut into 2·cp equal chunks, rank i "
                                                  "holding chunks i and 2·cp−1−i)"));
  }
  auto refuse = [cp](const std::string& what, const std::string& why) {
    return FieldError("parallel.cp", absl::StrCat(cp, " with ", what, " is not supported yet: ", why));
  };
  if (s.auto_layout()) {
    return refuse("parallel: auto", "auto chooses cp itself (where the job's device and model allow it); state cp "
                                    "with dp, tp and pp, or leave all of them to auto");
  }
  // On cuda and cuda-emulated the ring's block ops are kernels/cuda/attention_block.cu's, which
  // hold a head's row in a warp's registers: 128 wide at most.
  if (s.resources.device != "cpu" && s.model.head_dim() > 128) {
    return refuse(absl::StrCat("resources.device ", s.resources.device, " and a head size of ", s.model.head_dim()),
                  "the device's block attention kernels take head sizes up to 128");
  }
  // Sequence parallelism splits a rank's rows (micro_batch x seq_len / cp) over tp.
  const int64_t rows = static_cast<int64_t>(s.train.micro_batch) * (s.seq_len / cp);
  if (s.parallel.sequence_parallel && s.parallel.tp > 1 && rows % s.parallel.tp != 0) {
    return FieldError("parallel.sequence_parallel",
                      absl::StrCat("needs tp ", s.parallel.tp, " to divide a cp rank's rows, micro_batch x seq_len / cp = ",
                                   rows, " (each tensor-parallel rank holds as many of them)"));
  }
  if (s.optimizer.placement != "worker") {
    return refuse("optimizer.placement shardserver", "parameter-server mode is not wired with it");
  }
  return absl::OkStatus();
}

// Mixture of experts and expert parallelism.
absl::Status ValidateExperts(const JobSpec& s) {
  if (s.model.moe.num_experts > 0) {
    if (s.train.precision != "fp32") {
      return FieldError("model.moe", absl::StrCat("runs in fp32 (train.precision is ", s.train.precision,
                                                  "; the experts' 16-bit path is not built yet)"));
    }
  }
  if (s.parallel.ep < 1) return FieldError("parallel.ep", "must be >= 1");
  if (s.parallel.ep > 1) {
    const int ep = s.parallel.ep;
    if (s.model.moe.num_experts == 0) {
      return FieldError("parallel.ep", "splits a mixture-of-experts model's experts: model.moe has none");
    }
    if (!s.auto_layout() && s.parallel.dp % ep != 0) {
      return FieldError("parallel.ep", absl::StrCat(ep, " does not divide parallel.dp ", s.parallel.dp,
                                                    " (expert-parallel groups are made of data-parallel replicas)"));
    }
    if (s.model.moe.num_experts % ep != 0) {
      return FieldError("parallel.ep", absl::StrCat(ep, " does not divide model.moe.num_experts ",
                                                    s.model.moe.num_experts, " (each rank holds as many experts)"));
    }
    if (s.parallel.zero_stage > 1) {
      return FieldError("parallel.ep", absl::StrCat("runs with ZeRO 0 or 1 (parallel.zero_stage is ", s.parallel.zero_stage,
                                                    "; the expert groups' per-micro-batch reductions of ZeRO 2 and 3 "
                                                    "are not built yet)"));
    }
    if (s.optimizer.placement != "worker" || s.optimizer.offload != "none") {
      return FieldError("parallel.ep", "runs AdamW on the workers' memory (optimizer.placement worker, offload none)");
    }
  }
  return absl::OkStatus();
}

// Sequence parallelism.
absl::Status ValidateSequenceParallel(const JobSpec& s) {
  // parallel: auto: a tp or micro_batch not stated is the planner's, which keeps these rules.
  const AutoLayout& a = s.parallel.auto_layout;
  const bool tp_open = a.enabled && !a.tp, mb_open = a.enabled && !a.micro_batch;
  if (s.parallel.sequence_parallel) {
    if (s.parallel.tp < 2 && !tp_open) {
      return FieldError("parallel.sequence_parallel", "needs tp > 1 (it shards the sequence within the tensor-parallel group)");
    }
    if (!tp_open && !mb_open && (static_cast<int64_t>(s.train.micro_batch) * s.seq_len) % s.parallel.tp != 0) {
      return FieldError("parallel.sequence_parallel",
                        absl::StrCat("needs tp ", s.parallel.tp, " to divide micro_batch x seq_len = ",
                                     static_cast<int64_t>(s.train.micro_batch) * s.seq_len,
                                     " (each rank holds as many of the rows)"));
    }
    if (s.train.precision != "fp32" && s.model.n_embd % 2 != 0) {
      return FieldError("parallel.sequence_parallel",
                        absl::StrCat("in ", s.train.precision, " needs an even n_embd (", s.model.n_embd,
                                     "): 16-bit rows are gathered two elements to a float"));
    }
  }
  return absl::OkStatus();
}

// The pipeline schedule, what combines with model parallelism, the gradient buckets and the
// collectives' timeout.
absl::Status ValidatePipelineAndReduction(const JobSpec& s) {
  if (s.parallel.schedule != "1f1b" && s.parallel.schedule != "gpipe") {
    return FieldError("parallel.schedule", absl::StrCat("'", s.parallel.schedule, "' is not 1f1b or gpipe"));
  }
  const bool model_parallel = s.parallel.tp > 1 || s.parallel.pp > 1;
  if (s.parallel.pp > 1 && s.parallel.zero_stage > 1) {
    // As DeepSpeed: stages 2 and 3 reduce (and 3 gathers) every micro-batch, which the
    // pipeline's schedule interleaves across stages.
    return FieldError("parallel.zero_stage",
                      absl::StrCat("is ", s.parallel.zero_stage, " with pp ", s.parallel.pp,
                                   ": pipeline stages run with ZeRO 0 or 1 (stages 2 and 3 reduce and gather every "
                                   "micro-batch, which the pipeline schedule interleaves); tensor parallelism takes "
                                   "any stage"));
  }
  if (model_parallel && s.optimizer.placement != "worker") {
    return FieldError("optimizer.placement", "shardserver runs with data parallelism alone (tp and pp must be 1)");
  }
  if (!(s.parallel.bucket_mb > 0) || !std::isfinite(s.parallel.bucket_mb)) {
    return FieldError("parallel.bucket_mb", "must be > 0");
  }
  if (!(s.parallel.timeout_s >= 0)) return FieldError("parallel.timeout_s", "must be >= 0 (0 = the worker's default)");
  return absl::OkStatus();
}

// Where AdamW runs: placement, offload, staleness.
absl::Status ValidateOptimizer(const JobSpec& s) {
  if (s.optimizer.placement != "worker" && s.optimizer.placement != "shardserver") {
    return FieldError("optimizer.placement", absl::StrCat("'", s.optimizer.placement, "' is not worker or shardserver"));
  }
  if (s.optimizer.placement == "shardserver" && s.parallel.zero_stage == 3) {
    return FieldError("optimizer.placement",
                      "shardserver keeps whole parameters on every worker and the optimizer on the shard servers, "
                      "but parallel.zero_stage 3 shards the parameters over the workers: use zero_stage 0-2 "
                      "with shardserver, or placement worker with zero_stage 3");
  }
  if (s.optimizer.staleness < 0) return FieldError("optimizer.staleness", "must be >= 0 (0 = synchronous)");
  if (s.optimizer.offload != "none" && s.optimizer.offload != "cpu") {
    return FieldError("optimizer.offload", absl::StrCat("is '", s.optimizer.offload, "': none or cpu"));
  }
  if (s.parallel.offload_params != "none" && s.parallel.offload_params != "cpu") {
    return FieldError("parallel.offload_params", absl::StrCat("is '", s.parallel.offload_params, "': none or cpu"));
  }
  const bool zero_open = s.auto_layout() && !s.parallel.auto_layout.zero_stage;  // the planner's: it keeps these rules
  if (s.parallel.offload_params == "cpu" && ((s.parallel.zero_stage != 3 && !zero_open) || s.optimizer.offload != "cpu")) {
    return FieldError("parallel.offload_params",
                      "cpu keeps ZeRO 3's parameter shard in host memory as the offloaded optimizer's fp32 master: it "
                      "needs parallel.zero_stage 3 and optimizer.offload cpu");
  }
  if (s.optimizer.offload == "cpu" && ((s.parallel.zero_stage < 1 && !zero_open) || s.optimizer.placement != "worker")) {
    return FieldError("optimizer.offload",
                      "cpu offloads a ZeRO rank's shard of the optimizer: it needs parallel.zero_stage 1, 2 or 3 and "
                      "optimizer.placement worker");
  }
  if (s.optimizer.staleness > 0 && s.optimizer.placement != "shardserver") {
    return FieldError("optimizer.staleness", "applies to optimizer.placement shardserver only");
  }
  return absl::OkStatus();
}

// The workers and the device kind.
absl::Status ValidateResources(const JobSpec& s) {
  if (s.resources.workers < 0) return FieldError("resources.workers", "must be >= 1");
  if (s.resources.device != "cpu" && s.resources.device != "cuda" && s.resources.device != "cuda-emulated") {
    return FieldError("resources.device", absl::StrCat("is '", s.resources.device, "': cpu, cuda or cuda-emulated"));
  }
  if (s.resources.workers != 0 && s.resources.workers != s.world_size() && !s.auto_layout()) {
    return FieldError("resources.workers",
                      absl::StrCat(s.resources.workers, " workers asked for, but the parallel degrees need dp ",
                                   s.parallel.dp, s.parallel.cp > 1 ? absl::StrCat(" x cp ", s.parallel.cp) : "",
                                   " x tp ", s.parallel.tp, " x pp ", s.parallel.pp, " = ", s.world_size(),
                                   " (one worker per rank)"));
  }
  return absl::OkStatus();
}

// The training loop: the global batch's factors, the learning rate and AdamW's hyper-parameters,
// recompute, precision and loss scaling.
absl::Status ValidateTraining(const JobSpec& s) {
  const TrainSpec& t = s.train;
  if (t.global_batch % (static_cast<int64_t>(t.micro_batch) * s.parallel.dp) != 0) {
    return FieldError("train.global_batch",
                      absl::StrCat("must equal micro_batch x grad_accum x dp: ", t.global_batch,
                                   " is not a multiple of micro_batch ", t.micro_batch, " x dp ", s.parallel.dp,
                                   " = ", static_cast<int64_t>(t.micro_batch) * s.parallel.dp));
  }
  if (!(t.lr > 0) || !std::isfinite(t.lr)) return FieldError("train.lr", "must be > 0");
  if (t.warmup < 0 || t.warmup > t.steps) return FieldError("train.warmup", "must be in [0, train.steps]");
  if (!(t.min_lr_ratio >= 0 && t.min_lr_ratio <= 1)) return FieldError("train.min_lr_ratio", "must be in [0, 1]");
  if (!(t.beta1 >= 0 && t.beta1 < 1)) return FieldError("train.beta1", "must be in [0, 1)");
  if (!(t.beta2 >= 0 && t.beta2 < 1)) return FieldError("train.beta2", "must be in [0, 1)");
  if (!(t.eps > 0)) return FieldError("train.eps", "must be > 0");
  if (!(t.weight_decay >= 0)) return FieldError("train.weight_decay", "must be >= 0");
  if (!(t.grad_clip >= 0)) return FieldError("train.grad_clip", "must be >= 0 (0 = off)");
  if (t.recompute != "none" && t.recompute != "full" && t.recompute != "selective") {
    return FieldError("train.recompute", absl::StrCat("is '", t.recompute, "': none, full or selective"));
  }
  if (t.precision != "fp32" && t.precision != "bf16" && t.precision != "fp16") {
    return FieldError("train.precision", absl::StrCat("is '", t.precision, "': fp32, bf16 or fp16"));
  }
  if (t.grad_reduce_dtype != "fp32" && t.grad_reduce_dtype != "bf16") {
    return FieldError("train.grad_reduce_dtype", absl::StrCat("is '", t.grad_reduce_dtype, "': fp32 or bf16"));
  }
  if (!(t.loss_scale >= 1) || !std::isfinite(t.loss_scale) || std::exp2(std::round(std::log2(t.loss_scale))) != t.loss_scale) {
    return FieldError("train.loss_scale", "must be a power of 2, at least 1 (GradScaler's default is 65536)");
  }
  if (t.loss_scale_window < 1) return FieldError("train.loss_scale_window", "must be >= 1");
  if (t.classifier_rows < 0) {
    return FieldError("train.classifier_rows", "must be >= 0 (0 = the whole micro-batch's rows at once)");
  }
  if (t.precision == "fp16" && s.optimizer.placement == "shardserver") {
    // A skipped step must leave every copy of the state untouched; the shard servers step
    // on every push.
    return FieldError("train.precision",
                      "fp16 (loss scaling skips steps) runs with optimizer.placement worker; use bf16 with shardserver");
  }
  return absl::OkStatus();
}

// Evaluation cadence, restarts and elastic ranges.
absl::Status ValidateScheduling(const JobSpec& s, const std::set<std::string>& present) {
  if (s.eval.every < 0) return FieldError("eval.every", "must be >= 0");
  if (s.scheduling.max_restarts < 0) return FieldError("scheduling.max_restarts", "must be >= 0 (0 = never restart)");
  if (!(s.scheduling.preemption_grace_s >= 0)) {
    return FieldError("scheduling.preemption_grace_s", "must be >= 0 seconds (0 = the coordinator's default)");
  }
  if (present.count("elastic.min_dp") || present.count("elastic.max_dp")) {
    const ElasticSpec& e = s.elastic;
    if (e.min_dp < 1) return FieldError("elastic.min_dp", "must be >= 1");
    if (e.max_dp < e.min_dp) return FieldError("elastic.max_dp", absl::StrCat("must be >= elastic.min_dp (", e.min_dp, ")"));
    // Placement tries every dp in the range (DpChoices) and multiplies it by cp x tp x pp.
    if (static_cast<int64_t>(e.max_dp) * s.parallel.cp * s.parallel.tp * s.parallel.pp > kMaxWorld) {
      return FieldError("elastic.max_dp", absl::StrCat(e.max_dp, s.parallel.cp > 1 ? " x cp" : "", " x tp x pp is more than ",
                                                       kMaxWorld, " ranks"));
    }
    if (s.parallel.dp < e.min_dp || s.parallel.dp > e.max_dp) {
      return FieldError("parallel.dp", absl::StrCat("must be within [elastic.min_dp, elastic.max_dp] = [", e.min_dp, ", ",
                                                    e.max_dp, "], not ", s.parallel.dp));
    }
    if (s.resources.workers != 0) return FieldError("resources.workers", "does not combine with elastic (the coordinator picks dp)");
  }
  return absl::OkStatus();
}

// The interleaved schedule (after the batch sizes: it splits a step's micro-batches).
absl::Status ValidateVirtualStages(const JobSpec& s) {
  const int v = s.parallel.virtual_stages;
  if (v < 1) return FieldError("parallel.virtual_stages", absl::StrCat("is ", v, ": must be >= 1 (1: plain 1F1B)"));
  if (v == 1) return absl::OkStatus();
  if (s.parallel.auto_layout.enabled) {
    return FieldError("parallel.virtual_stages", "is not for parallel: auto (the planner chooses pp)");
  }
  const absl::StatusOr<Schedule> schedule = ParseSchedule(s.parallel.schedule);
  if (!schedule.ok()) return FieldError("parallel.schedule", schedule.status().message());
  if (auto st = CheckInterleaved(*schedule, s.parallel.pp, s.grad_accum(), v); !st.ok()) {
    return FieldError("parallel.virtual_stages", st.message());
  }
  if (static_cast<int64_t>(s.parallel.pp) * v > s.model.n_layer) {
    return FieldError("parallel.virtual_stages",
                      absl::StrCat("is ", v, " with pp ", s.parallel.pp, ": ", s.parallel.pp * v,
                                   " chunks of one layer at least, and model.n_layer is ", s.model.n_layer));
  }
  return absl::OkStatus();
}

// Evaluation size and checkpoints.
absl::Status ValidateEvalAndCheckpoints(const JobSpec& s) {
  if (s.eval.batches < 1) return FieldError("eval.batches", "must be >= 1");
  if (s.checkpoint.every < 0) return FieldError("checkpoint.every", "must be >= 0");
  if (s.checkpoint.keep < 0) return FieldError("checkpoint.keep", "must be >= 0 (0 = keep all)");
  if (!(s.checkpoint.host_budget_mb >= 0)) return FieldError("checkpoint.host_budget_mb", "must be >= 0");
  if (s.checkpoint.every > 0 && s.checkpoint.dir.empty()) {
    return FieldError("checkpoint.dir", "is required when checkpoint.every > 0");
  }
  return absl::OkStatus();
}

// Every field of a parsed spec, in this order (the first error is the one reported).
// from_model: the job starts from that model (ParseJobSpec's), whose keys need not be stated.
absl::Status Validate(const JobSpec& s, const std::set<std::string>& present, bool from_model) {
  RETURN_IF_ERROR(RequiredFields(present, from_model, s.auto_layout()));
  RETURN_IF_ERROR(ValidateModel(s, present));
  RETURN_IF_ERROR(ValidateBatchSizes(s.train));
  RETURN_IF_ERROR(ValidateAutoLayout(s, present));
  RETURN_IF_ERROR(ValidateDegrees(s));
  RETURN_IF_ERROR(ValidateExperts(s));
  RETURN_IF_ERROR(ValidateSequenceParallel(s));
  RETURN_IF_ERROR(ValidateContextParallel(s));
  RETURN_IF_ERROR(ValidatePipelineAndReduction(s));
  RETURN_IF_ERROR(ValidateOptimizer(s));
  RETURN_IF_ERROR(ValidateResources(s));
  RETURN_IF_ERROR(ValidateTraining(s));
  RETURN_IF_ERROR(ValidateVirtualStages(s));
  RETURN_IF_ERROR(ValidateScheduling(s, present));
  RETURN_IF_ERROR(ValidateEvalAndCheckpoints(s));
  return absl::OkStatus();
}

// The fields a spec's normal form (ToYaml) states among those Validate asks about: what
// ParseJobSpec(ToYaml(s)) would find present, so a spec built in code is validated as its
// normal form would be.
std::set<std::string> StatedInNormalForm(const JobSpec& s) {
  std::set<std::string> present = {"model.n_layer",     "model.n_head", "model.n_embd", "model.vocab_size",
                                   "model.seq_len",     "data.train",   "train.steps",  "train.lr",
                                   "train.global_batch"};
  const AutoLayout& a = s.parallel.auto_layout;
  if (s.model.llama()) present.insert("model.rope_theta");
  if (!a.enabled || a.micro_batch) present.insert("train.micro_batch");
  if (!a.enabled) present.insert("parallel.dp");
  if (a.enabled && a.max_tp > 0) present.insert("parallel.max_tp");
  if (a.enabled && a.max_pp > 0) present.insert("parallel.max_pp");
  if (s.elastic.enabled()) present.insert({"elastic.min_dp", "elastic.max_dp"});
  return present;
}

// Whether `spec` admits `layout` in the fields it fixes (ApplyLayout's first check).
absl::Status AdmitsLayout(const JobSpec& s, const PlacedLayout& l) {
  const AutoLayout& a = s.parallel.auto_layout;
  const PlacedLayout own = LayoutOf(s);
  // A field the spec fixes: any of them without auto (but an elastic job's dp), those stated
  // beside auto with it.
  auto fixed = [&](const char* field, bool stated, const auto& spec_value, const auto& placed) -> absl::Status {
    if (!stated || spec_value == placed) return absl::OkStatus();
    auto shown = [](const auto& v) {
      if constexpr (std::is_same_v<std::decay_t<decltype(v)>, bool>) return std::string(v ? "true" : "false");
      else return absl::StrCat(v);
    };
    return FieldError(field, absl::StrCat("is ", shown(spec_value), " in the spec, but the placement's layout has ", shown(placed),
                                          ": a placement may change only what the spec leaves to it (an elastic "
                                          "job's dp, a parallel: auto job's unstated layout)"));
  };
  const bool all = !a.enabled;
  if (!a.enabled && !s.elastic.enabled()) RETURN_IF_ERROR(fixed("parallel.dp", true, own.dp, l.dp));
  if (s.elastic.enabled()) {
    const std::vector<int> choices = s.DpChoices();
    if (std::find(choices.begin(), choices.end(), l.dp) == choices.end()) {
      return FieldError("parallel.dp", absl::StrCat("is ", l.dp, " in the placement's layout, not one of the elastic "
                                                    "job's dp choices (", absl::StrJoin(choices, ", "), ")"));
    }
  }
  RETURN_IF_ERROR(fixed("parallel.tp", all || a.tp, own.tp, l.tp));
  RETURN_IF_ERROR(fixed("parallel.pp", all || a.pp, own.pp, l.pp));
  // cp and the interleaved schedule are stated with the layout or left to auto (their
  // validation refuses them beside auto).
  RETURN_IF_ERROR(fixed("parallel.cp", all, own.cp, l.cp));
  RETURN_IF_ERROR(fixed("parallel.virtual_stages", all, own.virtual_stages, l.virtual_stages));
  RETURN_IF_ERROR(fixed("parallel.zero_stage", all || a.zero_stage, own.zero_stage, l.zero_stage));
  RETURN_IF_ERROR(fixed("parallel.sequence_parallel", all || a.sequence_parallel, own.sequence_parallel,
                        l.sequence_parallel));
  RETURN_IF_ERROR(fixed("train.micro_batch", all || a.micro_batch, own.micro_batch, l.micro_batch));
  RETURN_IF_ERROR(fixed("train.recompute", all || a.recompute, own.recompute, l.recompute));
  if (a.enabled && a.max_tp > 0 && l.tp > a.max_tp) {
    return FieldError("parallel.max_tp", absl::StrCat("is ", a.max_tp, ", but the placement's layout has tp ", l.tp));
  }
  if (a.enabled && a.max_pp > 0 && l.pp > a.max_pp) {
    return FieldError("parallel.max_pp", absl::StrCat("is ", a.max_pp, ", but the placement's layout has pp ", l.pp));
  }
  return absl::OkStatus();
}

}  // namespace

PlacedLayout LayoutOf(const JobSpec& s) {
  return {s.parallel.dp,         s.parallel.tp,         s.parallel.pp,        s.parallel.cp,
          s.parallel.virtual_stages, s.parallel.zero_stage, s.parallel.sequence_parallel,
          s.train.micro_batch,   s.train.recompute};
}

absl::StatusOr<JobSpec> ApplyLayout(JobSpec s, const PlacedLayout& l) {
  RETURN_IF_ERROR(AdmitsLayout(s, l));
  s.parallel.auto_layout = AutoLayout{};
  s.parallel.dp = l.dp, s.parallel.tp = l.tp, s.parallel.pp = l.pp, s.parallel.cp = l.cp;
  s.parallel.virtual_stages = l.virtual_stages;
  s.parallel.zero_stage = l.zero_stage;
  s.parallel.sequence_parallel = l.sequence_parallel;
  s.train.micro_batch = l.micro_batch;
  s.train.recompute = l.recompute;
  RETURN_IF_ERROR(Validate(s, StatedInNormalForm(s), /*from_model=*/false));
  return s;
}

std::vector<int> JobSpec::DpChoices() const {
  if (!elastic.enabled()) return {parallel.dp};
  std::vector<int> out;
  for (int d = elastic.min_dp; d <= elastic.max_dp; ++d) {
    if (train.micro_batch > 0 && train.global_batch % (static_cast<int64_t>(train.micro_batch) * d) == 0 &&
        // the interleaved schedule takes the micro-batches in groups of pp
        (parallel.virtual_stages <= 1 || train.global_batch / (static_cast<int64_t>(train.micro_batch) * d) % parallel.pp == 0)) {
      out.push_back(d);
    }
  }
  return out;
}

int JobSpec::WorldFor(int available) const {
  if (auto_layout()) return resources.workers > 0 ? (resources.workers <= available ? resources.workers : 0) : std::max(0, available);
  const int group = parallel.cp * parallel.tp * parallel.pp;
  if (!elastic.enabled()) return world_size() <= available ? world_size() : 0;
  int world = 0;
  for (int d : DpChoices()) {
    if (d * group <= available) world = d * group;
  }
  return world;
}

int JobSpec::MinWorld() const {
  if (auto_layout()) return std::max(1, resources.workers);
  const std::vector<int> choices = DpChoices();
  return elastic.enabled() && !choices.empty() ? choices.front() * parallel.cp * parallel.tp * parallel.pp : world_size();
}

std::string ToYaml(const JobSpec& s) {
  YAML::Emitter out;
  out.SetDoublePrecision(17);
  out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << s.name;
  auto section = [&](const char* name, auto&& body) {
    out << YAML::Key << name << YAML::Value << YAML::BeginMap;
    body();
    out << YAML::EndMap;
  };
  // A string with a control character (a CR pasted into a path) or an edge space is written
  // double-quoted, escaped: plain, it would read back as another string.
  auto kv = [&](const char* key, const auto& value) {
    out << YAML::Key << key << YAML::Value;
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, std::string>) {
      const bool plain_changes =
          std::any_of(value.begin(), value.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; }) ||
          (!value.empty() && (value.front() == ' ' || value.back() == ' '));
      if (plain_changes) out << YAML::DoubleQuoted;
    }
    out << value;
  };
  section("model", [&] {
    kv("n_layer", s.model.n_layer), kv("n_head", s.model.n_head), kv("n_embd", s.model.n_embd);
    kv("vocab_size", s.model.vocab_size), kv("seq_len", s.seq_len), kv("max_seq_len", s.model.max_seq_len);
    // The family's defaults resolved; rope_theta only where there is RoPE.
    kv("arch", std::string(jobspec::ArchName(s.model.arch))), kv("n_kv_head", s.model.kv_heads());
    kv("ffn_hidden", s.model.ffn());
    if (s.model.llama()) kv("rope_theta", s.model.rope_theta);
    kv("norm_eps", s.model.norm_eps);
    if (s.model.moe.num_experts > 0) {
      const jobspec::MoeConfig& m = s.model.moe;
      out << YAML::Key << "moe" << YAML::Value << YAML::BeginMap;
      kv("num_experts", m.num_experts), kv("top_k", m.top_k), kv("capacity_factor", m.capacity_factor);
      kv("aux_loss_coeff", m.aux_loss_coeff), kv("z_loss_coeff", m.z_loss_coeff), kv("every_n_layers", m.every_n_layers);
      out << YAML::EndMap;
    }
  });
  section("data", [&] {
    kv("train", s.data.train), kv("val", s.data.val), kv("shuffle", s.data.shuffle), kv("tokenizer", s.data.tokenizer);
  });
  const TrainSpec& t = s.train;
  section("train", [&] {
    // parallel: auto: micro_batch and recompute only where stated (else the planner's, at placement).
    const AutoLayout& a = s.parallel.auto_layout;
    kv("steps", t.steps);
    if (!a.enabled || a.micro_batch) kv("micro_batch", t.micro_batch);
    kv("global_batch", t.global_batch), kv("lr", t.lr);
    kv("warmup", t.warmup), kv("min_lr_ratio", t.min_lr_ratio), kv("beta1", t.beta1), kv("beta2", t.beta2);
    kv("eps", t.eps), kv("weight_decay", t.weight_decay), kv("grad_clip", t.grad_clip), kv("seed", t.seed);
    if (!a.enabled || a.recompute) kv("recompute", t.recompute);
    kv("precision", t.precision), kv("loss_scale", t.loss_scale);
    kv("loss_scale_window", t.loss_scale_window), kv("grad_reduce_dtype", t.grad_reduce_dtype);
    kv("deterministic", t.deterministic);
    kv("classifier_rows", t.classifier_rows);
  });
  section("eval", [&] { kv("every", s.eval.every), kv("batches", s.eval.batches); });
  section("checkpoint", [&] {
    kv("every", s.checkpoint.every), kv("keep", s.checkpoint.keep), kv("host_budget_mb", s.checkpoint.host_budget_mb);
    kv("dir", s.checkpoint.dir), kv("resume_from", s.checkpoint.resume_from);
  });
  section("parallel", [&] {
    // parallel: auto keeps `auto` until placement: the layout's keys only where stated (kept).
    const AutoLayout& a = s.parallel.auto_layout;
    if (a.enabled) {
      kv("auto", true);
      if (a.max_tp > 0) kv("max_tp", a.max_tp);
      if (a.max_pp > 0) kv("max_pp", a.max_pp);
    }
    if (!a.enabled) kv("dp", s.parallel.dp);
    if (!a.enabled || a.tp) kv("tp", s.parallel.tp);
    if (!a.enabled || a.pp) kv("pp", s.parallel.pp);
    if (!s.parallel.stage_layers.empty()) {
      out << YAML::Key << "stage_layers" << YAML::Value << YAML::Flow << YAML::BeginSeq;
      for (int n : s.parallel.stage_layers) out << n;
      out << YAML::EndSeq;
    }
    if (!a.enabled || a.zero_stage) kv("zero_stage", s.parallel.zero_stage);
    kv("bucket_mb", s.parallel.bucket_mb), kv("timeout_s", s.parallel.timeout_s), kv("schedule", s.parallel.schedule);
    kv("virtual_stages", s.parallel.virtual_stages);
    kv("offload_params", s.parallel.offload_params);
    if (!a.enabled || a.sequence_parallel) kv("sequence_parallel", s.parallel.sequence_parallel);
    kv("ep", s.parallel.ep);
    kv("cp", s.parallel.cp);
  });
  section("optimizer", [&] {
    kv("placement", s.optimizer.placement), kv("staleness", s.optimizer.staleness), kv("offload", s.optimizer.offload);
  });
  section("resources", [&] { kv("workers", s.resources.workers), kv("device", s.resources.device); });
  section("scheduling", [&] {
    kv("priority", s.scheduling.priority), kv("max_restarts", s.scheduling.max_restarts);
    kv("preemptible", s.scheduling.preemptible), kv("preemption_grace_s", s.scheduling.preemption_grace_s);
  });
  if (s.elastic.enabled()) section("elastic", [&] { kv("min_dp", s.elastic.min_dp), kv("max_dp", s.elastic.max_dp); });
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

absl::StatusOr<JobSpec> ParseJobSpec(const std::string& yaml_text) { return ParseJobSpec(yaml_text, nullptr, ""); }

absl::StatusOr<JobSpec> ParseJobSpec(const std::string& yaml_text, const jobspec::GPTConfig* from_model,
                                     const std::string& from_name) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("job spec: not valid YAML: ", e.what()));
  }
  if (!root.IsMap()) return absl::InvalidArgumentError("job spec: the document must be a mapping");
  JobSpec s;
  if (from_model != nullptr) s.model = *from_model;
  std::set<std::string> present;
  auto track = [&present](Handler h) -> Handler {
    return [&present, h](const YAML::Node& n, const std::string& f) {
      present.insert(f);
      return h(n, f);
    };
  };
  bool max_seq_given = false;
  auto sub = [&](std::map<std::string, Handler> handlers) -> Handler {
    for (auto& [k, h] : handlers) h = track(h);
    return [handlers](const YAML::Node& n, const std::string& f) { return Section(n, f, handlers); };
  };
  RETURN_IF_ERROR(Section(
      root, "",
      {{"name", Str(&s.name)},
       {"model", sub({{"n_layer", Int(&s.model.n_layer)},
                      {"n_head", Int(&s.model.n_head)},
                      {"n_embd", Int(&s.model.n_embd)},
                      {"vocab_size", Int(&s.model.vocab_size)},
                      {"seq_len", Int(&s.seq_len)},
                      {"max_seq_len",
                       [&](const YAML::Node& n, const std::string& f) {
                         max_seq_given = true;
                         return Get(n, f, "an integer", &s.model.max_seq_len);
                       }},
                      {"arch",
                       [&](const YAML::Node& n, const std::string& f) -> absl::Status {
                         std::string arch;
                         RETURN_IF_ERROR(Get(n, f, "a string", &arch));
                         if (arch == "gpt2") {
                           s.model.arch = jobspec::Arch::kGpt2;
                         } else if (arch == "llama") {
                           s.model.arch = jobspec::Arch::kLlama;
                         } else {
                           return FieldError(f, absl::StrCat("is '", arch, "': gpt2 or llama"));
                         }
                         return absl::OkStatus();
                       }},
                      {"n_kv_head", Int(&s.model.n_kv_head)},
                      {"ffn_hidden", Int(&s.model.ffn_hidden)},
                      {"rope_theta", Real(&s.model.rope_theta)},
                      {"norm_eps", Real(&s.model.norm_eps)},
                      {"moe", sub({{"num_experts", Int(&s.model.moe.num_experts)},
                                   {"top_k", Int(&s.model.moe.top_k)},
                                   {"capacity_factor", Real(&s.model.moe.capacity_factor)},
                                   {"aux_loss_coeff", Real(&s.model.moe.aux_loss_coeff)},
                                   {"z_loss_coeff", Real(&s.model.moe.z_loss_coeff)},
                                   {"every_n_layers", Int(&s.model.moe.every_n_layers)}})}})},
       {"data", sub({{"train", Str(&s.data.train)},
                     {"val", Str(&s.data.val)},
                     {"shuffle", Bool(&s.data.shuffle)},
                     {"tokenizer", Str(&s.data.tokenizer)}})},
       {"train", sub({{"steps", Int64(&s.train.steps)},
                      {"micro_batch", Int(&s.train.micro_batch)},
                      {"global_batch", Int(&s.train.global_batch)},
                      {"lr", Real(&s.train.lr)},
                      {"warmup", Int64(&s.train.warmup)},
                      {"min_lr_ratio", Real(&s.train.min_lr_ratio)},
                      {"beta1", Real(&s.train.beta1)},
                      {"beta2", Real(&s.train.beta2)},
                      {"eps", Real(&s.train.eps)},
                      {"weight_decay", Real(&s.train.weight_decay)},
                      {"grad_clip", Real(&s.train.grad_clip)},
                      {"seed", Num(&s.train.seed, "a non-negative integer")},
                      {"recompute", Str(&s.train.recompute)},
                      {"precision", Str(&s.train.precision)},
                      {"loss_scale", Real(&s.train.loss_scale)},
                      {"loss_scale_window", Int(&s.train.loss_scale_window)},
                      {"grad_reduce_dtype", Str(&s.train.grad_reduce_dtype)},
                      {"deterministic", Bool(&s.train.deterministic)},
                      {"classifier_rows", Int(&s.train.classifier_rows)}})},
       {"eval", sub({{"every", Int64(&s.eval.every)}, {"batches", Int(&s.eval.batches)}})},
       {"checkpoint", sub({{"every", Int64(&s.checkpoint.every)}, {"keep", Int(&s.checkpoint.keep)},
                           {"host_budget_mb", Real(&s.checkpoint.host_budget_mb)}, {"dir", Str(&s.checkpoint.dir)},
                           {"resume_from", Str(&s.checkpoint.resume_from)}})},
       {"parallel", [&, parallel = sub({{"auto", Bool(&s.parallel.auto_layout.enabled)},
                                         {"max_tp", Int(&s.parallel.auto_layout.max_tp)},
                                         {"max_pp", Int(&s.parallel.auto_layout.max_pp)},
                                         {"dp", Int(&s.parallel.dp)},
                         {"tp", Int(&s.parallel.tp)},
                         {"pp", Int(&s.parallel.pp)},
                         {"stage_layers", IntList(&s.parallel.stage_layers)},
                         {"zero_stage", Int(&s.parallel.zero_stage)},
                         {"bucket_mb", Real(&s.parallel.bucket_mb)},
                         {"timeout_s", Real(&s.parallel.timeout_s)},
                         {"schedule", Str(&s.parallel.schedule)},
                         {"virtual_stages", Int(&s.parallel.virtual_stages)},
                         {"offload_params", Str(&s.parallel.offload_params)},
                         {"sequence_parallel", Bool(&s.parallel.sequence_parallel)},
                         {"ep", Int(&s.parallel.ep)},
                         {"cp", Int(&s.parallel.cp)}})](const YAML::Node& n, const std::string& f) -> absl::Status {
         // `parallel: auto`: the mapping {auto: true} in one word.
         if (!n.IsScalar()) return parallel(n, f);
         if (n.Scalar() != "auto") return FieldError(f, absl::StrCat("is '", n.Scalar(), "': auto, or a mapping (dp, tp, pp, ...)"));
         present.insert("parallel.auto");
         s.parallel.auto_layout.enabled = true;
         return absl::OkStatus();
       }},
       {"optimizer", sub({{"placement", Str(&s.optimizer.placement)},
                          {"staleness", Int(&s.optimizer.staleness)},
                          {"offload", Str(&s.optimizer.offload)}})},
       {"resources", sub({{"workers", Int(&s.resources.workers)}, {"device", Str(&s.resources.device)}})},
       {"scheduling", sub({{"priority", Int(&s.scheduling.priority)},
                           {"max_restarts", Int(&s.scheduling.max_restarts)},
                           {"preemptible", Bool(&s.scheduling.preemptible)},
                           {"preemption_grace_s", Real(&s.scheduling.preemption_grace_s)}})},
       {"elastic", sub({{"min_dp", Int(&s.elastic.min_dp)}, {"max_dp", Int(&s.elastic.max_dp)}})}}));
  if (!max_seq_given && from_model == nullptr) s.model.max_seq_len = s.seq_len;
  if (AutoLayout& a = s.parallel.auto_layout; a.enabled) {  // what is stated beside auto is kept
    a.tp = present.count("parallel.tp"), a.pp = present.count("parallel.pp");
    a.zero_stage = present.count("parallel.zero_stage"), a.sequence_parallel = present.count("parallel.sequence_parallel");
    a.micro_batch = present.count("train.micro_batch"), a.recompute = present.count("train.recompute");
    if (!a.micro_batch) s.train.micro_batch = 1;  // a placeholder until placement (not in the normal form)
  }
  if (!present.count("train.global_batch")) {
    // In 64 bits: a default past int is refused, not wrapped into another batch size.
    const int64_t global = static_cast<int64_t>(s.train.micro_batch) * std::max(1, s.parallel.dp);
    if (global > std::numeric_limits<int>::max()) {
      return FieldError("train.global_batch", absl::StrCat("defaults to micro_batch x dp = ", global, ", past 2^31 - 1"));
    }
    s.train.global_batch = static_cast<int>(global);
  }
  if (from_model != nullptr) RETURN_IF_ERROR(AgreesWith(s.model, *from_model, from_name, present));
  RETURN_IF_ERROR(Validate(s, present, from_model != nullptr));
  return s;
}

absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path) { return LoadJobSpec(path, nullptr, ""); }

absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path, const jobspec::GPTConfig* from_model,
                                    const std::string& from_name) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto spec = ParseJobSpec(text, from_model, from_name);
  if (!spec.ok()) return Annotate(spec.status(), path);
  return spec;
}

std::string DescribeModel(const jobspec::GPTConfig& c) {
  std::vector<std::string> parts;
  for (const ModelKey& k : ModelKeys()) {
    if (!c.llama() && std::string(k.key) == "arch") break;  // GPT-2: the five shape keys
    parts.push_back(absl::StrCat(k.key, " ", k.value(c)));
  }
  return absl::StrJoin(parts, ", ");
}

std::string ModelDifferences(const jobspec::GPTConfig& a, const std::string& a_name, const jobspec::GPTConfig& b,
                             const std::string& b_name) {
  std::vector<std::string> parts;
  for (const ModelKey& k : ModelKeys()) {
    if (k.differs(a, b)) parts.push_back(absl::StrCat(k.key, " (", a_name, " ", k.value(a), ", ", b_name, " ", k.value(b), ")"));
  }
  return absl::StrJoin(parts, ", ");
}

double LearningRate(const TrainSpec& t, int64_t step) {
  if (step < t.warmup) return t.lr * static_cast<double>(step + 1) / static_cast<double>(t.warmup);
  const double min_lr = t.lr * t.min_lr_ratio;
  const int64_t decay_steps = t.steps - t.warmup;
  if (decay_steps <= 1) return t.lr;
  const double ratio = static_cast<double>(step - t.warmup) / static_cast<double>(decay_steps - 1);
  const double coeff = 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, ratio)));
  return min_lr + coeff * (t.lr - min_lr);
}

}  // namespace gantry::jobspec
