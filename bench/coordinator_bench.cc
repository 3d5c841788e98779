// The coordinator's responsiveness while checkpoints commit (issue 18): ListJobs latency with
// the coordinator idle, against ListJobs latency while J checkpoint commits of >= 50 MB each
// are in flight.
//
// Real daemons on loopback, port 0: one gantry-coordinator and S gantry-shardservers, started
// as processes. J workers attach over gRPC the way gantry-worker does (register, heartbeat,
// step reports, checkpoint parts), one job each. Each round, every worker uploads its
// checkpoint of the next step: a part of MB/S MB on each shard server, plus manifest.json
// and config.json with the first, written and not committed, as a rank does. Then all J
// send their CheckpointPart together, and the coordinator commits each checkpoint on its
// servers. With checkpoint.keep (--keep, 2) it then lists the job's checkpoints on every
// server and deletes the oldest. A commit is in flight from its CheckpointPart until its
// "checkpoint of step N committed" event reaches the job's WatchJob stream. While any is in
// flight, a client calls ListJobs every --period-us on one channel, open loop (see
// ProbeListJobs).
// The idle figure is the same client's with no commit going on: --idle calls in each
// round, after the uploads once their bytes are on disk (sync) and the daemons are quiet
// (WaitQuiet: the shard servers' flushes and the last round's deletes are over), and
// before the parts are sent. Idle and
// in-flight samples thus alternate through the run, and this shared machine's slow spells
// fall on both alike.
// Target: in-flight p99 <= 2x idle p99.
//   coordinator_bench [--jobs 4] [--mb 64] [--shard-servers 2] [--rounds 20] [--idle 150] [--keep 2]
//                     [--period-us 2000] [--pin] [--coordinator BIN] [--shardserver BIN] [--dir DIR]
// --pin puts the coordinator and this client on CPU 0 and the shard servers on CPU 1, as
// if they ran on other machines: on a 2-CPU box the shard servers' RocksDB work during a
// commit otherwise takes CPU from the coordinator, whatever the coordinator does.
// BIN default to this build's daemons; pointing them at another build's binaries measures
// that build with the same client.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/load/daemon_process.h"
#include "common/file_util.h"
#include "common/grpc_util.h"
#include "common/security.h"
#include "gantry/v1/coordinator.grpc.pb.h"
#include "shardserver/client/shard_client.h"

namespace {

namespace fs = std::filesystem;
namespace v1 = gantry::v1;
namespace load = gantry::load;
using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "coordinator_bench: %s\n", why.c_str());
  std::exit(1);
}

std::string Flag(int argc, char** argv, const char* name, const std::string& def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], name)) return argv[i + 1];
  }
  return def;
}
int IntFlag(int argc, char** argv, const char* name, int def) {
  return std::atoi(Flag(argc, argv, name, std::to_string(def)).c_str());
}

using load::DaemonProcess;

// A daemon run as a child process (bench/load/daemon_process.h), pinned to cpu with --pin.
DaemonProcess Spawn(const std::string& name, std::vector<std::string> args, const std::string& dir, int cpu) {
  const std::string binary = args.front();
  args.erase(args.begin());
  auto d = load::SpawnDaemon(name, binary, std::move(args), dir, cpu);
  if (!d.ok()) Die(std::string(d.status().message()));
  return *std::move(d);
}

void WaitUntilReady(DaemonProcess& d) {
  if (absl::Status s = load::WaitReady(d); !s.ok()) Die(std::string(s.message()));
}

