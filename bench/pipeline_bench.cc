// The pipeline bubble, measured: two stages (threads of this process, each one core, joined
// by Gloo groups; the stages' transfers go through a shared-memory link, comm/gloo/
// shm_transport.h, or with GANTRY_SHM_DISABLE=1 over loopback TCP) train a GPT of 4 layers (--layers), split by cost (jobspec::
// BalanceStages, and BalanceChunks for the interleaved rows), with m micro-batches a step.
// Each stage's bubble is the part of the pipeline's time (the slowest stage's schedule) it
// did not compute (waiting for a neighbour, or in a transfer); the figure is the mean over
// the stages and the measured steps (the first two are warm-up), printed next to
// (p - 1) / (m + p - 1), and for the interleaved 1F1B (parallel.virtual_stages 2: each stage
// two chunks, of one layer each at 4 layers) next to (p - 1) / (v·m + p - 1), the same bubble
// as a part of the step (Narayanan et al.'s (p - 1) / (v·m) is it as a part of the compute:
// printed beside).
// Target: within 5 points for p = 2, m in {2, 4, 8}, under 1F1B and interleaved 1F1B (and
// GPipe, for reference). "transfers": stage 0's blocking transfers a step, of its sends and
// receives (an exchange, one SendRecv, is one; both stages have as many). "schedule": the same
// ops run again in simulation (jobspec::SimulatePipeline) with each compute's mean measured time
// and the transfers free: the bubble the schedule leaves at this run's op times, unbalanced
// stages included (the last chunk computes the loss); "rdv ms": what each rendezvous would have
// to cost, in that simulation, to leave the measured bubble.
//   pipeline_bench [--n-embd 192] [--seq-len 128] [--batch 4] [--layers 4] [--steps 10] [--only 1f1b|1f1b-v2|gpipe]
// Exit status 1 when a 1F1B or interleaved figure misses the target.
#include <gloo/rendezvous/hash_store.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rng.h"
#include "kernels/threads.h"
#include "data/token_file.h"
#include "comm/gloo/gloo_communicator.h"
#include "jobspec/pipeline.h"
#include "worker/train/trainer.h"

