// Long-context training with context parallelism (issue 49 item 4): a small Llama-shaped GPT
// trained a few steps at each sequence length T and cp on the cpu backend, the cp ranks threads
// of one process, each with its own trainer and Gloo groups over loopback (as
// context_parallel_training_test and plan_check run them); cp 1 is the one-process run (the
// cpu's unsplit attention, with its B·NH·T² probabilities). Each (T, cp) row runs in a child
// process of its own (this program again, --row), so that its peak RSS is its own.
//
// Per row: tokens/s (T tokens a step over the median step's seconds, the first step left out:
// it allocates), each rank's activation bytes (the model's own buffer: Trainer::memory()) and
// the ring's working memory (MemoryAccount::ring: what model::RingAttention and the widened
// copies of its 16-bit operands allocated), the process's peak RSS (all its ranks), and the
// planner's activation bytes per rank (jobspec::PlanRanks of the same spec: PlanInput::cp, the
// ring's share Plan::ring) beside the measured, with the ratio.
//
// A row is skipped, with the reason, where the planner says its ranks do not fit: each rank's
// planned total (parameters, gradients, AdamW's state, activations, the ring's blocks) against
// a 1/cp share of --max-gb (default: this machine's memory), 90% of it as `gantry plan` allows.
//
// --check: exit 1 unless every rank's measured bytes are the plan's exactly: the model's own
// buffer against the plan's activations less its ring (jobspec::LayoutChunks, exactly), and
// at cp > 1 the ring's measured working memory against Plan::ring (jobspec's RingCpBytes).
// The bound is 0 bytes. (The smoke ctests run T 256 at cp 1 and 2, and cp 2 in bf16.)
//
//   long_context_bench [--t 4096,8192,16384,32768] [--cp 1,2,4] [--steps 4] [--layers 2]
//                      [--embd 64] [--heads 4] [--kv-heads 2] [--ffn 176] [--vocab 256]
//                      [--precision fp32|bf16|fp16] [--max-gb G] [--threads N] [--check] [--plan-only]
#include <gloo/rendezvous/hash_store.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/groups.h"
#include "data/token_file.h"
#include "jobspec/job_spec.h"
#include "jobspec/planner.h"
#include "jobspec/ranks.h"
#include "kernels/threads.h"
#include "worker/train/trainer.h"

namespace {

using namespace gantry;

struct Options {
  std::vector<int> ts{4096, 8192, 16384, 32768};
  std::vector<int> cps{1, 2, 4};
  int steps = 4, layers = 2, embd = 64, heads = 4, kv_heads = 2, ffn = 176, vocab = 256;
  double max_gb = 0;  // 0: this machine's memory
  int threads = 0;    // OpenMP threads in all (each rank cores / cp); 0: every CPU
  bool check = false;
  bool plan_only = false;  // print the plan's columns and which rows would be skipped; run nothing
  std::string precision = "fp32";  // train.precision
  std::string data;   // the token file (the parent writes it, a --row child reads it)
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "long_context_bench: %s\n"
               "usage: long_context_bench [--t 4096,8192,...] [--cp 1,2,4] [--steps N>=2] [--layers N] [--embd C]\n"
               "       [--heads H] [--kv-heads K] [--ffn F] [--vocab V] [--precision fp32|bf16|fp16] [--max-gb G]\n"
               "       [--threads N] [--check] [--plan-only]\n",
               why.c_str());
  std::exit(2);
}

std::vector<int> Ints(const std::string& flag, const char* s) {
  std::vector<int> v;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const long x = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || x < 1) Usage(absl::StrCat(flag, ": '", item, "' is not a positive integer"));
    v.push_back(static_cast<int>(x));
  }
  if (v.empty()) Usage(absl::StrCat(flag, " is empty"));
  return v;
}

absl::StatusOr<jobspec::JobSpec> SpecOf(const Options& o, int T, int cp) {
  return jobspec::ParseJobSpec(absl::StrCat(
      "name: long-context\n"
      "model: {arch: llama, n_layer: ", o.layers, ", n_head: ", o.heads, ", n_kv_head: ", o.kv_heads,
      ", n_embd: ", o.embd, ", vocab_size: ", o.vocab, ", seq_len: ", T, ", ffn_hidden: ", o.ffn, "}\n"
      "data: {train: ", o.data, "}\n"
      "train: {steps: ", o.steps, ", micro_batch: 1, global_batch: 1, lr: 1.0e-3, warmup: 1, precision: ",
      o.precision, "}\n"
      "checkpoint: {every: 0, dir: /tmp/long-context-unused}\n"
      "parallel: {dp: 1, cp: ", cp, "}\n"));
}

