// gantry: the command line over the coordinator's gRPC API.
//
//   gantry [--coordinator HOST:PORT] [-o table|json] submit FILE
//   gantry ... jobs [--state STATE]
//   gantry ... describe JOB
//   gantry ... cancel JOB
//   gantry ... watch JOB           (also: submit FILE --wait)
//   gantry ... workers
//   gantry ... checkpoints JOB
//   gantry ... export JOB [--step N] -o DIR    (-o table|json elsewhere: the output format)
//   gantry ... sample JOB [--step N] --prompt TEXT [--tokens N]
//
// The coordinator address comes from --coordinator, else $GANTRY_COORDINATOR, else
// 127.0.0.1:7070. Every call has a deadline. Exit status: 0 ok, 2 for a bad request
// (invalid spec, unknown job), 1 for anything else (coordinator unreachable, ...).
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "common/console.h"
#include "common/file_util.h"
#include "common/grpc_util.h"
#include "common/security.h"
#include "gantry/v1/coordinator.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "worker/agent/shard_client.h"
#include "worker/data/prepare.h"
#include "worker/data/tokenizer.h"
#include "worker/model/hf_io.h"
#include "worker/train/checkpoint.h"
#include "spec/job_spec.h"
#include "spec/planner.h"
#include "worker/train/sample.h"

namespace gantry::cli {
namespace {

constexpr char kUsage[] =
    "usage: gantry [--coordinator HOST:PORT] [-o table|json] COMMAND\n"
    "  submit FILE          queue the job spec in FILE, print its id\n"
    "  jobs [--state S]     list jobs, newest first (S: PENDING, RUNNING, ...)\n"
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
    "                       bytes per GPU, pipeline bubble, bytes sent per step; with --gpus,\n"
    "                       --gpu-memory and --global-batch, the recommended layout (no coordinator);\n"
    "                       --ranks: each rank's bytes (needs a model shape)\n"
    "  health [ADDR]        gRPC health check of ADDR (default: the coordinator); exit 0 if SERVING\n"
    "submit takes --wait to watch the job it queued.\n";

struct Options {
  std::string coordinator;
  std::string output = "table";
  std::vector<std::string> args;
  double timeout_s = 10;
};

int Fail(const grpc::Status& s) {
  const absl::Status st = FromGrpc(s);
  std::fprintf(stderr, "gantry: %s: %s\n", absl::StatusCodeToString(st.code()).c_str(), s.error_message().c_str());
  return (absl::IsInvalidArgument(st) || absl::IsNotFound(st)) ? 2 : 1;
}

std::unique_ptr<grpc::ClientContext> Ctx(const Options& o) { return ContextWithDeadline(o.timeout_s); }

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions p;
  p.add_whitespace = true;
  p.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, p);
  return out;
}

