// gantry-train: Gantry's training code in one process, no daemons.
//
//   gantry-train JOB.yaml [--init-from DIR] [--save DIR] [--resume] [--print-losses]
//   gantry-train prepare [--out-dir DIR] [--val-fraction F | --val INPUT...] [--documents file|paragraph|line]
//                        [--text-field NAME] [--tokenizer PATH [--shard-tokens N] [--threads N] [--eot TOKEN]] INPUT...
//   gantry-train sample --from DIR [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--seed S]
//                       [--tokenizer PATH]
//   gantry-train export --checkpoint DIR --out OUT [--dtype fp32|bf16] [--tokenizer PATH]
//   gantry-train eval --from DIR --data FILE --seq-len T [--batch B] [--batches N]
//   gantry-train calibrate [--threads N] [--ranks R] [--n-embd C] [--heads H] [--seq-len T] [--rows N]
//                          [--repeats K] [--out FILE]
//   gantry-train calibrate --gemm-sweep [--device cuda|cuda:N|cuda-emulated|cpu] [--base NAME|FILE]
//                          [--sizes LIST] [--fp32-sizes LIST] [--repeats K] [--out FILE]
//
// Bad input is a one-line error on stderr and exit status 2.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/console.h"
#include "common/status.h"
#include "kernels/threads.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "data/token_file.h"
#include "data/tokenizer.h"
#include "common/file_util.h"
#include "model/hf_io.h"
#include "checkpoint/checkpoint.h"
#include "cli/train/calibrate.h"
#include "cli/train/gemm_sweep.h"
#include "jobspec/job_spec.h"
#include "model/sample.h"
#include "worker/train/device.h"
#include "worker/train/trainer.h"