namespace {

using namespace gantry;

struct Figure {
  double bubble = 0;      // mean over stages and measured steps
  double step_ms = 0;
  // The schedule run again (jobspec::SimulatePipeline) with each compute's mean time over the
  // measured steps: its bubble with transfers free, and the cost a rendezvous would need for the
  // simulation to leave the measured bubble (-1: none within 20 ms).
  double schedule_bubble = 0;
  double rendezvous_ms = 0;
  bool shared_memory = false;  // the stages' transfers went through a shared-memory link
  absl::Status status;
};

// The rendezvous cost (seconds) at which the simulated bubble reaches `measured` (bisection;
// the bubble grows with it); -1 if not within 20 ms.
double RendezvousCostFor(double measured, const std::vector<std::vector<jobspec::PipeOp>>& ops,
                         const std::function<double(int, size_t)>& seconds) {
  auto bubble = [&](double cost) {
    auto run = jobspec::SimulatePipeline(ops, seconds, cost);
    return run.ok() ? run->bubble : -1.0;
  };
  double lo = 0, hi = 0.02;
  if (bubble(hi) < measured) return -1;
  for (int k = 0; k < 40; ++k) (bubble((lo + hi) / 2) < measured ? lo : hi) = (lo + hi) / 2;
  return (lo + hi) / 2;
}

Figure Measure(const std::string& data, const std::string& schedule, int vp, int m, int n_embd, int T, int B,
               int steps, int layers) {
  const int p = 2;
  auto spec = jobspec::ParseJobSpec(absl::StrCat(
      "model: {n_layer: ", layers, ", n_head: 4, n_embd: ", n_embd, ", vocab_size: 256, seq_len: ", T, "}\n",
      "data: {train: ", data, "}\n",
      "train: {steps: ", steps, ", micro_batch: ", B, ", global_batch: ", B * m, ", lr: 1.0e-3}\n",
      "parallel: {pp: ", p, ", schedule: ", schedule, ", virtual_stages: ", vp, "}\n"));
  Figure f;
  if (!spec.ok()) {
    f.status = spec.status();
    return f;
  }
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<std::vector<train::StepReport>> reports(p);
  // Each stage's ops and the seconds each compute took, summed over the measured steps.
  std::vector<std::vector<jobspec::PipeOp>> ops(p);
  std::vector<std::vector<double>> op_seconds(p);
  std::vector<absl::Status> status(p);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      // One thread a stage, pinned to a CPU of its own before the stage's communicators start
      // their transport threads, which take the same CPU (main says why).
      kernels::ConfigureThreads(p, r, p);
      auto groups = comm::MakeGroups(r, {1, 1, p}, comm::GlooGroups(store, {}));
      if (!groups.ok()) {
        status[r] = groups.status();
        return;
      }
      train::TrainOptions o;
      o.groups = groups->get();
      if (r == 0) {
        auto* pp = dynamic_cast<comm::GlooCommunicator*>((*groups)->pp);
        f.shared_memory = pp != nullptr && pp->SharedMemoryWith(1);
      }
      FILE* null = std::fopen("/dev/null", "w");
      o.out = null;
      train::Trainer* trainer = nullptr;
      o.worker.on_step = [&, r](const train::StepReport& rep) {
        if (rep.step <= 2) return true;  // warm-up
        ops[r] = trainer->pipeline_ops();
        const std::vector<double>& sec = trainer->pipeline_op_seconds();
        op_seconds[r].resize(sec.size(), 0.0);
        for (size_t i = 0; i < sec.size(); ++i) op_seconds[r][i] += sec[i];
        return true;
      };
      auto t = train::Trainer::Create(*spec, o);
      if (t.ok()) trainer = t->get();
      status[r] = t.ok() ? (*t)->Run() : t.status();
      if (t.ok()) reports[r] = (*t)->reports();
      std::fclose(null);
    });
  }
  for (auto& t : threads) t.join();
  int n = 0;
  for (int r = 0; r < p; ++r) {
    if (!status[r].ok()) {
      f.status = status[r];
      return f;
    }
    for (size_t i = 2; i < reports[r].size(); ++i) {
      f.bubble += reports[r][i].bubble;
      f.step_ms += reports[r][i].seconds * 1e3;
      ++n;
    }
  }
  f.bubble /= n;
  f.step_ms /= n;
  const double measured_steps = steps - 2;
  auto seconds = [&](int s, size_t i) { return op_seconds[s][i] / measured_steps; };
  auto run = jobspec::SimulatePipeline(ops, seconds);
  if (!run.ok()) {
    f.status = run.status();
    return f;
  }
  f.schedule_bubble = run->bubble;
  const double cost = RendezvousCostFor(f.bubble, ops, seconds);
  f.rendezvous_ms = cost < 0 ? -1 : cost * 1e3;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  // Each stage's thread is pinned to a CPU of its own (ConfigureThreads' part r of p), and so
  // are the transport threads Gloo starts with its communicators: a message's delivery wakes
  // the receiver's transport thread from the sender's CPU, and unpinned the scheduler often
  // queued it there, behind the sender's next compute: 1-8 ms a transfer where pinned it takes
  // 0.2 (393 KB over loopback, the sender computing on after posting; decisions.md).
  int n_embd = 192, T = 128, B = 4, steps = 10, layers = 4;
  std::string only;  // one row's schedule
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (a == "--only") only = argv[i + 1];
    else if (a == "--n-embd") n_embd = v;
    else if (a == "--seq-len") T = v;
    else if (a == "--batch") B = v;
    else if (a == "--steps") steps = v;
    else if (a == "--layers") layers = v;
    else {
      std::fprintf(stderr, "pipeline_bench: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (steps < 3 || layers < 4) {
    std::fprintf(stderr, "pipeline_bench: --steps must be at least 3 (the first two are warm-up) and --layers at least 4 "
                         "(2 stages of 2 chunks), not %d and %d\n", steps, layers);
    return 2;
  }
  const std::string dir = (std::filesystem::temp_directory_path() / absl::StrCat("pipeline_bench.", getpid())).string();
  std::filesystem::create_directories(dir);
  std::vector<uint16_t> toks(200000);
  gantry::Rng rng(1);
  for (auto& t : toks) t = static_cast<uint16_t>(rng.NextU64() % 256);
  const std::string data = dir + "/train.bin";
  if (auto s = gantry::data::WriteTokenFile(data, toks); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("pipeline bubble, p = 2 stages, %d layers (n_embd %d, T %d, micro-batch %d), %d steps (2 warm-up)\n",
              layers, n_embd, T, B, steps);
  std::printf("%-9s %3s %10s %15s %8s %10s %18s %10s %9s %7s\n", "sched", "m", "measured", "(p-1)/(vm+p-1)", "points",
              "step ms", "idle/compute", "transfers", "schedule", "rdv ms");
  bool ok = true;
  int over_shm = 0, over_tcp = 0;  // rows whose stages were linked through shared memory, or not
  struct Row {
    const char* name;
    const char* schedule;
    int vp;
  };
  for (const Row& row : {Row{"1f1b", "1f1b", 1}, Row{"1f1b-v2", "1f1b", 2}, Row{"gpipe", "gpipe", 1}}) {
    if (!only.empty() && only != row.name) continue;
    for (int m : {2, 4, 8}) {
      const Figure f = Measure(data, row.schedule, row.vp, m, n_embd, T, B, steps, layers);
      if (!f.status.ok()) {
        std::fprintf(stderr, "%s m %d: %s\n", row.name, m, f.status.ToString().c_str());
        return 1;
      }
      const double ideal = gantry::jobspec::IdealBubble(2, m, row.vp);
      const double points = (f.bubble - ideal) * 100;
      const bool hit = std::fabs(points) <= 5;
      if (std::string(row.schedule) == "1f1b") ok = ok && hit;
      // The idle time over the compute time, beside (p - 1) / (v·m); a stage's blocking transfers a
      // step (an exchange, one SendRecv, counted once: jobspec/pipeline.h), of its transfers.
      const auto sched = *gantry::jobspec::ParseSchedule(row.schedule);
      const std::vector<gantry::jobspec::PipeOp> ops = gantry::jobspec::PipelineOps(sched, 2, 0, m, row.vp);
      const long transfers = std::count_if(ops.begin(), ops.end(), [](const gantry::jobspec::PipeOp& op) {
        return op.kind != gantry::jobspec::PipeOp::kForward && op.kind != gantry::jobspec::PipeOp::kBackward;
      });
      (f.shared_memory ? over_shm : over_tcp)++;
      std::printf("%-9s %3d %9.1f%% %14.1f%% %+8.1f %10.1f %8.1f%% (%.1f%%) %4d of %3ld %8.1f%% %7.2f %s\n", row.name,
                  m, f.bubble * 100, ideal * 100, points, f.step_ms, 100 * f.bubble / (1 - f.bubble),
                  100.0 / (row.vp * m), gantry::jobspec::PipelineRendezvous(ops), transfers, f.schedule_bubble * 100,
                  f.rendezvous_ms, hit ? "" : "(off target)");
    }
  }
  std::printf("the stages' transfers: %d rows over a shared-memory link, %d over loopback TCP\n", over_shm, over_tcp);
  std::filesystem::remove_all(dir);
  return ok ? 0 : 1;
}