// The child: trains one (T, cp) row, every rank a thread, and prints "RESULT <median step
// seconds> <rank 0's activation bytes> <rank 0's ring bytes> <rank 1's> ..." or "ERROR <why>".
int RunRow(const Options& o, int T, int cp) {
  auto spec = SpecOf(o, T, cp);
  if (!spec.ok()) {
    std::printf("ERROR %s\n", std::string(spec.status().message()).c_str());
    return 1;
  }
  const jobspec::Layout l{1, 1, 1, 1, cp};
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<double> seconds;
  std::vector<size_t> activations(static_cast<size_t>(cp)), ring(static_cast<size_t>(cp));
  std::vector<absl::Status> status(static_cast<size_t>(cp));
  std::vector<std::thread> threads;
  for (int r = 0; r < cp; ++r) {
    threads.emplace_back([&, r] {
      kernels::ConfigureThreads(o.threads, r, cp);
      train::TrainOptions t;
      FILE* null = std::fopen("/dev/null", "w");
      t.out = null;
      auto groups = comm::MakeGroups(r, l, comm::GlooGroups(store, {}));
      if (!groups.ok()) {
        status[r] = groups.status();
        std::fclose(null);
        return;
      }
      t.groups = groups->get();
      auto trainer = train::Trainer::Create(*spec, t);
      status[r] = trainer.ok() ? (*trainer)->Run() : trainer.status();
      if (r == 0 && status[r].ok()) {
        for (const train::StepReport& rep : (*trainer)->reports()) {
          if (rep.step > 1) seconds.push_back(rep.seconds);
        }
      }
      if (trainer.ok()) {
        const train::MemoryAccount m = (*trainer)->memory();
        activations[r] = m.activations;
        ring[r] = m.ring;
      }
      std::fclose(null);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < cp; ++r) {
    if (!status[r].ok()) {
      std::printf("ERROR rank %d: %s\n", r, std::string(status[r].message()).c_str());
      return 1;
    }
  }
  if (seconds.empty()) {
    std::printf("ERROR no timed steps (steps %d: the first is not timed)\n", o.steps);
    return 1;
  }
  std::sort(seconds.begin(), seconds.end());
  std::printf("RESULT %.6f", seconds[seconds.size() / 2]);
  for (int r = 0; r < cp; ++r) std::printf(" %zu %zu", activations[r], ring[r]);
  std::printf("\n");
  return 0;
}

// /proc/meminfo's `field` (MemTotal, MemAvailable) in bytes; 0 where it is not there.
double MemInfo(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  while (in >> key >> kb) {
    if (key == field + ":") return kb * 1024;
    in.ignore(1 << 10, '\n');
  }
  return 0;
}

// The 1, 5 and 15-minute load averages, as /proc/loadavg gives them.
std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return absl::StrCat(a, " ", b, " ", c);
}

struct Child {
  std::string out;   // its stdout
  long max_rss = 0;  // KiB
  int status = 0;
};

// Runs this program again with `args`, its stdout captured, its peak RSS from wait4.
Child Spawn(const std::vector<std::string>& args) {
  int fd[2];
  if (pipe(fd) != 0) {
    std::perror("long_context_bench: pipe");
    std::exit(1);
  }
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("long_context_bench: fork");
    std::exit(1);
  }
  if (pid == 0) {
    dup2(fd[1], 1);
    close(fd[0]);
    close(fd[1]);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    std::perror("long_context_bench: exec");
    _exit(127);
  }
  close(fd[1]);
  Child c;
  char buf[4096];
  for (ssize_t n; (n = read(fd[0], buf, sizeof buf)) > 0;) c.out.append(buf, static_cast<size_t>(n));
  close(fd[0]);
  struct rusage ru {};
  wait4(pid, &c.status, 0, &ru);
  c.max_rss = ru.ru_maxrss;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  int row_t = 0, row_cp = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--check" || f == "--plan-only") {
      (f == "--check" ? o.check : o.plan_only) = true;
      continue;
    }
    if (i + 1 >= argc) Usage(f + " needs a value");
    const char* v = argv[++i];
    auto one = [&] { return Ints(f, v)[0]; };
    if (f == "--t") o.ts = Ints(f, v);
    else if (f == "--cp") o.cps = Ints(f, v);
    else if (f == "--steps") o.steps = one();
    else if (f == "--layers") o.layers = one();
    else if (f == "--embd") o.embd = one();
    else if (f == "--heads") o.heads = one();
    else if (f == "--kv-heads") o.kv_heads = one();
    else if (f == "--ffn") o.ffn = one();
    else if (f == "--vocab") o.vocab = one();
    else if (f == "--threads") {
      char* end = nullptr;
      o.threads = static_cast<int>(std::strtol(v, &end, 10));
      if (*v == '\0' || *end != '\0' || o.threads < 0) Usage(absl::StrCat("--threads: '", v, "' is not a count >= 0"));
    } else if (f == "--max-gb") {
      char* end = nullptr;
      o.max_gb = std::strtod(v, &end);
      if (*v == '\0' || *end != '\0' || !(o.max_gb > 0)) Usage(absl::StrCat("--max-gb: '", v, "' is not a positive number"));
    }
    else if (f == "--data") o.data = v;
    else if (f == "--precision") {
      o.precision = v;
      if (o.precision != "fp32" && o.precision != "bf16" && o.precision != "fp16") {
        Usage(absl::StrCat("--precision: '", v, "' is not fp32, bf16 or fp16"));
      }
    }
    else if (f == "--row") {
      const std::vector<int> tc = Ints(f, v);
      if (tc.size() != 2) Usage("--row T,CP");
      row_t = tc[0], row_cp = tc[1];
    } else {
      Usage("unknown flag " + f);
    }
  }
  if (o.steps < 2) Usage("--steps must be >= 2 (the first step is not timed)");
  if (o.vocab > 65535) Usage("--vocab must fit the token file's uint16");
  if (row_t > 0) return RunRow(o, row_t, row_cp);

  const double cap = o.max_gb > 0 ? o.max_gb * 1e9 : MemInfo("MemTotal");
  // Random tokens: a step's time does not depend on them. Enough for every step of the longest T.
  char dir[] = "/tmp/long_context_bench.XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    std::perror("long_context_bench: mkdtemp");
    return 1;
  }
  o.data = absl::StrCat(dir, "/tokens.bin");
  const int max_t = *std::max_element(o.ts.begin(), o.ts.end());
  std::vector<uint16_t> tokens(static_cast<size_t>(max_t) * (o.steps + 1) + 1);
  uint64_t x = 88172645463325252ull;
  for (auto& t : tokens) x ^= x << 13, x ^= x >> 7, x ^= x << 17, t = static_cast<uint16_t>(x % o.vocab);
  if (auto s = data::WriteTokenFile(o.data, tokens); !s.ok()) {
    std::fprintf(stderr, "long_context_bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }

  std::printf("long_context_bench: llama %d layers, n_embd %d, %d heads over %d kv heads, ffn %d, vocab %d; "
              "micro-batch 1, %s, cpu backend; %d steps a row (the first not timed); memory cap %.1f GB%s "
              "(%.1f GB available now); load average %s\n",
              o.layers, o.embd, o.heads, o.kv_heads, o.ffn, o.vocab, o.precision.c_str(), o.steps, cap / 1e9,
              o.max_gb > 0 ? " (--max-gb)" : " (the machine's)", MemInfo("MemAvailable") / 1e9, LoadAverage().c_str());
  // activations/rank: each rank's model buffer; ring: rank 0's ring working memory, measured
  // and planned; planned: the planner's activations a rank (buffer and ring); plan/meas: that
  // over rank 0's buffer and ring; plan tot: the planned totals (state and activations) of the
  // process's cp ranks, beside its peak RSS.
  std::printf("%6s %3s %10s %9s %-28s %8s %12s %11s %10s %11s %11s\n", "T", "cp", "tokens/s", "step s",
              "activations/rank MB", "ring MB", "plan ring MB", "planned MB", "plan/meas", "peak RSS MB",
              "plan tot MB");
  bool ok = true;
  for (int T : o.ts) {
    for (int cp : o.cps) {
      std::printf("%6d %3d ", T, cp);
      auto spec = SpecOf(o, T, cp);
      if (!spec.ok()) {
        std::printf("skipped: %s\n", std::string(spec.status().message()).c_str());
        continue;
      }
      jobspec::PlanInput in = jobspec::PlanOfSpec(*spec);
      auto ranks = jobspec::PlanRanks(in);
      if (!ranks.ok()) {
        std::printf("skipped: the planner: %s\n", std::string(ranks.status().message()).c_str());
        continue;
      }
      // Every cp rank holds the same (one stage, one tp rank: the first plan's).
      const jobspec::Plan& rank = (*ranks)[0].bytes;
      const double share = cap / cp;
      if (rank.total() > 0.9 * share) {
        std::printf("skipped: planned %.1f MB a rank (activations %.1f MB) x %d ranks > 90%% of %.2f GB\n",
                    rank.total() / 1e6, rank.activations / 1e6, cp, cap / 1e9);
        continue;
      }
      if (o.plan_only) {
        std::printf("%10s %9s %-28s %8s %12.2f %11.2f %10s %11s %11.1f\n", "-", "-", "(not run: --plan-only)", "-",
                    rank.ring / 1e6, rank.activations / 1e6, "-", "-", cp * rank.total() / 1e6);
        continue;
      }
      std::fflush(stdout);
      const Child c = Spawn({argv[0], "--row", absl::StrCat(T, ",", cp), "--data", o.data, "--steps",
                             std::to_string(o.steps), "--layers", std::to_string(o.layers), "--embd",
                             std::to_string(o.embd), "--heads", std::to_string(o.heads), "--kv-heads",
                             std::to_string(o.kv_heads), "--ffn", std::to_string(o.ffn), "--vocab",
                             std::to_string(o.vocab), "--threads", std::to_string(o.threads), "--precision",
                             o.precision});
      double secs = 0;
      std::vector<size_t> act, ring;  // each rank's
      const size_t at = c.out.find("RESULT ");
      if (at != std::string::npos) {
        std::stringstream s(c.out.substr(at + 7));
        s >> secs;
        for (size_t a, b; s >> a >> b;) act.push_back(a), ring.push_back(b);
      }
      if (!WIFEXITED(c.status) || WEXITSTATUS(c.status) != 0 || act.size() != static_cast<size_t>(cp)) {
        std::string why = c.out.empty() ? "no output" : c.out;
        while (!why.empty() && why.back() == '\n') why.pop_back();
        std::printf("FAILED (%s%s)\n", WIFSIGNALED(c.status) ? absl::StrCat("signal ", WTERMSIG(c.status), ": ").c_str() : "",
                    why.c_str());
        ok = false;
        continue;
      }
      std::vector<std::string> each;
      for (size_t a : act) each.push_back(absl::StrFormat("%.2f", a / 1e6));
      std::printf("%10.0f %9.3f %-28s %8.2f %12.2f %11.2f %10.4f %11.1f %11.1f\n", T / secs, secs,
                  absl::StrJoin(each, "/").c_str(), ring[0] / 1e6, rank.ring / 1e6, rank.activations / 1e6,
                  rank.activations / static_cast<double>(act[0] + ring[0]), c.max_rss * 1024 / 1e6,
                  cp * rank.total() / 1e6);
      if (o.check) {
        for (int r = 0; r < cp; ++r) {
          if (static_cast<double>(act[r]) != rank.activations - rank.ring) {
            std::printf("  CHECK FAILED: rank %d's activation buffer is %zu bytes, planned %.0f (activations %.0f less "
                        "the ring's %.0f)\n",
                        r, act[r], rank.activations - rank.ring, rank.activations, rank.ring);
            ok = false;
          }
          if (static_cast<double>(ring[r]) != rank.ring) {
            std::printf("  CHECK FAILED: rank %d's ring allocated %zu bytes, planned %.0f\n", r, ring[r], rank.ring);
            ok = false;
          }
        }
      }
    }
  }
  std::string rm = absl::StrCat(dir, "/tokens.bin");
  std::remove(rm.c_str());
  rmdir(dir);
  std::printf("load average at the end %s\n", LoadAverage().c_str());
  if (o.check) std::printf("check (measured buffer and ring = planned, to the byte): %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