namespace gantry {
namespace {

constexpr char kUsage[] =
    "usage:\n"
    "  gantry-train JOB.yaml [--init-from DIR] [--save DIR] [--resume] [--print-losses]\n"
    "                        [--threads N] [--no-progress] [--stop-after STEP]\n"
    "                        [--device cpu|cuda|cuda:N|cuda-emulated]   (cuda: one GPU, dp 1, ZeRO 0;\n"
    "                        cuda-emulated: the CUDA code path on the CPU, any layout)\n"
    "                        [--attention auto|cudnn|fused|reference]   (cuda kinds; auto: cuDNN's fused\n"
    "                        attention for bf16/fp16 where libcudnn.so.9 loads, the fused fp32 kernels otherwise)\n"
    "                        (--init-from DIR: the model keys come from DIR/config.json; those\n"
    "                        the spec states must agree with it)\n"
    "  gantry-train prepare [--out-dir DIR] [--val-fraction F | --val INPUT...]\n"
    "                       [--documents file|paragraph|line] [--text-field NAME]\n"
    "                       [--tokenizer PATH [--shard-tokens N] [--threads N] [--eot TOKEN]] INPUT...\n"
    "                       (a document per file by default; a fortune file's entries; a .jsonl or\n"
    "                       .ndjson file's records, their --text-field (default text); every 1/F-th\n"
    "                       document to val (default 0.05; 0: none), or --val's files (repeatable))\n"
    "  gantry-train sample --from DIR [--prompt TEXT] [--tokens N] [--temperature T]\n"
    "                      [--top-k K] [--seed S] [--tokenizer PATH]   (the model directory's\n"
    "                      tokenizer.json unless named; the byte tokenizer without one)\n"
    "  gantry-train eval --from DIR --data FILE --seq-len T [--batch B] [--batches N]\n"
    "                    [--logits FILE]   (the first batch's logits, B x T x V float32, raw)\n"
    "  gantry-train export --checkpoint DIR --out OUT [--dtype fp32|bf16] [--tokenizer PATH]\n"
    "                      (a checkpoint, any layout, as a Hugging Face model directory, with\n"
    "                      the job's data.tokenizer as tokenizer.json)\n"
    "  gantry-train compare DIR_A DIR_B   (two model directories: relative difference of the\n"
    "                                      parameters, ||a - b|| / ||b||, and the worst tensor)\n"
    "  gantry-train calibrate [--threads N] [--ranks R] [--n-embd C] [--heads H] [--seq-len T]\n"
    "                         [--rows N] [--repeats K] [--out FILE]   (this machine as a cluster\n"
    "                         file for gantry plan --cluster: the cpu backend's GEMM, attention and\n"
    "                         memory rates at a layer of that shape with N threads, and Gloo's\n"
    "                         all-reduce among R ranks on loopback)\n"
    "  gantry-train calibrate --gemm-sweep [--device cuda|cuda:N|cuda-emulated|cpu] [--base NAME|FILE]\n"
    "                         [--sizes LIST] [--fp32-sizes LIST] [--repeats K] [--out FILE]\n"
    "                         (a device profile whose gemm_table is the backend's GEMM rate at\n"
    "                         every m, n, k of LIST (default 768,1536,3072,6144,12288,16384; fp32:\n"
    "                         768,1536,3072,6144; none: skipped), forward and backward; the rest of\n"
    "                         the profile from --base (a built-in name or a profile file; default:\n"
    "                         the one the GPU's name names); progress on stderr; with --out the file\n"
    "                         is written after each precision's grid)\n";

// Parsed command line: --flag value pairs, boolean --flags, and positionals.
struct Args {
  std::map<std::string, std::string> flags;                // the last value of each
  std::map<std::string, std::vector<std::string>> every;   // every value of each, in order (repeated flags)
  std::vector<std::string> positional;
};

absl::StatusOr<Args> ParseArgs(int argc, char** argv, int first,
                               const std::vector<std::string>& valued,
                               const std::vector<std::string>& boolean) {
  Args a;
  for (int i = first; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) != 0 || s == "--") {
      a.positional.push_back(s);
      continue;
    }
    std::string name = s.substr(2), value;
    const size_t eq = name.find('=');
    bool has_value = false;
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (std::find(boolean.begin(), boolean.end(), name) != boolean.end()) {
      a.flags[name] = "true";
      continue;
    }
    if (std::find(valued.begin(), valued.end(), name) == valued.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (!has_value) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      value = argv[++i];
    }
    a.flags[name] = value;
    a.every[name].push_back(value);
  }
  return a;
}

template <typename T>
absl::Status FlagNumber(const Args& a, const std::string& name, T* out) {
  auto it = a.flags.find(name);
  if (it == a.flags.end()) return absl::OkStatus();
  bool ok;
  if constexpr (std::is_floating_point_v<T>) {
    double d;
    ok = absl::SimpleAtod(it->second, &d);
    *out = static_cast<T>(d);
  } else {
    int64_t v;
    ok = absl::SimpleAtoi(it->second, &v);
    *out = static_cast<T>(v);
  }
  if (!ok) return absl::InvalidArgumentError(absl::StrCat("--", name, ": not a number: '", it->second, "'"));
  return absl::OkStatus();
}

std::string Flag(const Args& a, const std::string& name, const std::string& def = "") {
  auto it = a.flags.find(name);
  return it == a.flags.end() ? def : it->second;
}

void SetThreads(int n) { kernels::ConfigureThreads(n); }