std::string When(int64_t ms) {
  if (ms == 0) return "-";
  const std::time_t t = ms / 1000;
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

std::string State(const v1::Job& j) {
  std::string s = v1::JobState_Name(j.state());
  if ((j.state() == v1::PENDING || j.state() == v1::RESTARTING) && j.queue_position() > 0) {
    s += absl::StrCat(" (#", j.queue_position(), ")");
  }
  return s;
}

// Follows a job's events. Exit status: 0 when it SUCCEEDED, 1 when it FAILED or was
// CANCELLED (or the stream broke).
int Watch(const Options& o, v1::Coordinator::Stub* stub, const std::string& job_id) {
  v1::GetJobRequest gr;
  gr.set_job_id(job_id);
  v1::Job job;
  auto gs = stub->GetJob(Ctx(o).get(), gr, &job);
  if (!gs.ok()) return Fail(gs);
  const bool tty = isatty(STDERR_FILENO);
  grpc::ClientContext ctx;  // no deadline: a watch lasts as long as the job
  v1::WatchJobRequest req;
  req.set_job_id(job_id);
  auto reader = stub->WatchJob(&ctx, req);
  v1::JobEvent e;
  v1::JobState last = v1::JOB_STATE_UNSPECIFIED;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t first_step = -1;
  bool bar = false;
  auto clear = [&] {
    if (bar) std::fputs("\r\033[K", stderr);
    bar = false;
  };
  while (reader->Read(&e)) {
    if (e.has_state()) {
      clear();
      last = e.state();
      std::printf("%s %s %s\n", When(e.time_unix_ms()).c_str(), job_id.c_str(), v1::JobState_Name(e.state()).c_str());
    } else if (!e.message().empty()) {
      clear();
      std::printf("%s %s %s\n", When(e.time_unix_ms()).c_str(), job_id.c_str(), e.message().c_str());
    } else if (e.has_step()) {
      const auto& r = e.step();
      clear();
      if (r.step() == 0) {
        std::printf("val loss %.4f (before training)\n", r.val_loss());
        continue;
      }
      StepLine line{r.step(), job.steps_total(), r.loss(), r.lr(), r.grad_norm(), r.step_seconds(),
                    r.tokens_per_second(), r.compute_seconds(), r.comm_seconds(), r.optimizer_seconds(), r.val_loss()};
      line.loss_scale = r.loss_scale();
      line.skipped = r.skipped();
      line.skipped_steps = r.skipped_steps();
      line.offload_bytes = static_cast<double>(r.offload_bytes());
      if (r.moe_forwards() > 0) {
        line.SetMoe(r.moe_aux(), r.moe_z(), r.moe_dropped(), r.moe_assignments(),
                    {r.moe_tokens_per_expert().begin(), r.moe_tokens_per_expert().end()});
      }
      std::printf("%s\n", FormatStepLine(line).c_str());
      if (first_step < 0) first_step = r.step();
      if (tty && job.steps_total() > 0) {
        const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double done = static_cast<double>(r.step() - first_step + 1);
        const double eta = el / done * static_cast<double>(job.steps_total() - r.step());
        std::fputs(FormatProgressBar(r.step(), job.steps_total(), eta).c_str(), stderr);
        bar = true;
      }
    }
    std::fflush(stdout);
  }
  clear();
  auto st = reader->Finish();
  if (!st.ok()) return Fail(st);
  auto fin = stub->GetJob(Ctx(o).get(), gr, &job);
  if (fin.ok() && !job.reason().empty() && last != v1::SUCCEEDED) std::printf("reason: %s\n", job.reason().c_str());
  return last == v1::SUCCEEDED ? 0 : 1;
}

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
  std::vector<agent::StoredCheckpoint> found = agent::ListStoredCheckpoints(servers, job_id, &unreachable);
  for (const auto& u : unreachable) std::fprintf(stderr, "gantry: cannot list checkpoints on %s\n", u.c_str());
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
  const agent::StoredCheckpoint* pick = nullptr;
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
      if (auto st = agent::DownloadCheckpoint(server, job_id, pick->step, names, out_dir); !st.ok()) {
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
  agent::ShardCheckpointSource source(*pick);
  std::string missing;
  auto st = train::ExportCheckpoint(source, dir, cmd == "export" ? *dtype : kernels::Precision::kFp32, "", &missing);
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
  train::SampleOptions so;
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
  auto out = train::Sample(**model, (*tok)->Encode(prompt), so, [&](uint32_t t) {
    std::fputs((*tok)->TokenText(t).c_str(), stdout);
    std::fflush(stdout);
  });
  std::fputc('\n', stdout);
  return out.ok() ? 0 : 1;
}

// gantry plan: the planner, locally.
int PlanCommand(const std::vector<std::string>& args) {
  train::PlanInput in;
  int gpus = 0, global_batch = 0;
  bool dp_given = false, per_rank = false;
  model::GPTConfig shape;
  bool shape_given = false;
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
    if (a == "--preset") {
      auto c = train::ModelPreset(next());
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
      shape.arch = v == "llama" ? model::Arch::kLlama : model::Arch::kGpt2, shape_given = true;
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
      ok = real(&in.params);
    } else if (a == "--gpus") {
      ok = num(&gpus);
    } else if (a == "--gpu-memory") {
      ok = real(&in.device_memory), in.device_memory *= 1e9;
    } else if (a == "--precision") {
      const std::string v = next();
      if (v != "mixed" && v != "fp32" && v != "bf16" && v != "fp16") {
        return bad("--precision is fp32, bf16 or fp16 (Gantry's train.precision), or mixed (the textbook's accounting)");
      }
      in.precision = v == "fp32"   ? train::Precision::kFp32
                     : v == "mixed" ? train::Precision::kMixed
                                    : train::Precision::kAutocast;
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
      in.recompute = v == "full" ? model::Recompute::kFull : v == "selective" ? model::Recompute::kSelective
                                                                           : model::Recompute::kNone;
    } else if (a == "--global-batch") {
      ok = num(&global_batch);
    } else if (a == "--ranks") {
      per_rank = true;
    } else if (a.rfind("--", 0) != 0) {  // a job spec
      auto spec = train::LoadJobSpec(a);
      if (!spec.ok()) return bad(std::string(spec.status().message()));
      const double mem = in.device_memory;
      in = train::PlanOfSpec(*spec);
      in.device_memory = mem;
      dp_given = true;
    } else {
      return bad(absl::StrCat("unknown flag ", a));
    }
    if (!ok) return bad(absl::StrCat(a, " takes a number"));
  }
  if (shape_given) {
    shape.max_seq_len = std::max(shape.max_seq_len, in.seq_len);
    if (auto s = shape.Validate(); !s.ok()) return bad(std::string(s.message()));
    in.model = shape;
  }
  if (gpus > 0 && !dp_given) in.dp = std::max(1, gpus / (in.tp * in.pp));
  auto p = train::MakePlan(in);
  if (!p.ok()) return bad(std::string(p.status().message()));
  double n = in.params;
  if (in.model && n <= 0) {
    for (const auto& t : model::ParameterLayout(*in.model)) n += static_cast<double>(t.numel);
  }
  if (in.model && in.model->llama()) {
    std::printf("model: llama, %d layers, d_model %d, %d heads (%d key/value), ffn %d, vocab %d, T %d: %.4g parameters\n",
                in.model->n_layer, in.model->n_embd, in.model->n_head, in.model->kv_heads(), in.model->ffn(),
                in.model->vocab_size, in.seq_len, n);
  } else if (in.model && in.model->moe.num_experts > 0) {
    const model::MoeConfig& m = in.model->moe;
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
  std::fputs(train::RenderPlan(in, *p).c_str(), stdout);
  if (per_rank) {
    auto ranks = train::PlanRanks(in);
    if (!ranks.ok()) return bad(std::string(ranks.status().message()));
    std::printf("\nper rank, in bytes:\n%s", train::RenderRanks(in, *ranks).c_str());
  }
  if (gpus > 0 && global_batch > 0 && in.device_memory > 0) {
    auto r = train::Recommend(in, gpus, global_batch);
    if (!r.ok()) {
      std::printf("recommended: none: %s\n", std::string(r.status().message()).c_str());
      return 1;
    }
    std::printf("\nrecommended for %d GPUs of %.1f GB and a global batch of %d:\n", gpus, in.device_memory / 1e9,
                global_batch);
    std::fputs(train::RenderPlan(*r, *train::MakePlan(*r)).c_str(), stdout);
  }
  return p->fits ? 0 : 1;
}

int Run(const Options& o) {
  if (o.args.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (o.args[0] == "plan") return PlanCommand(o.args);
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
    bool wait = false;
    std::vector<std::string> a;
    for (const auto& x : o.args) (x == "--wait" ? wait = true : (a.push_back(x), false));
    if (a.size() != 2) {
      std::fputs("gantry: submit takes one job spec file\n", stderr);
      return 2;
    }
    auto text = ReadFileToString(a[1]);
    if (!text.ok()) {
      std::fprintf(stderr, "gantry: %s\n", std::string(text.status().message()).c_str());
      return 2;
    }
    v1::SubmitJobRequest req;
    req.set_spec_yaml(*text);
    v1::SubmitJobResponse resp;
    auto s = stub->SubmitJob(Ctx(o).get(), req, &resp);
    if (!s.ok()) return Fail(s);
    if (o.output == "json") std::printf("%s\n", Json(resp).c_str());
    else std::printf("%s\n", resp.job_id().c_str());
    std::fflush(stdout);
    return wait ? Watch(o, stub.get(), resp.job_id()) : 0;
  }
  if (cmd == "jobs") {
    v1::ListJobsRequest req;
    if (o.args.size() == 3 && o.args[1] == "--state") {
      v1::JobState st;
      if (!v1::JobState_Parse(o.args[2], &st)) {
        std::fprintf(stderr, "gantry: unknown state '%s'\n", o.args[2].c_str());
        return 2;
      }
      req.set_state(st);
    } else if (o.args.size() != 1) {
      std::fputs(kUsage, stderr);
      return 2;
    }
    v1::ListJobsResponse resp;
    // The table shows no spec: without the spec texts a listing is a twelfth of the bytes. JSON
    // keeps every field.
    req.set_brief(o.output != "json");
    auto s = stub->ListJobs(Ctx(o).get(), req, &resp);
    if (!s.ok()) return Fail(s);
    if (o.output == "json") {
      std::printf("%s\n", Json(resp).c_str());
      return 0;
    }
    std::printf("%-10s %-20s %-16s %-13s %s\n", "JOB", "NAME", "STATE", "STEP", "SUBMITTED");
    for (const auto& j : resp.jobs()) {
      std::printf("%-10s %-20s %-16s %-13s %s\n", j.id().c_str(), j.name().c_str(), State(j).c_str(),
                  absl::StrCat(j.steps_done(), "/", j.steps_total()).c_str(), When(j.submit_time_unix_ms()).c_str());
    }
    return 0;
  }
  if (cmd == "describe" || cmd == "cancel") {
    if (o.args.size() != 2) {
      std::fprintf(stderr, "gantry: %s takes one job id\n", cmd.c_str());
      return 2;
    }
    v1::Job job;
    grpc::Status s;
    if (cmd == "describe") {
      v1::GetJobRequest req;
      req.set_job_id(o.args[1]);
      s = stub->GetJob(Ctx(o).get(), req, &job);
    } else {
      v1::CancelJobRequest req;
      req.set_job_id(o.args[1]);
      s = stub->CancelJob(Ctx(o).get(), req, &job);
    }
    if (!s.ok()) return Fail(s);
    if (o.output == "json") {
      std::printf("%s\n", Json(job).c_str());
      return 0;
    }
    std::printf("Job:        %s\nName:       %s\nState:      %s\n", job.id().c_str(), job.name().c_str(), State(job).c_str());
    const bool ended = job.state() == v1::FAILED || job.state() == v1::CANCELLED;
    if (!job.reason().empty()) std::printf("%s%s\n", ended ? "Reason:     " : "Last failure: ", job.reason().c_str());
    if (!job.waiting_for().empty()) std::printf("Waiting:    %s\n", job.waiting_for().c_str());
    if (!job.stalled().empty() && job.state() == v1::RUNNING) std::printf("Stalled:    %s\n", job.stalled().c_str());
    std::printf("Priority:   %d\nRestarts:   %d\n", job.priority(), job.restarts());
    if (job.workers_size() > 0) {
      std::string ranks;
      for (int r = 0; r < job.workers_size(); ++r) absl::StrAppend(&ranks, r ? ", " : "", "rank ", r, " ", job.workers(r));
      std::printf("Workers:    %s\n", ranks.c_str());
    }
    std::printf("Steps:      %ld/%ld\nSubmitted:  %s\nUpdated:    %s\nSpec:\n", static_cast<long>(job.steps_done()),
                static_cast<long>(job.steps_total()), When(job.submit_time_unix_ms()).c_str(),
                When(job.update_time_unix_ms()).c_str());
    std::string spec = job.spec_yaml();
    size_t pos = 0;
    while (pos < spec.size()) {
      size_t nl = spec.find('\n', pos);
      if (nl == std::string::npos) nl = spec.size();
      std::printf("  %s\n", spec.substr(pos, nl - pos).c_str());
      pos = nl + 1;
    }
    return 0;
  }
  if (cmd == "watch") {
    if (o.args.size() != 2) {
      std::fputs("gantry: watch takes one job id\n", stderr);
      return 2;
    }
    return Watch(o, stub.get(), o.args[1]);
  }
  if (cmd == "workers") {
    v1::ListWorkersResponse resp;
    auto s = stub->ListWorkers(Ctx(o).get(), v1::ListWorkersRequest(), &resp);
    if (!s.ok()) return Fail(s);
    if (o.output == "json") {
      std::printf("%s\n", Json(resp).c_str());
      return 0;
    }
    // RANKS: the job's ranks the worker runs, on its GPUs 0, 1, ... in that order.
    std::printf("%-10s %-20s %-8s %-6s %-10s %-8s %-16s %s\n", "WORKER", "HOST", "DEVICE", "STATE", "JOB", "RANKS",
                "LAST HEARTBEAT", "GPU");
    for (const auto& w : resp.workers()) {
      const auto& r = w.resources();
      const std::string gpu = r.device_name().empty()
                                  ? "-"
                                  : absl::StrFormat("%s, %.1f GB", r.device_name(), r.device_memory_bytes() / 1e9);
      const std::string ranks = w.ranks().empty() ? "-" : absl::StrJoin(w.ranks(), ",");
      std::printf("%-10s %-20s %-8s %-6s %-10s %-8s %-16s %s\n", w.id().c_str(), r.host().c_str(),
                  absl::StrCat(r.device_kind(), "x", r.device_count()).c_str(), w.state().c_str(),
                  w.job_id().empty() ? "-" : w.job_id().c_str(), ranks.c_str(), When(w.last_heartbeat_unix_ms()).c_str(),
                  gpu.c_str());
    }
    return 0;
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
