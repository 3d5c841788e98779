// Trains a few steps of one layout in this process and prints, as one JSON object, the bytes
// it measured and the bytes the planner predicts for it: the process's resident-memory
// high-water mark (VmHWM) less its resident memory before the model was built, each rank's
// own account (ZeroEngine's MemoryAccount), on cuda-emulated the bytes each rank's emulated
// device holds at the end (rank r on device r), and the planner's per-rank figures (with a
// pipeline, each stage's activations for the step's micro-batches and for one), and the
// steps' losses (to compare runs bit for bit). Ranks run as
// threads joined by Gloo over loopback. tests/worker/train/memory_test.cc drives it, one
// layout per process so that each high-water mark is the layout's own.
//   memory_probe --layers L --heads H --embd C --vocab V --seq T --micro-batch B
//                --precision fp32|bf16|fp16 --dp D --zero Z [--steps N] [--threads N]
//                [--grad-reduce fp32|bf16] [--pp P --microbatches M --schedule 1f1b|gpipe]
//                [--recompute none|selective|full] [--device cpu|cuda-emulated]
#include <gloo/rendezvous/hash_store.h>
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/matmul.h"
#include "kernels/threads.h"
#include "nlohmann/json.hpp"
#include "jobspec/planner.h"
#include "tests/test_util.h"
#include "data/token_file.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/groups.h"
#include "kernels/emulated/usage.h"
#include "worker/train/trainer.h"

namespace {

// A line of /proc/self/status in bytes ("VmRSS", "VmHWM").
size_t StatusBytes(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(f, line)) {
    if (line.compare(0, n, key) == 0 && line[n] == ':') return std::strtoull(line.c_str() + n + 1, nullptr, 10) * 1024;
  }
  return 0;
}