absl::Status RunPrepare(int argc, char** argv) {
  ASSIGN_OR_RETURN(Args a, ParseArgs(argc, argv, 2,
                                     {"out-dir", "val-fraction", "val", "documents", "text-field", "tokenizer",
                                      "shard-tokens", "threads", "eot"},
                                     {}));
  data::PrepareOptions o;
  o.inputs = a.positional;
  o.out_dir = Flag(a, "out-dir", "datasets/fortunes");
  o.tokenizer = Flag(a, "tokenizer");
  o.eot = Flag(a, "eot");
  o.text_field = Flag(a, "text-field", "text");
  if (o.text_field.empty()) return absl::InvalidArgumentError("prepare: --text-field is empty");
  ASSIGN_OR_RETURN(o.documents, data::ParseDocumentCut(Flag(a, "documents", "file")));
  // --val INPUT (repeated, or its inputs comma-separated): the validation set from files of
  // its own, and then no split of the training inputs unless --val-fraction asks (an error).
  for (const std::string& v : a.every["val"]) {
    for (const absl::string_view part : absl::StrSplit(v, ',', absl::SkipEmpty())) o.val_inputs.emplace_back(part);
  }
  if (a.flags.count("val") && o.val_inputs.empty()) return absl::InvalidArgumentError("prepare: --val names no input");
  if (!o.val_inputs.empty() && !a.flags.count("val-fraction")) o.val_fraction = 0;
  RETURN_IF_ERROR(FlagNumber(a, "val-fraction", &o.val_fraction));
  RETURN_IF_ERROR(FlagNumber(a, "shard-tokens", &o.shard_tokens));
  RETURN_IF_ERROR(FlagNumber(a, "threads", &o.threads));
  // The encoding's progress: a bar redrawn on a terminal, a line every 10% otherwise (from a
  // megabyte of input up).
  const bool tty = isatty(fileno(stderr));
  const auto start = std::chrono::steady_clock::now();
  int last_tenth = -1;
  auto bar = [&](int64_t done, int64_t total) {
    if (total <= 0) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double eta = done > 0 ? s * static_cast<double>(total - done) / static_cast<double>(done) : 0;
    const bool big = total >= (int64_t{100} << 20);  // the bar counts MB, or KB below 100 MB
    const int shift = big ? 20 : 10;
    if (tty) {
      std::fprintf(stderr, "\r%s %s %.1f MB/s", FormatProgressBar(done >> shift, std::max<int64_t>(1, total >> shift), eta).c_str(),
                   big ? "MB" : "KB", s > 0 ? static_cast<double>(done) / 1048576.0 / s : 0.0);
      std::fflush(stderr);
    } else if (const int tenth = static_cast<int>(10 * done / total); tenth != last_tenth && total >= (1 << 20)) {
      last_tenth = tenth;
      std::fprintf(stderr, "  encoded %.1f of %.1f MB\n", static_cast<double>(done) / 1048576.0,
                   static_cast<double>(total) / 1048576.0);
    }
  };
  ASSIGN_OR_RETURN(data::PrepareResult r,
                   data::Prepare(
                       o, [&](const std::string& line) { if (!tty || o.tokenizer.empty()) std::fprintf(stderr, "  %s\n", line.c_str()); },
                       bar));
  if (tty && !o.tokenizer.empty()) std::fprintf(stderr, "\n");
  if (o.tokenizer.empty()) {
    std::printf("prepared %ld documents from %ld files: %s (%ld tokens), %s\n", static_cast<long>(r.documents),
                static_cast<long>(r.files), r.train_path.c_str(), static_cast<long>(r.train_tokens),
                r.val_path.empty() ? "no validation set"
                                   : absl::StrCat(r.val_path, " (", r.val_tokens, " tokens)").c_str());
  } else {
    std::printf("prepared %ld documents from %ld files with %s (vocabulary %u, uint%d ids): train %ld tokens in %zu "
                "shard(s) from %s, val %ld tokens in %zu shard(s) from %s\n",
                static_cast<long>(r.documents), static_cast<long>(r.files), o.tokenizer.c_str(), r.vocab_size,
                8 * r.token_bytes, static_cast<long>(r.train_tokens), r.train_shards.size(), r.train_path.c_str(),
                static_cast<long>(r.val_tokens), r.val_shards.size(), r.val_path.empty() ? "nothing" : r.val_path.c_str());
  }
  return absl::OkStatus();
}