// One attached worker, as gantry-worker attaches: a bidi stream, heartbeats every second.
class Worker {
 public:
  Worker(v1::Coordinator::Stub* stub, const std::string& host) {
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::hours(2));
    stream_ = stub->Attach(&ctx_);
    v1::WorkerMessage reg;
    reg.mutable_register_()->set_host(host);
    reg.mutable_register_()->set_device_kind("cpu");
    reg.mutable_register_()->set_device_count(1);
    Send(reg);
    reader_ = std::thread([this] {
      v1::CoordinatorMessage m;
      while (stream_->Read(&m)) {
        std::lock_guard<std::mutex> l(mu_);
        in_.push_back(m);
        cv_.notify_all();
      }
      std::lock_guard<std::mutex> l(mu_);
      closed_ = true;
      cv_.notify_all();
    });
    heartbeat_ = std::thread([this] {
      std::unique_lock<std::mutex> l(mu_);
      while (!stop_) {
        cv_.wait_for(l, std::chrono::seconds(1), [&] { return stop_; });
        if (stop_) break;
        l.unlock();
        v1::WorkerMessage hb;
        hb.mutable_heartbeat()->set_time_unix_ms(gantry::NowUnixMs());
        Send(hb);
        l.lock();
      }
    });
  }
  ~Worker() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    heartbeat_.join();
    {
      std::lock_guard<std::mutex> l(write_mu_);
      stream_->WritesDone();
    }
    ctx_.TryCancel();
    reader_.join();
    (void)stream_->Finish();
  }
  void Send(const v1::WorkerMessage& m) {
    std::lock_guard<std::mutex> l(write_mu_);
    if (!stream_->Write(m)) Die("the coordinator closed a worker's attach stream");
  }
  v1::Assignment WaitAssignment() {
    std::unique_lock<std::mutex> l(mu_);
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    for (;;) {
      for (auto it = in_.begin(); it != in_.end(); ++it) {
        if (it->has_assign()) {
          v1::Assignment a = it->assign();
          in_.erase(it);
          return a;
        }
      }
      if (closed_) Die("the coordinator closed a worker's attach stream before assigning it a job");
      if (cv_.wait_until(l, deadline) == std::cv_status::timeout) Die("no assignment within 60 s");
    }
  }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>> stream_;
  std::mutex write_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::CoordinatorMessage> in_;
  bool closed_ = false, stop_ = false;
  std::thread reader_, heartbeat_;
};

// The checkpoint events of the jobs, from one WatchJob stream per job: the last step whose
// commit ended (committed or not), per job.
class CommitEvents {
 public:
  CommitEvents(v1::Coordinator::Stub* stub, const std::vector<std::string>& jobs) {
    for (const auto& job : jobs) {
      auto ctx = std::make_unique<grpc::ClientContext>();
      ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::hours(2));
      v1::WatchJobRequest req;
      req.set_job_id(job);
      auto* raw = ctx.get();
      ctxs_.push_back(std::move(ctx));
      threads_.emplace_back([this, stub, raw, req] {
        auto reader = stub->WatchJob(raw, req);
        v1::JobEvent e;
        while (reader->Read(&e)) {
          const std::string& msg = e.message();
          if (msg.rfind("checkpoint of step ", 0) != 0) continue;
          const int64_t step = std::atoll(msg.c_str() + std::strlen("checkpoint of step "));
          std::lock_guard<std::mutex> l(mu_);
          done_[req.job_id()] = step;
          if (msg.find(" not committed") != std::string::npos) failures_.push_back(msg);
          cv_.notify_all();
        }
        (void)reader->Finish();
      });
    }
  }
  ~CommitEvents() {
    for (auto& c : ctxs_) c->TryCancel();
    for (auto& t : threads_) t.join();
  }
  // Jobs whose commit of `step` has not ended yet.
  int Outstanding(const std::vector<std::string>& jobs, int64_t step) {
    std::lock_guard<std::mutex> l(mu_);
    int n = 0;
    for (const auto& j : jobs) n += done_[j] < step;
    return n;
  }
  void Wait(const std::vector<std::string>& jobs, int64_t step) {
    std::unique_lock<std::mutex> l(mu_);
    const bool all = cv_.wait_for(l, std::chrono::seconds(120), [&] {
      for (const auto& j : jobs) {
        if (done_[j] < step) return false;
      }
      return true;
    });
    if (!all) Die(absl::StrCat("the commits of step ", step, " did not end within 120 s"));
  }
  std::vector<std::string> Failures() {
    std::lock_guard<std::mutex> l(mu_);
    return failures_;
  }

 private:
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, int64_t> done_;
  std::vector<std::string> failures_;
};

