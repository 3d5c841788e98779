// gantry-train: Gantry's training code in one process, no daemons.
//
//   gantry-train JOB.yaml [flags]
//   gantry-train prepare|sample|eval|export|compare|calibrate [flags] [operands]
//
// Each command defines its flags once, in its Run function (common/command_flags.h), and
// `gantry-train COMMAND --help` lists them (`gantry-train --help`: the training's, and the
// commands). sample and export are cli/model_commands.h's and cli/export_checkpoint.h's, as gantry's are. Bad input is a one-line error on stderr and exit status 2.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/command_flags.h"
#include "common/console.h"
#include "common/status.h"
#include "kernels/threads.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "data/token_file.h"
#include "common/file_util.h"
#include "model/hf_io.h"
#include "checkpoint/checkpoint.h"
#include "cli/export_checkpoint.h"
#include "cli/model_commands.h"
#include "cli/train/calibrate.h"
#include "cli/train/gemm_sweep.h"
#include "jobspec/job_spec.h"
#include "worker/train/device.h"
#include "worker/train/trainer.h"

namespace gantry {
namespace {

constexpr char kProgram[] = "gantry-train";

// The commands: name (empty: train, the program's own), operands and summary; each one's flags
// are defined in its Run function, and `gantry-train COMMAND --help` lists them.
struct CommandInfo {
  const char* name;
  const char* operands;
  const char* summary;
};
constexpr CommandInfo kCommands[] = {
    {"", "JOB.yaml", "train the job spec's model in this process (no daemons)"},
    {"prepare", "INPUT...",
     "tokenize text files into a dataset: a document per file by default; a fortune file's entries; a .jsonl or "
     ".ndjson file's records; every 1/F-th document to val, or --val's files"},
    {"sample", "", "generate text from a Hugging Face model directory"},
    {"eval", "", "a model directory's loss on a token file"},
    {"export", "", "a checkpoint, any layout, as a Hugging Face model directory, with the job's data.tokenizer as "
                   "tokenizer.json"},
    {"compare", "DIR_A DIR_B",
     "two model directories: relative difference of the parameters, ||a - b|| / ||b||, and the worst tensor"},
    {"calibrate", "",
     "this machine as a cluster file for gantry plan --cluster: the cpu backend's GEMM, attention and memory rates "
     "at a layer of that shape, and Gloo's all-reduce among R ranks on loopback; with --gemm-sweep, a device "
     "profile whose gemm_table is the backend's GEMM rate at every m, n, k of the sizes, forward and backward (progress "
     "on stderr; with --out the file is written after each precision's grid)"},
};

CommandFlags FlagsOf(const std::string& name) {
  for (const CommandInfo& c : kCommands) {
    if (name == c.name) return CommandFlags(kProgram, c.name, c.operands, c.summary);
  }
  return CommandFlags(kProgram, name, "", "");
}

// Parses args into f: true to run the command; false after printing its --help.
absl::StatusOr<bool> Parsed(CommandFlags& f, const std::vector<std::string>& args) {
  RETURN_IF_ERROR(f.Parse(args));
  if (!f.help()) return true;
  std::fputs(f.Help().c_str(), stdout);
  return false;
}

void SetThreads(int n) { kernels::ConfigureThreads(n); }

absl::Status RunPrepare(const std::vector<std::string>& args) {
  data::PrepareOptions o;
  o.out_dir = "datasets/fortunes";
  o.text_field = "text";
  std::string documents = "file";
  std::vector<std::string> val;
  CommandFlags f = FlagsOf("prepare");
  f.Operands(&o.inputs, 0, -1)
      .String("out-dir", &o.out_dir, "DIR", "where train.bin and val.bin (or their shards) go")
      .Double("val-fraction", &o.val_fraction, "F", "every 1/F-th document to val; 0: none")
      .Default(absl::StrCat(o.val_fraction, "; with --val, 0"))
      .Repeated("val", &val, "INPUT", "the validation set from these files (comma-separated) instead of a split")
      .String("documents", &documents, "file|paragraph|line", "where a document ends")
      .String("text-field", &o.text_field, "NAME", "a .jsonl or .ndjson record's text field")
      .String("tokenizer", &o.tokenizer, "PATH", "a Hugging Face tokenizer; default: bytes")
      .Int("shard-tokens", &o.shard_tokens, "N", "with --tokenizer: tokens per shard")
      .Int("threads", &o.threads, "N", "with --tokenizer: encoding threads")
      .String("eot", &o.eot, "TOKEN", "with --tokenizer: the end-of-text token between documents");
  ASSIGN_OR_RETURN(bool run, Parsed(f, args));
  if (!run) return absl::OkStatus();
  if (o.text_field.empty()) return absl::InvalidArgumentError("prepare: --text-field is empty");
  ASSIGN_OR_RETURN(o.documents, data::ParseDocumentCut(documents));
  // --val INPUT (repeated, or its inputs comma-separated): the validation set from files of
  // its own, and then no split of the training inputs unless --val-fraction asks (an error).
  for (const std::string& v : val) {
    for (const absl::string_view part : absl::StrSplit(v, ',', absl::SkipEmpty())) o.val_inputs.emplace_back(part);
  }
  if (f.given("val") && o.val_inputs.empty()) return absl::InvalidArgumentError("prepare: --val names no input");
  if (!o.val_inputs.empty() && !f.given("val-fraction")) o.val_fraction = 0;
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

absl::Status RunSample(const std::vector<std::string>& args) {
  std::string from;
  cli::SampleFlags s;
  CommandFlags f = FlagsOf("sample");
  f.String("from", &from, "DIR", "the model directory (config.json, model.safetensors): required");
  cli::DefineSampleFlags(f, &s);
  ASSIGN_OR_RETURN(bool run, Parsed(f, args));
  if (!run) return absl::OkStatus();
  if (from.empty()) return absl::InvalidArgumentError("sample: --from DIR is required");
  return cli::SampleModel(from, s);
}

absl::Status RunEval(const std::vector<std::string>& args) {
  std::string from, data_path, logits;
  int T = 0, B = 1, batches = 1, threads = 0;
  CommandFlags f = FlagsOf("eval");
  f.String("from", &from, "DIR", "the model directory: required")
      .String("data", &data_path, "FILE", "the token file: required")
      .Int("seq-len", &T, "T", "sequence length")
      .Default("the model's n_positions")
      .Int("batch", &B, "B", "sequences per batch")
      .Int("batches", &batches, "N", "batches")
      .Int("threads", &threads, "N", "CPU threads; 0: one per CPU")
      .String("logits", &logits, "FILE", "write the first batch's logits there, B x T x V float32, raw");
  ASSIGN_OR_RETURN(bool run, Parsed(f, args));
  if (!run) return absl::OkStatus();
  if (from.empty() || data_path.empty()) return absl::InvalidArgumentError("eval: --from DIR and --data FILE are required");
  SetThreads(threads);
  ASSIGN_OR_RETURN(auto model, model::LoadHFModel(from));
  if (T <= 0) T = model->config().max_seq_len;
  if (T > model->config().max_seq_len || B < 1 || batches < 1) {
    return absl::InvalidArgumentError("eval: need 1 <= --seq-len <= n_positions, --batch >= 1, --batches >= 1");
  }
  ASSIGN_OR_RETURN(auto d, data::Dataset::Open(data_path, T, static_cast<uint32_t>(model->config().vocab_size)));
  ASSIGN_OR_RETURN(const float loss, train::Trainer::Evaluate(*model, *d, B, T, batches));
  if (const std::string& path = logits; !path.empty()) {
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

absl::Status RunExport(const std::vector<std::string>& args) {
  std::string ckpt, out;
  cli::ExportFlags e;
  CommandFlags f = FlagsOf("export");
  f.String("checkpoint", &ckpt, "DIR", "the checkpoint directory (manifest.json and its parts): required")
      .String("out", &out, "OUT", "the model directory to write: required");
  cli::DefineExportFlags(f, &e);
  ASSIGN_OR_RETURN(bool run, Parsed(f, args));
  if (!run) return absl::OkStatus();
  if (ckpt.empty() || out.empty()) return absl::InvalidArgumentError("export: --checkpoint DIR and --out OUT are required");
  RETURN_IF_ERROR(hf::ParseExportDtype(e.dtype).status());
  return cli::ExportModel(*checkpoint::DirectorySource(ckpt), ckpt, out, e);
}

absl::Status RunCompare(const std::vector<std::string>& args) {
  std::vector<std::string> dirs;
  CommandFlags f = FlagsOf("compare");
  f.Operands(&dirs, 2, 2);
  ASSIGN_OR_RETURN(bool run, Parsed(f, args));
  if (!run) return absl::OkStatus();
  ASSIGN_OR_RETURN(auto x, model::LoadHFModel(dirs[0]));
  ASSIGN_OR_RETURN(auto y, model::LoadHFModel(dirs[1]));
  if (!(x->config() == y->config())) {
    return absl::InvalidArgumentError(absl::StrCat("compare: ", dirs[0], " and ", dirs[1],
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

absl::Status RunTrain(const std::vector<std::string>& args) {
  std::vector<std::string> spec_file;
  int threads = 0;
  std::string device, attention;
  bool resume = false, print_losses = false, no_progress = false;
  train::TrainOptions o;
  CommandFlags f = FlagsOf("");
  f.Operands(&spec_file, 1, 1)
      .String("init-from", &o.init_from, "DIR",
              "start from this Hugging Face model directory: the model keys come from its config.json, and those "
              "the spec states must agree with it")
      .String("save", &o.save_dir, "DIR", "write the trained model there (Hugging Face)")
      .Switch("resume", &resume, "resume from the newest checkpoint under the spec's checkpoint.dir")
      .Switch("print-losses", &print_losses, "print each step's loss, full precision")
      .Int("threads", &threads, "N", "CPU threads; 0: one per CPU")
      .Switch("no-progress", &no_progress, "no progress bar")
      .Int("stop-after", &o.stop_after, "STEP", "stop after this step (as a preemption would)")
      .Default("")
      .String("device", &device, "cpu|cuda|cuda:N|cuda-emulated",
              "the backend (cuda: one GPU, dp 1, ZeRO 0; cuda-emulated: the CUDA code path on the CPU, any layout)")
      .Default("the spec's resources.device")
      .String("attention", &attention, "auto|cudnn|fused|reference",
              "the cuda kinds' attention (auto: cuDNN's fused attention for bf16/fp16 where libcudnn.so.9 loads, the "
              "fused fp32 kernels otherwise)")
      .Default("auto");
  ASSIGN_OR_RETURN(bool run, Parsed(f, args));
  if (!run) return absl::OkStatus();
  SetThreads(threads);
  // --init-from: the model's shape comes from its config.json; the spec may leave it out,
  // and what it states must agree.
  std::optional<jobspec::GPTConfig> from;
  if (!o.init_from.empty()) {
    ASSIGN_OR_RETURN(from, hf::ReadConfig(o.init_from));
  }
  ASSIGN_OR_RETURN(jobspec::JobSpec spec,
                   jobspec::LoadJobSpec(spec_file[0], from ? &*from : nullptr,
                                      (std::filesystem::path(o.init_from) / "config.json").string()));
  o.resume = resume;
  o.print_losses = print_losses;
  o.progress = !no_progress && isatty(STDERR_FILENO);
  if (f.given("device")) o.device = device;
  if (f.given("attention")) {
    ASSIGN_OR_RETURN(o.device_options.attention, kernels::ParseAttentionPath(attention));
  }
  ASSIGN_OR_RETURN(auto trainer, train::Trainer::Create(spec, o));
  return trainer->Run();
}

// A --sizes list: "768,1536,..." (whole numbers), or "none".
absl::StatusOr<std::vector<int64_t>> SizeList(const std::string& name, const std::string& text) {
  std::vector<int64_t> sizes;
  if (text == "none") return sizes;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": '", part, "' is not a size >= 1 (a comma-separated list, or none)"));
    }
    sizes.push_back(v);
  }
  return sizes;
}

std::string SizesText(const std::vector<int64_t>& sizes) { return absl::StrJoin(sizes, ","); }

// calibrate's flags: the CPU calibration's, and --gemm-sweep's.
struct CalibrateFlags {
  calibrate::Options cpu;
  calibrate::SweepOptions sweep;
  bool gemm_sweep = false;
  int repeats = 0;
  std::string out, device = "cuda", base, sizes, fp32_sizes;
};

// calibrate --gemm-sweep: the device profile with its GEMM table (cli/train/gemm_sweep.h).
absl::Status RunGemmSweep(const CommandFlags& f, CalibrateFlags& c) {
  for (const char* cpu_only : {"threads", "ranks", "n-embd", "heads", "seq-len", "rows"}) {
    if (f.given(cpu_only)) {
      return absl::InvalidArgumentError(absl::StrCat("--", cpu_only, " is for the CPU calibration, not --gemm-sweep"));
    }
  }
  calibrate::SweepOptions& o = c.sweep;
  ASSIGN_OR_RETURN(train::DeviceName device, train::ParseDevice(c.device));
  o.kind = device.kind, o.device = device.ordinal;
  if (f.given("sizes")) {
    ASSIGN_OR_RETURN(o.bf16_sizes, SizeList("sizes", c.sizes));
  }
  if (f.given("fp32-sizes")) {
    ASSIGN_OR_RETURN(o.fp32_sizes, SizeList("fp32-sizes", c.fp32_sizes));
  }
  if (f.given("repeats")) o.repeats = c.repeats;
  std::optional<jobspec::DeviceProfile> base;
  if (const std::string& b = c.base; !b.empty()) {
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
  const std::string& out = c.out;
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

absl::Status RunCalibrate(const std::vector<std::string>& args) {
  CalibrateFlags c;
  c.repeats = c.cpu.repeats;
  CommandFlags f = FlagsOf("calibrate");
  calibrate::Options& o = c.cpu;
  f.Switch("gemm-sweep", &c.gemm_sweep, "sweep the GEMM rates of --device into a device profile")
      .Int("threads", &o.threads, "N", "CPU calibration: threads per rank")
      .Int("ranks", &o.ranks, "R", "CPU calibration: Gloo ranks (also the node's size)")
      .Int("n-embd", &o.n_embd, "C", "CPU calibration: the layer's width")
      .Int("heads", &o.n_head, "H", "CPU calibration: attention heads")
      .Int("seq-len", &o.seq_len, "T", "CPU calibration: sequence length")
      .Int("rows", &o.rows, "N", "CPU calibration: tokens a GEMM takes")
      .Int("repeats", &c.repeats, "K", "the median of K timings")
      .Default(absl::StrCat(c.cpu.repeats, "; --gemm-sweep: ", c.sweep.repeats))
      .String("out", &c.out, "FILE", "write the cluster file (or the profile) there; default: stdout")
      .String("device", &c.device, "cuda|cuda:N|cuda-emulated|cpu", "--gemm-sweep: the backend")
      .String("base", &c.base, "NAME|FILE",
              "--gemm-sweep: the rest of the profile from this built-in (h100, h200, a100) or profile file")
      .Default("the one the GPU's name names")
      .String("sizes", &c.sizes, "LIST", "--gemm-sweep: bf16's m, n and k sizes, comma-separated; none: skipped")
      .Default(SizesText(c.sweep.bf16_sizes))
      .String("fp32-sizes", &c.fp32_sizes, "LIST", "--gemm-sweep: fp32's sizes; none: skipped")
      .Default(SizesText(c.sweep.fp32_sizes));
  ASSIGN_OR_RETURN(bool run, Parsed(f, args));
  if (!run) return absl::OkStatus();
  if (c.gemm_sweep) return RunGemmSweep(f, c);
  for (const char* sweep_only : {"device", "base", "sizes", "fp32-sizes"}) {
    if (f.given(sweep_only)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", sweep_only, " is for --gemm-sweep (the CPU calibration runs on the cpu backend)"));
    }
  }
  o.repeats = c.repeats;
  ASSIGN_OR_RETURN(jobspec::ClusterSpec cluster, calibrate::Calibrate(o));
  const std::string yaml = jobspec::ClusterYaml(cluster);
  const std::string& out = c.out;
  if (out.empty()) {
    std::fputs(yaml.c_str(), stdout);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(WriteFileAtomic(out, yaml));
  std::printf("wrote %s: GEMM fp32 %.1f / %.1f GFLOP/s (fwd / bwd), bf16 %.1f / %.1f; memory %.1f GB/s; Gloo all-reduce "
              "%.2f GB/s, %.1f us among %d ranks; point to point %.2f GB/s, %.1f us; compute lost to concurrent "
              "communication %.2f s a second\n",
              out.c_str(), cluster.device.gemm_fwd[1] / 1e9, cluster.device.gemm_bwd[1] / 1e9, cluster.device.gemm_fwd[0] / 1e9,
              cluster.device.gemm_bwd[0] / 1e9, cluster.device.memory_bandwidth / 1e9, cluster.intra.bandwidth / 1e9,
              cluster.intra.latency * 1e6, o.ranks, cluster.intra_p2p.bandwidth / 1e9, cluster.intra_p2p.latency * 1e6,
              cluster.device.comm_compute_cost);
  return absl::OkStatus();
}

// gantry-train --help: the train command's flags, then the other commands.
std::string Overview() {
  (void)RunTrain({"--help"});  // prints the train command's help (its flags are defined there)
  std::string out = "commands:\n";
  for (const CommandInfo& c : kCommands) {
    if (*c.name == 0) continue;
    const std::string left = absl::StrCat("  ", c.name, *c.operands ? " " : "", c.operands);
    absl::StrAppend(&out, HelpRow(left, c.summary, 22, 76));
  }
  absl::StrAppend(&out, "gantry-train COMMAND --help lists a command's flags.\n");
  return out;
}

int Main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fprintf(stderr, "usage: gantry-train JOB.yaml [flags], or gantry-train COMMAND [flags]: gantry-train --help "
                 "lists them\n");
    return 2;
  }
  if (args[0] == "--help" || args[0] == "-h") {
    std::fputs(Overview().c_str(), stdout);
    return 0;
  }
  const std::string& cmd = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  absl::Status s;
  if (cmd == "prepare") {
    s = RunPrepare(rest);
  } else if (cmd == "sample") {
    s = RunSample(rest);
  } else if (cmd == "eval") {
    s = RunEval(rest);
  } else if (cmd == "export") {
    s = RunExport(rest);
  } else if (cmd == "compare") {
    s = RunCompare(rest);
  } else if (cmd == "calibrate") {
    s = RunCalibrate(rest);
  } else {
    s = RunTrain(args);
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