absl::Status RunSample(int argc, char** argv) {
  ASSIGN_OR_RETURN(Args a, ParseArgs(argc, argv, 2,
                                     {"from", "prompt", "tokens", "temperature", "top-k", "seed", "threads", "tokenizer"}, {}));
  if (!a.positional.empty()) return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", a.positional[0], "'"));
  const std::string from = Flag(a, "from");
  if (from.empty()) return absl::InvalidArgumentError("sample: --from DIR is required");
  int threads = 0;
  RETURN_IF_ERROR(FlagNumber(a, "threads", &threads));
  SetThreads(threads);
  model::SampleOptions o;
  o.top_k = 40;
  o.temperature = 0.8f;
  RETURN_IF_ERROR(FlagNumber(a, "tokens", &o.tokens));
  RETURN_IF_ERROR(FlagNumber(a, "temperature", &o.temperature));
  RETURN_IF_ERROR(FlagNumber(a, "top-k", &o.top_k));
  RETURN_IF_ERROR(FlagNumber(a, "seed", &o.seed));
  ASSIGN_OR_RETURN(auto model, model::LoadHFModel(from));
  ASSIGN_OR_RETURN(auto tok, data::TokenizerForModel(from, Flag(a, "tokenizer"), model->config().vocab_size));
  if (tok->end_of_text() >= 0) o.start = static_cast<uint32_t>(tok->end_of_text());
  const std::string prompt = Flag(a, "prompt");
  std::fputs(prompt.c_str(), stdout);
  auto status = model::Sample(*model, tok->Encode(prompt), o, [&](uint32_t t) {
    std::fputs(tok->TokenText(t).c_str(), stdout);
    std::fflush(stdout);
  });
  std::fputc('\n', stdout);
  return status.status();
}

absl::Status RunEval(int argc, char** argv) {
  ASSIGN_OR_RETURN(Args a, ParseArgs(argc, argv, 2, {"from", "data", "seq-len", "batch", "batches", "threads", "logits"}, {}));
  const std::string from = Flag(a, "from"), data_path = Flag(a, "data");
  if (from.empty() || data_path.empty()) return absl::InvalidArgumentError("eval: --from DIR and --data FILE are required");
  int T = 0, B = 1, batches = 1, threads = 0;
  RETURN_IF_ERROR(FlagNumber(a, "seq-len", &T));
  RETURN_IF_ERROR(FlagNumber(a, "batch", &B));
  RETURN_IF_ERROR(FlagNumber(a, "batches", &batches));
  RETURN_IF_ERROR(FlagNumber(a, "threads", &threads));
  SetThreads(threads);
  ASSIGN_OR_RETURN(auto model, model::LoadHFModel(from));
  if (T <= 0) T = model->config().max_seq_len;
  if (T > model->config().max_seq_len || B < 1 || batches < 1) {
    return absl::InvalidArgumentError("eval: need 1 <= --seq-len <= n_positions, --batch >= 1, --batches >= 1");
  }
  ASSIGN_OR_RETURN(auto d, data::Dataset::Open(data_path, T, static_cast<uint32_t>(model->config().vocab_size)));
  ASSIGN_OR_RETURN(const float loss, train::Trainer::Evaluate(*model, *d, B, T, batches));
  if (const std::string path = Flag(a, "logits"); !path.empty()) {
    std::vector<int32_t> in(static_cast<size_t>(B) * T), tg(in.size());
    RETURN_IF_ERROR(d->Fill(0, B, 0, false, in.data(), tg.data()));
    model->Forward(in.data(), nullptr, B, T);
    const size_t n = in.size() * static_cast<size_t>(model->config().vocab_size);
    std::vector<float> logits(n);
    model->ReadLogits(logits.data(), 0, in.size());
    RETURN_IF_ERROR(WriteFileAtomic(path, absl::string_view(reinterpret_cast<const char*>(logits.data()), n * sizeof(float))));
  }
  std::printf("loss %.9g\n", loss);
  return absl::OkStatus();
}