int Fail(const std::string& why) {
  std::fprintf(stderr, "memory_probe: %s\n", why.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gantry;
  int layers = 2, heads = 2, embd = 64, vocab = 256, seq = 64, micro = 1, dp = 1, zero = 0, steps = 2, threads = 0;
  int pp = 1, microbatches = 1;
  std::string precision = "bf16", grad_reduce = "fp32", schedule = "1f1b", recompute = "none", device = "cpu";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--layers") layers = std::atoi(v);
    else if (k == "--heads") heads = std::atoi(v);
    else if (k == "--embd") embd = std::atoi(v);
    else if (k == "--vocab") vocab = std::atoi(v);
    else if (k == "--seq") seq = std::atoi(v);
    else if (k == "--micro-batch") micro = std::atoi(v);
    else if (k == "--dp") dp = std::atoi(v);
    else if (k == "--zero") zero = std::atoi(v);
    else if (k == "--steps") steps = std::atoi(v);
    else if (k == "--threads") threads = std::atoi(v);
    else if (k == "--precision") precision = v;
    else if (k == "--grad-reduce") grad_reduce = v;
    else if (k == "--pp") pp = std::atoi(v);
    else if (k == "--microbatches") microbatches = std::atoi(v);
    else if (k == "--schedule") schedule = v;
    else if (k == "--recompute") recompute = v;
    else if (k == "--device") device = v;
    else return Fail("unknown flag " + k);
  }
  gantry::testing::TempDir dir;
  {  // tokens for every rank's steps, uniform over the vocabulary
    std::mt19937 rng(7);
    std::vector<uint16_t> toks(static_cast<size_t>(seq) * micro * dp * microbatches * (steps + 2) + 1);
    for (auto& t : toks) t = static_cast<uint16_t>(rng() % static_cast<unsigned>(vocab));
    if (absl::Status s = data::WriteTokenFile(dir.File("train.bin"), toks); !s.ok()) return Fail(s.ToString());
  }
  const std::string yaml = absl::StrCat(
      "model: {n_layer: ", layers, ", n_head: ", heads, ", n_embd: ", embd, ", vocab_size: ", vocab,
      ", max_seq_len: ", seq, ", seq_len: ", seq, "}\n", "data: {train: ", dir.File("train.bin"), "}\n",
      "train: {steps: ", steps, ", micro_batch: ", micro, ", global_batch: ", micro * dp * microbatches,
      ", lr: 1.0e-4, warmup: 0, precision: ", precision, ", grad_reduce_dtype: ", grad_reduce,
      ", recompute: ", recompute, "}\n", "resources: {device: ", device, "}\n", "parallel: {dp: ", dp, ", pp: ", pp,
      ", zero_stage: ", zero, ", schedule: ", schedule, "}\n");
  auto spec = jobspec::ParseJobSpec(yaml);
  if (!spec.ok()) return Fail(spec.status().ToString());
  const jobspec::PlanInput in = jobspec::PlanOfSpec(*spec);
  auto plan_ranks = jobspec::PlanRanks(in);
  if (!plan_ranks.ok()) return Fail(plan_ranks.status().ToString());
  const jobspec::Plan plan = (*plan_ranks)[0].bytes;
  jobspec::PlanInput one = in;  // the same layout with a single micro-batch in flight
  one.microbatches = 1;
  auto plan_one = jobspec::PlanRanks(one);
  if (!plan_one.ok()) return Fail(plan_one.status().ToString());

  // The runtime's own memory first (threads, OpenBLAS's buffers): a GEMM on every thread.
  const int nthreads = threads > 0 ? threads : omp_get_max_threads();
  {
    std::vector<float> a(256 * 256, 1.f), b(256 * 256, 1.f), c(256 * 256);
    kernels::ConfigureThreads(nthreads);
    kernels::matmul_forward(c.data(), a.data(), b.data(), nullptr, 256, 256, 256);
  }
  const size_t baseline = StatusBytes("VmRSS");

  const int world = dp * pp;
  const bool emulated = device == "cuda-emulated";
  if (emulated && world > emu::kDeviceCount) return Fail("more ranks than emulated devices");
  std::vector<train::MemoryAccount> accounts(static_cast<size_t>(world));
  std::vector<absl::Status> status(static_cast<size_t>(world));
  // The trainers (and their groups) outlive the threads: the devices' bytes are read with
  // every rank's buffers still held.
  std::vector<std::unique_ptr<train::Trainer>> trainers(static_cast<size_t>(world));
  std::vector<std::unique_ptr<comm::Groups>> groups(static_cast<size_t>(world));
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      const size_t i = static_cast<size_t>(r);
      kernels::ConfigureThreads(std::max(1, nthreads / world));
      train::TrainOptions o;
      FILE* null = std::fopen("/dev/null", "w");
      o.out = null;
      if (emulated) o.device = absl::StrCat("cuda-emulated:", r);
      if (world > 1) {
        auto g = comm::MakeGroups(r, {dp, 1, pp}, comm::GlooGroups(store, {}));
        if (!g.ok()) {
          status[i] = g.status();
          std::fclose(null);
          return;
        }
        groups[i] = std::move(*g);
        o.groups = groups[i].get();
      }
      auto t = train::Trainer::Create(*spec, o);
      status[i] = t.ok() ? (*t)->Run() : t.status();
      if (t.ok()) {
        accounts[i] = (*t)->memory();
        trainers[i] = std::move(*t);
      }
      std::fclose(null);
    });
  }
  for (auto& t : ranks) t.join();
  for (const auto& s : status) {
    if (!s.ok()) return Fail(s.ToString());
  }
  const size_t hwm = StatusBytes("VmHWM");
  std::vector<int64_t> device_bytes;
  for (int r = 0; emulated && r < world; ++r) device_bytes.push_back(emu::UsageOf(r).allocated_bytes);
  nlohmann::json j;
  j["baseline_rss"] = baseline;
  j["peak_rss"] = hwm;
  j["measured"] = hwm - baseline;
  j["plan"] = {{"params", plan.params}, {"grads", plan.grads}, {"optimizer", plan.optimizer},
               {"activations", plan.activations}, {"working", plan.working}, {"total", plan.total()}};
  for (const auto& m : accounts) {
    j["ranks"].push_back({{"params", m.params}, {"grads", m.grads}, {"optimizer", m.optimizer},
                          {"activations", m.activations}, {"working", m.working}, {"peak", m.peak}});
  }
  for (size_t r = 0; r < device_bytes.size(); ++r) j["ranks"][r]["device_bytes"] = device_bytes[r];
  for (const auto& rep : trainers[0]->reports()) j["losses"].push_back(rep.loss);  // every rank reports the step's loss
  // Each (stage, tp rank)'s plan: its total, its activations for the step's micro-batches and
  // for one, the micro-batches it keeps in flight, and its layers.
  for (size_t k = 0; k < plan_ranks->size(); ++k) {
    const jobspec::RankPlan& p = (*plan_ranks)[k];
    const jobspec::ModelShard sh =
        jobspec::ShardOf(spec->model, 1, p.tp_rank, pp, p.stage, spec->parallel.stage_layers);
    j["stages"].push_back({{"stage", p.stage},
                           {"total", p.bytes.total()},
                           {"activations", p.bytes.activations},
                           {"activations_one", (*plan_one)[k].bytes.activations},
                           {"slots", pp > 1 ? jobspec::PipelineSlots(in.schedule, pp, p.stage, microbatches) : 1},
                           {"layers", sh.layer_end - sh.layer_begin}});
  }
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