// ListJobs calls at a fixed rate, one every `period`, each without waiting for the ones
// before it (open loop). A call's latency runs from the time it was due, so a coordinator
// that stalls for 200 ms shows as 100 calls late by 200 ms down to 0, not as one slow call
// among thousands of fast ones: a back-to-back client would hide the stall it is measuring.
std::vector<double> ProbeListJobs(v1::Coordinator::Stub* stub, std::chrono::microseconds period,
                                  const std::function<bool(int64_t)>& keep_going) {
  struct Call {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    v1::ListJobsResponse resp;
    Clock::time_point due;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<double> out;
  std::string error;
  int in_flight = 0;
  const auto start = Clock::now();
  for (int64_t k = 0; keep_going(k); ++k) {
    const auto due = start + k * period;
    std::this_thread::sleep_until(due);  // pacing: the next call's time, not a wait for a state
    auto* call = new Call;
    call->due = due;
    call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    {
      std::lock_guard<std::mutex> l(mu);
      ++in_flight;
    }
    stub->async()->ListJobs(&call->ctx, &call->req, &call->resp, [&, call](grpc::Status s) {
      const double secs = std::chrono::duration<double>(Clock::now() - call->due).count();
      delete call;
      std::lock_guard<std::mutex> l(mu);
      if (s.ok()) {
        out.push_back(secs);
      } else if (error.empty()) {
        error = s.error_message();
      }
      --in_flight;
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return in_flight == 0; });  // every call has a deadline
  if (!error.empty()) Die(absl::StrCat("ListJobs: ", error));
  return out;
}

// Waits until the daemons are quiet: together at most one clock tick (10 ms) of CPU in
// each of 3 intervals of 300 ms in a row, so that the shard servers' background work
// (memtable flushes and compactions after the uploads, the last round's deletes) is over,
// not only waiting on the disk. Returns false if that did not happen within 60 s.
bool WaitQuiet(const std::vector<pid_t>& pids) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  auto total = [&] {
    int64_t t = 0;
    for (pid_t p : pids) t += load::CpuTicksOf(p);
    return t;
  };
  int64_t before = total();
  int quiet = 0;  // intervals in a row
  while (Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the sampling interval of a condition, with a deadline
    const int64_t now = total();
    quiet = now - before <= 1 ? quiet + 1 : 0;
    if (quiet == 3) return true;
    before = now;
  }
  return false;
}

struct Stats {
  size_t n = 0;
  double p50 = 0, p99 = 0, max = 0;
};
Stats Of(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))]; };
  s.n = v.size();
  s.p50 = at(0.50) * 1e3;
  s.p99 = at(0.99) * 1e3;
  s.max = v.back() * 1e3;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const int jobs = IntFlag(argc, argv, "--jobs", 4);
  const int mb = IntFlag(argc, argv, "--mb", 64);
  const int servers = IntFlag(argc, argv, "--shard-servers", 2);
  const int rounds = IntFlag(argc, argv, "--rounds", 20);
  const int keep = IntFlag(argc, argv, "--keep", 2);
  bool pin = false;
  for (int i = 1; i < argc; ++i) pin = pin || !std::strcmp(argv[i], "--pin");
  const int idle_n = IntFlag(argc, argv, "--idle", 150);
  const std::chrono::microseconds period(IntFlag(argc, argv, "--period-us", 2000));
  const std::string coordinator_bin = Flag(argc, argv, "--coordinator", GANTRY_COORDINATOR_BIN);
  const std::string shardserver_bin = Flag(argc, argv, "--shardserver", GANTRY_SHARDSERVER_BIN);
  std::string dir = Flag(argc, argv, "--dir", "");
  const bool own_dir = dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/coordinator_bench.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) Die(absl::StrCat("mkdtemp: ", std::strerror(errno)));
    dir = tmpl;
  }
  if (jobs < 1 || mb < 1 || servers < 1 || rounds < 1 || idle_n < 1 || period.count() < 1) {
    Die("--jobs, --mb, --shard-servers, --rounds, --idle and --period-us must be positive");
  }

  if (pin) {
    if (::sysconf(_SC_NPROCESSORS_ONLN) < 2) Die("--pin needs 2 CPUs");
    // This client beside the coordinator; the threads made later inherit it.
    if (!load::PinToCpu(0)) Die("--pin: cannot run on CPU 0");
  }
  // The daemons, before any thread of ours exists.
  // A worker is declared dead after 60 s without a heartbeat rather than 5: on a loaded
  // machine this process's heartbeat threads can be starved for seconds, and a job restarted
  // for that would end the run. Failure detection is not what is measured.
  DaemonProcess coord = Spawn("coordinator",
                       {coordinator_bin, "--listen", "127.0.0.1:0", "--metrics_listen", "127.0.0.1:0", "--data_dir",
                        (fs::path(dir) / "coordinator").string(), "--worker_timeout_ms", "60000"},
                       dir, pin ? 0 : -1);
  WaitUntilReady(coord);
  const std::string coord_addr = absl::StrCat("127.0.0.1:", coord.port);
  std::vector<DaemonProcess> shards;
  for (int s = 0; s < servers; ++s) {
    const std::string name = absl::StrCat("shardserver", s);
    shards.push_back(Spawn(name,
                           {shardserver_bin, "--listen", "127.0.0.1:0", "--metrics_listen", "127.0.0.1:0",
                            "--data_dir", (fs::path(dir) / name).string(), "--coordinator", coord_addr},
                           dir, pin ? 1 : -1));
  }
  for (auto& d : shards) WaitUntilReady(d);

  auto stub = v1::Coordinator::NewStub(gantry::MakeChannel(coord_addr));
  {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    for (;;) {
      v1::ListShardServersResponse resp;
      auto ctx = gantry::ContextWithDeadline(5);
      if (stub->ListShardServers(ctx.get(), v1::ListShardServersRequest(), &resp).ok() &&
          resp.shard_servers_size() == servers) {
        break;
      }
      if (Clock::now() > deadline) Die("the shard servers did not register within 60 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling for a state, with a deadline
    }
  }

  // Workers, then one job per worker.
  std::vector<std::unique_ptr<Worker>> workers;
  for (int w = 0; w < jobs; ++w) workers.push_back(std::make_unique<Worker>(stub.get(), absl::StrCat("bench-host-", w)));
  std::vector<std::string> job_ids;
  std::vector<v1::Assignment> assigned;
  for (int w = 0; w < jobs; ++w) {
    v1::SubmitJobRequest req;
    req.set_spec_yaml(absl::StrCat("name: bench-", w, "\n",
                                   "model: {n_layer: 1, n_head: 1, n_embd: 8, vocab_size: 16, seq_len: 8}\n"
                                   "data: {train: /nonexistent.bin}\n"
                                   "train: {steps: 1000000, micro_batch: 1, lr: 1.0e-3}\n"
                                   "checkpoint: {every: 1, dir: /unused, keep: ", keep, "}\n"));
    v1::SubmitJobResponse resp;
    auto ctx = gantry::ContextWithDeadline(10);
    if (auto s = stub->SubmitJob(ctx.get(), req, &resp); !s.ok()) Die(absl::StrCat("SubmitJob: ", s.error_message()));
    job_ids.push_back(resp.job_id());
  }
  // Each job went to one worker; which one is in the assignments.
  std::map<std::string, int> worker_of;
  for (int w = 0; w < jobs; ++w) {
    assigned.push_back(workers[w]->WaitAssignment());
    worker_of[assigned.back().job_id()] = w;
    if (assigned.back().shard_servers_size() != servers) {
      Die(absl::StrCat("assignment names ", assigned.back().shard_servers_size(), " shard servers, want ", servers));
    }
  }
  CommitEvents events(stub.get(), job_ids);

  // Each job's checkpoint files, written once: one part slice per shard server (MB/S MB of
  // incompressible bytes), manifest.json and config.json with the first slice.
  const int64_t slice = (int64_t{mb} << 20) / servers;
  std::vector<std::string> part_names;
  for (int s = 0; s < servers; ++s) part_names.push_back(absl::StrFormat("part-00000-%03d.safetensors", s));
  std::string manifest = "{\"format\": \"gantry-sharded-1\", \"parts\": [";
  for (int s = 0; s < servers; ++s) absl::StrAppend(&manifest, s ? ", " : "", "\"", part_names[s], "\"");
  absl::StrAppend(&manifest, "]}");
  const fs::path files_dir = fs::path(dir) / "files";
  fs::create_directories(files_dir);
  {
    std::string bytes(static_cast<size_t>(slice), '\0');
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      std::memcpy(&bytes[i], &x, 8);
    }
    for (const auto& p : part_names) {
      if (auto s = gantry::WriteFileAtomic((files_dir / p).string(), bytes); !s.ok()) Die(std::string(s.message()));
    }
    if (auto s = gantry::WriteFileAtomic((files_dir / "manifest.json").string(), manifest); !s.ok()) Die(std::string(s.message()));
    if (auto s = gantry::WriteFileAtomic((files_dir / "config.json").string(), "{}"); !s.ok()) Die(std::string(s.message()));
  }

  std::vector<double> idle, busy, windows;
  std::vector<pid_t> pids = {coord.pid};
  for (const auto& d : shards) pids.push_back(d.pid);
  int never_quiet = 0;
  auto shard_ticks = [&] {
    int64_t t = 0;
    for (const auto& d : shards) t += load::CpuTicksOf(d.pid);
    return t;
  };
  // CPU the daemons used in a phase, as a share of its wall time.
  struct CpuShare {
    int64_t coord = 0, shard = 0;
    double seconds = 0;
    void add(int64_t c, int64_t s, Clock::duration d) {
      coord += c;
      shard += s;
      seconds += std::chrono::duration<double>(d).count();
    }
    std::string Print() const {
      const double tick = 1.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
      return absl::StrFormat("coordinator %.0f%%, shard servers %.0f%% of a CPU", 100 * coord * tick / seconds,
                             100 * shard * tick / seconds);
    }
  } idle_cpu, busy_cpu;
  auto append = [](std::vector<double>& to, const std::vector<double>& from) { to.insert(to.end(), from.begin(), from.end()); };
  for (int step = 1; step <= rounds; ++step) {
    // The ranks' uploads (not committed), all jobs at once, as ranks write asynchronously.
    std::vector<std::thread> uploads;
    std::vector<std::string> errors(jobs);
    for (int j = 0; j < jobs; ++j) {
      uploads.emplace_back([&, j] {
        const v1::Assignment& a = assigned[j];
        v1::WorkerMessage m;
        m.mutable_step()->set_job_id(a.job_id());
        m.mutable_step()->set_generation(a.generation());
        m.mutable_step()->mutable_report()->set_step(step);
        m.mutable_step()->mutable_report()->set_loss(1.0f);
        workers[worker_of[a.job_id()]]->Send(m);
        for (int s = 0; s < servers; ++s) {
          std::vector<std::string> files = {part_names[s]};
          if (s == 0) files.insert(files.end(), {"manifest.json", "config.json"});
          auto up = gantry::shardserver::UploadFiles(a.shard_servers(s), a.job_id(), step, files_dir.string(), files);
          if (!up.ok()) errors[j] = std::string(up.status().message());
        }
      });
    }
    for (auto& t : uploads) t.join();
    for (const auto& e : errors) {
      if (!e.empty()) Die(absl::StrCat("upload: ", e));
    }
    // The coordinator idle: once the uploads' bytes are on disk (the kernel's writeback
    // would otherwise take CPU during the idle window, not the in-flight one) and the
    // daemons are quiet (the shard servers' flushes and the last round's pruning over),
    // with the jobs placed and the workers heartbeating.
    ::sync();
    if (!WaitQuiet(pids)) ++never_quiet;
    const int64_t c0 = load::CpuTicksOf(coord.pid), s0 = shard_ticks();
    const auto i0 = Clock::now();
    append(idle, ProbeListJobs(stub.get(), period, [&](int64_t k) { return k < idle_n; }));
    idle_cpu.add(load::CpuTicksOf(coord.pid) - c0, shard_ticks() - s0, Clock::now() - i0);
    // The commits: every job's CheckpointPart at once, then ListJobs until all have ended.
    const int64_t c1 = load::CpuTicksOf(coord.pid), s1 = shard_ticks();
    const auto t0 = Clock::now();
    for (int j = 0; j < jobs; ++j) {
      const v1::Assignment& a = assigned[j];
      v1::WorkerMessage m;
      v1::CheckpointPart* p = m.mutable_checkpoint_part();
      p->set_job_id(a.job_id());
      p->set_generation(a.generation());
      p->set_rank(0);
      p->set_step(step);
      p->set_bytes(slice * servers);
      p->set_manifest_json(manifest);
      for (int s = 0; s < servers; ++s) {
        auto add = [&](const std::string& name) {
          v1::PlacedFile* f = p->add_files();
          f->set_name(name);
          f->set_shard_server(a.shard_servers(s));
        };
        add(part_names[s]);
        if (s == 0) {
          add("manifest.json");
          add("config.json");
        }
      }
      workers[worker_of[a.job_id()]]->Send(m);
    }
    const auto give_up = t0 + std::chrono::seconds(120);
    append(busy, ProbeListJobs(stub.get(), period, [&](int64_t) {
      return events.Outstanding(job_ids, step) > 0 && Clock::now() < give_up;
    }));
    events.Wait(job_ids, step);
    windows.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    busy_cpu.add(load::CpuTicksOf(coord.pid) - c1, shard_ticks() - s1, Clock::now() - t0);
  }
  const auto failures = events.Failures();

  workers.clear();
  for (auto& d : shards) load::StopDaemon(d);
  load::StopDaemon(coord);
  if (own_dir) fs::remove_all(dir);
  if (!failures.empty()) Die(absl::StrCat("a commit failed: ", failures.front()));
  if (never_quiet > 0) {
    std::fprintf(stderr, "coordinator_bench: %d of %d idle windows began before the daemons were quiet (60 s)\n",
                 never_quiet, rounds);
  }
  if (busy.size() < 100) {
    std::fprintf(stderr, "coordinator_bench: only %zu ListJobs calls fell in the commit windows: p99 needs more "
                 "(raise --rounds)\n", busy.size());
  }

  const Stats i = Of(idle), b = Of(busy), w = Of(windows);
  std::printf("coordinator responsiveness: ListJobs latency (a call every %.1f ms, open loop), %d jobs each committing "
              "a %d MB checkpoint over %d shard servers, %d rounds%s\n",
              period.count() / 1e3, jobs, mb, servers, rounds,
              pin ? "; coordinator and client on CPU 0, shard servers on CPU 1" : "");
  std::printf("%-28s %8s %9s %9s %9s\n", "phase", "calls", "p50 ms", "p99 ms", "max ms");
  std::printf("%-28s %8zu %9.2f %9.2f %9.2f\n", "idle", i.n, i.p50, i.p99, i.max);
  std::printf("%-28s %8zu %9.2f %9.2f %9.2f\n", absl::StrCat(jobs, " commits in flight").c_str(), b.n, b.p50, b.p99,
              b.max);
  std::printf("commit window (parts sent to the last commit event): median %.1f ms, max %.1f ms\n", w.p50, w.max);
  std::printf("daemons' CPU: idle %s; in flight %s\n", idle_cpu.Print().c_str(), busy_cpu.Print().c_str());
  const double ratio = b.p99 / i.p99;
  std::printf("p99 in flight / idle p99: %.2fx (target <= 2x: %s)\n", ratio, ratio <= 2.0 ? "met" : "NOT met");
  return 0;
}