absl::Status RunExport(int argc, char** argv) {
  ASSIGN_OR_RETURN(Args a, ParseArgs(argc, argv, 2, {"checkpoint", "out", "dtype", "tokenizer"}, {}));
  if (!a.positional.empty()) return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", a.positional[0], "'"));
  const std::string ckpt = Flag(a, "checkpoint"), out = Flag(a, "out");
  if (ckpt.empty() || out.empty()) return absl::InvalidArgumentError("export: --checkpoint DIR and --out OUT are required");
  const std::string dtype_name = Flag(a, "dtype").empty() ? "fp32" : Flag(a, "dtype");
  ASSIGN_OR_RETURN(kernels::Precision dtype, model::ParseExportDtype(dtype_name));
  std::string missing;
  RETURN_IF_ERROR(checkpoint::ExportCheckpoint(ckpt, out, dtype, Flag(a, "tokenizer"), &missing));
  if (!missing.empty()) {
    std::fprintf(stderr, "note: the job's tokenizer %s is not on this machine; the export has no tokenizer.json "
                 "(name it with --tokenizer)\n", missing.c_str());
  }
  ASSIGN_OR_RETURN(checkpoint::CheckpointLayout l, checkpoint::ReadCheckpointLayout(*checkpoint::DirectorySource(ckpt)));
  std::error_code ec;
  const bool with_tokenizer = std::filesystem::exists(std::filesystem::path(out) / "tokenizer.json", ec);
  std::printf("exported %s (written by dp %d ZeRO %d) to %s (Hugging Face GPT-2: config.json + model.safetensors, %s%s)\n",
              ckpt.c_str(), l.dp, l.zero_stage, out.c_str(), dtype_name.c_str(), with_tokenizer ? ", tokenizer.json" : "");
  return absl::OkStatus();
}

absl::Status RunCompare(int argc, char** argv) {
  ASSIGN_OR_RETURN(Args a, ParseArgs(argc, argv, 2, {}, {}));
  if (a.positional.size() != 2) return absl::InvalidArgumentError("compare: expected two model directories");
  ASSIGN_OR_RETURN(auto x, model::LoadHFModel(a.positional[0]));
  ASSIGN_OR_RETURN(auto y, model::LoadHFModel(a.positional[1]));
  if (!(x->config() == y->config())) {
    return absl::InvalidArgumentError(absl::StrCat("compare: ", a.positional[0], " and ", a.positional[1],
                                                   " hold different model configs"));
  }
  double diff = 0, norm = 0, worst = -1;
  std::string worst_name;
  for (const auto& t : x->tensors()) {
    double d = 0, n = 0;
    for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
      const double e = static_cast<double>(x->params()[i]) - y->params()[i];
      d += e * e;
      n += static_cast<double>(y->params()[i]) * y->params()[i];
    }
    diff += d;
    norm += n;
    const double rel = n > 0 ? std::sqrt(d / n) : std::sqrt(d);
    if (rel > worst) {
      worst = rel;
      worst_name = t.name;
    }
  }
  std::printf("relative difference %.3g (worst tensor %s: %.3g)\n", norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff),
              worst_name.c_str(), worst);
  return absl::OkStatus();
}

