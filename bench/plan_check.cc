// The step cost model against measurement (issue 39, item 4): a small GPT trained in several
// layouts here, every rank a thread of this process with its own trainer and Gloo groups over
// loopback (as the layout tests run them), each layout's median step time against the
// prediction of `gantry plan --cluster` from this machine's calibration
// (`gantry-train calibrate --threads 1 --ranks 2 --n-embd 256 --heads 4 --seq-len 128 --rows 512`),
// and the layouts' order by each. Prints a table; exits 1 when a prediction is more than 20%
// off or the two orders differ.
//   plan_check --cluster FILE [--steps 8] [--layouts 1.1.1.0.none,2.1.1.0.none,2.1.1.0.none.ep2,...]
//   (DP.TP.PP.ZERO.RECOMPUTE, then .epN for the model's MoE twin at expert parallelism N, or
//   .vpN for the interleaved 1F1B schedule with N chunks a stage, or .cpN for context
//   parallelism N: the sequence's chunks over N ranks, attention round a ring)
// (A cp layout waits for parallel.cp in the job spec: the context-parallel wiring.)
#include <gloo/rendezvous/hash_store.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/groups.h"
#include "data/token_file.h"
#include "jobspec/cost_model.h"
#include "jobspec/job_spec.h"
#include "kernels/threads.h"
#include "worker/train/trainer.h"