absl::Status RunTrain(int argc, char** argv) {
  ASSIGN_OR_RETURN(Args a, ParseArgs(argc, argv, 1, {"init-from", "save", "threads", "stop-after", "device", "attention"},
                                     {"resume", "print-losses", "no-progress"}));
  if (a.positional.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("expected one job spec file, got ", a.positional.size(),
                                                   " arguments\n", kUsage));
  }
  int threads = 0;
  RETURN_IF_ERROR(FlagNumber(a, "threads", &threads));
  SetThreads(threads);
  train::TrainOptions o;
  o.init_from = Flag(a, "init-from");
  // --init-from: the model's shape comes from its config.json; the spec may leave it out,
  // and what it states must agree.
  std::optional<jobspec::GPTConfig> from;
  if (!o.init_from.empty()) {
    ASSIGN_OR_RETURN(from, model::ReadHFConfig(o.init_from));
  }
  ASSIGN_OR_RETURN(jobspec::JobSpec spec,
                   jobspec::LoadJobSpec(a.positional[0], from ? &*from : nullptr,
                                      (std::filesystem::path(o.init_from) / "config.json").string()));
  o.save_dir = Flag(a, "save");
  o.resume = a.flags.count("resume") > 0;
  o.print_losses = a.flags.count("print-losses") > 0;
  o.progress = !a.flags.count("no-progress") && isatty(STDERR_FILENO);
  RETURN_IF_ERROR(FlagNumber(a, "stop-after", &o.stop_after));
  if (a.flags.count("device")) o.device = Flag(a, "device");
  if (a.flags.count("attention")) {
    ASSIGN_OR_RETURN(o.device_options.attention, kernels::ParseAttentionPath(Flag(a, "attention")));
  }
  ASSIGN_OR_RETURN(auto trainer, train::Trainer::Create(spec, o));
  return trainer->Run();
}

// A --sizes list: "768,1536,..." (whole numbers), or "none".
absl::StatusOr<std::vector<int64_t>> SizeList(const Args& a, const std::string& name, std::vector<int64_t> def) {
  auto it = a.flags.find(name);
  if (it == a.flags.end()) return def;
  std::vector<int64_t> sizes;
  if (it->second == "none") return sizes;
  for (absl::string_view part : absl::StrSplit(it->second, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": '", part, "' is not a size >= 1 (a comma-separated list, or none)"));
    }
    sizes.push_back(v);
  }
  return sizes;
}

// calibrate --gemm-sweep: the device profile with its GEMM table (cli/train/gemm_sweep.h).
absl::Status RunGemmSweep(const Args& a) {
  for (const char* cpu_only : {"threads", "ranks", "n-embd", "heads", "seq-len", "rows"}) {
    if (a.flags.count(cpu_only)) {
      return absl::InvalidArgumentError(absl::StrCat("--", cpu_only, " is for the CPU calibration, not --gemm-sweep"));
    }
  }
  calibrate::SweepOptions o;
  ASSIGN_OR_RETURN(train::DeviceName device, train::ParseDevice(Flag(a, "device", "cuda")));
  o.kind = device.kind, o.device = device.ordinal;
  ASSIGN_OR_RETURN(o.bf16_sizes, SizeList(a, "sizes", o.bf16_sizes));
  ASSIGN_OR_RETURN(o.fp32_sizes, SizeList(a, "fp32-sizes", o.fp32_sizes));
  RETURN_IF_ERROR(FlagNumber(a, "repeats", &o.repeats));
  std::optional<jobspec::DeviceProfile> base;
  if (const std::string b = Flag(a, "base"); !b.empty()) {
    if (auto builtin = jobspec::BuiltinProfile(b); builtin.ok()) {
      base = *builtin;
    } else {
      auto text = ReadFileToString(b);
      if (!text.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("--base '", b, "' is neither a built-in profile (h100, h200, "
                                                       "a100) nor a readable file: ", text.status().message()));
      }
      auto p = jobspec::ParseProfile(*text);
      if (!p.ok()) return absl::InvalidArgumentError(absl::StrCat("--base ", b, ": ", p.status().message()));
      base = *p;
    }
  }
  const std::string out = Flag(a, "out");
  calibrate::SweepProgress progress;
  progress.line = [](const std::string& line) { std::fprintf(stderr, "gemm sweep %s\n", line.c_str()); };
  if (!out.empty()) {
    progress.grid_done = [&](const jobspec::DeviceProfile& p) { return WriteFileAtomic(out, jobspec::ProfileYaml(p)); };
  }
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(jobspec::DeviceProfile p, calibrate::GemmSweep(o, base ? &*base : nullptr, progress));
  const std::string yaml = jobspec::ProfileYaml(p);
  if (out.empty()) {
    std::fputs(yaml.c_str(), stdout);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(WriteFileAtomic(out, yaml));
  std::printf("wrote %s: profile %s, %zu GEMM shapes in %.1f s; median GEMM bf16 %.4g / %.4g TFLOP/s (fwd / bwd), "
              "fp32 %.4g / %.4g\n",
              out.c_str(), p.name.c_str(), p.gemm_table.entries().size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), p.gemm_fwd[0] / 1e12,
              p.gemm_bwd[0] / 1e12, p.gemm_fwd[1] / 1e12, p.gemm_bwd[1] / 1e12);
  return absl::OkStatus();
}

absl::Status RunCalibrate(int argc, char** argv) {
  ASSIGN_OR_RETURN(Args a, ParseArgs(argc, argv, 2,
                                     {"threads", "ranks", "n-embd", "heads", "seq-len", "rows", "repeats", "out",
                                      "device", "base", "sizes", "fp32-sizes"},
                                     {"gemm-sweep"}));
  if (a.flags.count("gemm-sweep")) return RunGemmSweep(a);
  for (const char* sweep_only : {"device", "base", "sizes", "fp32-sizes"}) {
    if (a.flags.count(sweep_only)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", sweep_only, " is for --gemm-sweep (the CPU calibration runs on the cpu backend)"));
    }
  }
  calibrate::Options o;
  RETURN_IF_ERROR(FlagNumber(a, "threads", &o.threads));
  RETURN_IF_ERROR(FlagNumber(a, "ranks", &o.ranks));
  RETURN_IF_ERROR(FlagNumber(a, "n-embd", &o.n_embd));
  RETURN_IF_ERROR(FlagNumber(a, "heads", &o.n_head));
  RETURN_IF_ERROR(FlagNumber(a, "seq-len", &o.seq_len));
  RETURN_IF_ERROR(FlagNumber(a, "rows", &o.rows));
  RETURN_IF_ERROR(FlagNumber(a, "repeats", &o.repeats));
  ASSIGN_OR_RETURN(jobspec::ClusterSpec c, calibrate::Calibrate(o));
  const std::string yaml = jobspec::ClusterYaml(c);
  const std::string out = Flag(a, "out");
  if (out.empty()) {
    std::fputs(yaml.c_str(), stdout);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(WriteFileAtomic(out, yaml));
  std::printf("wrote %s: GEMM fp32 %.1f / %.1f GFLOP/s (fwd / bwd), bf16 %.1f / %.1f; memory %.1f GB/s; Gloo all-reduce "
              "%.2f GB/s, %.1f us among %d ranks; compute lost to concurrent communication %.2f s a second\n",
              out.c_str(), c.device.gemm_fwd[1] / 1e9, c.device.gemm_bwd[1] / 1e9, c.device.gemm_fwd[0] / 1e9,
              c.device.gemm_bwd[0] / 1e9, c.device.memory_bandwidth / 1e9, c.intra.bandwidth / 1e9,
              c.intra.latency * 1e6, o.ranks, c.device.comm_compute_cost);
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  absl::Status s;
  if (cmd == "prepare") {
    s = RunPrepare(argc, argv);
  } else if (cmd == "sample") {
    s = RunSample(argc, argv);
  } else if (cmd == "eval") {
    s = RunEval(argc, argv);
  } else if (cmd == "export") {
    s = RunExport(argc, argv);
  } else if (cmd == "compare") {
    s = RunCompare(argc, argv);
  } else if (cmd == "calibrate") {
    s = RunCalibrate(argc, argv);
  } else {
    s = RunTrain(argc, argv);
  }
  if (s.ok()) return 0;
  std::fprintf(stderr, "gantry-train: %s\n", std::string(s.message()).c_str());
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kOutOfRange:
      return 2;
    default:
      return 1;
  }
}

}  // namespace
}  // namespace gantry

int main(int argc, char** argv) { return gantry::Main(argc, argv); }