namespace {

using namespace gantry;

struct Layout {
  int dp = 1, tp = 1, pp = 1, zero = 0;
  std::string recompute = "none";
  int ep = 0;  // 0: the dense model; else its MoE twin (4 experts, top 2, every second layer) at this ep
  int vp = 1;  // the interleaved schedule's chunks a stage (1: plain 1F1B)
  int cp = 1;  // context parallelism
  std::string Name() const {
    return absl::StrCat("dp", dp, cp > 1 ? absl::StrCat(" cp", cp) : "", " tp", tp, " pp", pp,
                        vp > 1 ? absl::StrCat(" vp", vp) : "", " ZeRO ", zero, " rc ",
                        recompute, ep ? absl::StrCat(" MoE ep", ep) : "");
  }
};

jobspec::JobSpec SpecOf(const Layout& l, const std::string& data, int steps) {
  // 4 layers of 256 over T 128, 4 sequences a micro-batch, 16 a step: the shapes calibrated.
  auto s = jobspec::ParseJobSpec(absl::StrCat(
      "name: plan-check\n"
      "model: {n_layer: 4, n_head: 4, n_embd: 256, vocab_size: 512, seq_len: 128",
      l.ep ? ", moe: {num_experts: 4, top_k: 2, capacity_factor: 1.25, every_n_layers: 2}" : "", "}\n"
      "data: {train: ", data, "}\n"
      "train: {steps: ", steps, ", micro_batch: 4, global_batch: 16, lr: 1.0e-3, warmup: 1, recompute: ", l.recompute,
      "}\n"
      "checkpoint: {every: 0, dir: /tmp/plan-check-unused}\n"
      "parallel: {dp: ", l.dp, ", tp: ", l.tp, ", pp: ", l.pp, ", zero_stage: ", l.zero,
      l.ep ? absl::StrCat(", ep: ", l.ep) : "", l.vp > 1 ? absl::StrCat(", virtual_stages: ", l.vp) : "",
      l.cp > 1 ? absl::StrCat(", cp: ", l.cp) : "", "}\n"));
  if (!s.ok()) {
    std::fprintf(stderr, "plan_check: %s\n", std::string(s.status().message()).c_str());
    std::exit(2);
  }
  return *s;
}

// The median step seconds (rank 0's reports after the first two steps).
double Measure(const Layout& l, const std::string& data, int steps) {
  const int world = l.dp * l.cp * l.tp * l.pp;
  const jobspec::JobSpec spec = SpecOf(l, data, steps);
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<double> seconds;
  std::vector<absl::Status> status(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      kernels::ConfigureThreads(1, r, world);
      train::TrainOptions o;
      FILE* null = std::fopen("/dev/null", "w");
      o.out = null;
      auto groups = comm::MakeGroups(r, {l.dp, l.tp, l.pp, std::max(1, l.ep), l.cp}, comm::GlooGroups(store, {}));
      if (!groups.ok()) {
        status[r] = groups.status();
        std::fclose(null);
        return;
      }
      o.groups = groups->get();
      auto t = train::Trainer::Create(spec, o);
      status[r] = t.ok() ? (*t)->Run() : t.status();
      if (r == 0 && status[r].ok()) {
        for (const train::StepReport& rep : (*t)->reports()) {
          if (rep.step > 2) seconds.push_back(rep.seconds);
        }
      }
      std::fclose(null);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    if (!status[r].ok()) {
      std::fprintf(stderr, "plan_check: %s rank %d: %s\n", l.Name().c_str(), r, std::string(status[r].message()).c_str());
      std::exit(1);
    }
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string cluster_path, layouts =
      "1.1.1.0.none,1.1.1.0.full,1.1.1.0.selective,2.1.1.0.none,2.1.1.1.none,2.1.1.2.none,2.1.1.3.none,1.2.1.0.none,"
      "1.1.2.0.none,1.1.2.0.none.vp2,1.1.1.0.none.cp2,2.1.1.0.none.ep1,2.1.1.0.none.ep2";
  int steps = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--cluster")) cluster_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--layouts")) layouts = argv[i + 1];
    else {
      std::fprintf(stderr, "plan_check: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (cluster_path.empty() || steps < 4) {
    std::fprintf(stderr, "plan_check: --cluster FILE (gantry-train calibrate --out FILE) and --steps >= 4\n");
    return 2;
  }
  auto cluster = jobspec::LoadCluster(cluster_path);
  if (!cluster.ok()) {
    std::fprintf(stderr, "plan_check: %s\n", std::string(cluster.status().message()).c_str());
    return 2;
  }
  // Random tokens: the step's time does not depend on them.
  const std::string data = "/tmp/plan_check_tokens.bin";
  std::vector<uint16_t> tokens(1 << 18);
  uint64_t x = 88172645463325252ull;
  for (auto& t : tokens) x ^= x << 13, x ^= x >> 7, x ^= x << 17, t = static_cast<uint16_t>(x % 512);
  if (auto s = data::WriteTokenFile(data, tokens); !s.ok()) {
    std::fprintf(stderr, "plan_check: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  struct Row {
    Layout l;
    double measured, predicted;
  };
  std::vector<Row> rows;
  for (absl::string_view item : absl::StrSplit(layouts, ',', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(item, '.');
    const std::string tail = f.size() == 6 && f[5].size() > 2 ? f[5].substr(0, 2) : "";
    if (f.size() != 5 && tail != "ep" && tail != "vp" && tail != "cp") {
      std::fprintf(stderr, "plan_check: layout '%s' is not DP.TP.PP.ZERO.RECOMPUTE[.epN|.vpN|.cpN]\n",
                   std::string(item).c_str());
      return 2;
    }
    Layout l{std::atoi(f[0].c_str()), std::atoi(f[1].c_str()), std::atoi(f[2].c_str()), std::atoi(f[3].c_str()), f[4],
             tail == "ep" ? std::atoi(f[5].c_str() + 2) : 0};
    if (tail == "vp") l.vp = std::atoi(f[5].c_str() + 2);
    if (tail == "cp") l.cp = std::atoi(f[5].c_str() + 2);
    jobspec::PlanInput in = jobspec::PlanOfSpec(SpecOf(l, data, steps));
    auto cost = jobspec::PredictStep(in, *cluster);
    if (!cost.ok()) {
      std::fprintf(stderr, "plan_check: %s\n", std::string(cost.status().message()).c_str());
      return 1;
    }
    rows.push_back({l, Measure(l, data, steps), cost->step});
    std::printf("%-28s measured %8.1f ms  predicted %8.1f ms  error %+6.1f%%\n", l.Name().c_str(),
                rows.back().measured * 1e3, rows.back().predicted * 1e3,
                100 * (rows.back().predicted / rows.back().measured - 1));
    std::fflush(stdout);
  }
  bool ok = true;
  for (const Row& r : rows) ok = ok && std::abs(r.predicted / r.measured - 1) <= 0.20;
  // The orders agree: every pair whose measured times differ by more than the 20% the
  // predictions may be off is ordered alike by the prediction.
  int pairs = 0, agree = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    for (size_t j = i + 1; j < rows.size(); ++j) {
      const double a = rows[i].measured, b = rows[j].measured;
      if (std::max(a, b) < 1.2 * std::min(a, b)) continue;
      ++pairs;
      if ((a < b) == (rows[i].predicted < rows[j].predicted)) ++agree;
    }
  }
  std::printf("within 20%%: %s; order: %d of %d clearly separated pairs agree\n", ok ? "every layout" : "NOT all",
              agree, pairs);
  return ok && agree == pairs ? 0 : 1;
}
