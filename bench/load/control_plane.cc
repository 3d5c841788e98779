#include "bench/load/control_plane.h"

#include <grpcpp/grpcpp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "bench/load/clients.h"
#include "bench/load/fleet.h"
#include "bench/load/recorder.h"
#include "bench/load/stand_in.h"
#include "bench/load/timer.h"
#include "bench/load/users.h"
#include "common/paging.h"
#include "common/status.h"
#include "common/grpc_util.h"
#include "common/security.h"
#include "gantry/v1/coordinator.grpc.pb.h"
#include "shardserver/client/shard_client.h"

namespace gantry::load {
namespace {

namespace fs = std::filesystem;

std::string Mb(int64_t bytes) { return absl::StrFormat("%.1f MB", static_cast<double>(bytes) / 1e6); }

}  // namespace

absl::StatusOr<ControlPlaneReport> RunControlPlaneLoad(const ControlPlaneOptions& o) {
  ControlPlaneReport rep;
  rep.options = o;
  if (o.workers < 1 || o.jobs < 1 || o.shard_servers < 1 || o.steps < 1 || o.checkpoint_every < 1 ||
      o.submit_rate <= 0 || o.part_bytes < 1) {
    return absl::InvalidArgumentError("workers, jobs, shard servers, steps, checkpoint_every, submit_rate and "
                                      "part_bytes must be positive");
  }
  // As the daemons do (common/daemon.cc): this process's gRPC takes Abseil mutexes on every
  // message of 1,000 streams, and it shares the machine with the coordinator.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // A stream and a connection per worker, in this process and in the coordinator: raise the
  // descriptor limit to its ceiling (the daemons inherit it).
  struct rlimit nofile;
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  std::string dir = o.dir;
  const bool own_dir = dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/control_plane_load.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return absl::UnavailableError("mkdtemp failed");
    dir = tmpl;
  }
  struct Cleanup {
    std::vector<DaemonProcess>* daemons;
    std::string dir;
    bool remove;
    ~Cleanup() {
      for (auto& d : *daemons) KillDaemon(d);
      std::error_code ec;
      if (remove) fs::remove_all(dir, ec);
    }
  };
  std::vector<DaemonProcess> daemons;  // [0] the coordinator, then the shard servers
  Cleanup cleanup{&daemons, dir, own_dir};
  const auto t_start = Clock::now();

  // Users and quotas: TLS, the cluster token and the principals file, in the environment the
  // daemons inherit, before this process makes a channel.
  std::optional<Users> users;
  if (o.users > 0 || o.tls) {
    auto u = SetUpUsers(o, dir);
    if (!u.ok()) return u.status();
    if (o.users > 0) users = *std::move(u);
  }

  const std::string coord_dir = (fs::path(dir) / "coordinator").string();
  auto coordinator_args = [&](int port) {
    return std::vector<std::string>{"--listen", absl::StrCat("127.0.0.1:", port), "--metrics_listen", "127.0.0.1:0",
                                    "--data_dir", coord_dir, "--worker_timeout_ms", std::to_string(o.worker_timeout_ms)};
  };
  {
    auto d = SpawnDaemon("coordinator", o.coordinator_bin, coordinator_args(0), dir);
    if (!d.ok()) return d.status();
    daemons.push_back(*d);
    if (auto s = WaitReady(daemons[0]); !s.ok()) return s;
  }
  const std::string coord_addr = daemons[0].address();
  for (int s = 0; s < o.shard_servers; ++s) {
    const std::string name = absl::StrCat("shardserver", s);
    auto d = SpawnDaemon(name, o.shardserver_bin,
                         {"--listen", "127.0.0.1:0", "--metrics_listen", "127.0.0.1:0", "--data_dir",
                          (fs::path(dir) / name).string(), "--coordinator", coord_addr},
                         dir);
    if (!d.ok()) return d.status();
    daemons.push_back(*d);
  }
  for (size_t i = 1; i < daemons.size(); ++i) {
    if (auto s = WaitReady(daemons[i]); !s.ok()) return s;
  }
  // Jobs are placed once the shard servers have registered (else they would wait out the
  // coordinator's grace period, or run without checkpoints).
  {
    auto stub = v1::Coordinator::NewStub(MakeChannel(coord_addr));
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    for (;;) {
      v1::ListShardServersResponse resp;
      auto ctx = ContextWithDeadline(5);
      if (stub->ListShardServers(ctx.get(), v1::ListShardServersRequest(), &resp).ok() &&
          resp.shard_servers_size() == o.shard_servers) {
        break;
      }
      if (Clock::now() > deadline) return absl::DeadlineExceededError("the shard servers did not register within 60 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling for a state, with a deadline
    }
  }

  Recorder rec;
  Timer timer;
  auto fleet = std::make_unique<Fleet>(o, coord_addr, &rec, &timer);
  auto clients = std::make_unique<Clients>(o, coord_addr, &rec, fleet.get(), users ? &*users : nullptr);
  // The coordinator's view of the jobs, for the end of the run (not timed): a listing may be
  // larger than a CLI's channel takes.
  auto checker = v1::Coordinator::NewStub(MakeChannel(coord_addr, 1 << 30));
  // Every job of a listing, page by page.
  auto list_all = [&](v1::ListJobsRequest req) -> absl::StatusOr<std::vector<v1::Job>> {
    std::vector<v1::Job> jobs;
    RETURN_IF_ERROR(ReadEveryPage<v1::ListJobsResponse>(
        req,
        [&](const v1::ListJobsRequest& r, v1::ListJobsResponse* resp) {
          return FromGrpc(checker->ListJobs(ContextWithDeadline(60).get(), r, resp));
        },
        [&](v1::ListJobsResponse& resp) {
          for (auto& j : *resp.mutable_jobs()) jobs.push_back(std::move(j));
        }));
    return jobs;
  };
  auto succeeded = [&]() -> absl::StatusOr<int64_t> {
    v1::ListJobsRequest req;
    req.set_state(v1::SUCCEEDED);
    req.set_brief(true);
    auto jobs = list_all(req);
    if (!jobs.ok()) return jobs.status();
    return static_cast<int64_t>(jobs->size());
  };
  auto last_progress = Clock::now();
  auto progress = [&](const char* what, bool now = false) {
    if (!o.progress || (!now && Clock::now() - last_progress < std::chrono::seconds(5))) return;
    last_progress = Clock::now();
    std::fprintf(stderr, "[%6.1f s] %s: %d attached, %d submitted, %lld placed, %lld run; coordinator rss %s\n",
                 Seconds(Clock::now() - t_start), what, fleet->Attached(), clients->Acked(),
                 static_cast<long long>(fleet->Placements()), static_cast<long long>(fleet->Completed()),
                 daemons[0].pid > 0 ? Mb(MemoryOf(daemons[0].pid).rss).c_str() : "-");
  };
  auto cpu = [&] {
    double shard = 0;
    for (size_t i = 1; i < daemons.size(); ++i) shard += CpuSecondsOf(daemons[i].pid);
    return std::make_tuple(CpuSecondsOf(daemons[0].pid), CpuSecondsOf(::getpid()), shard);
  };

  // The fleet attaches, then the load begins.
  fleet->Start();
  if (!fleet->WaitAttached(o.workers, 120)) {
    return absl::DeadlineExceededError(absl::StrCat("only ", fleet->Attached(), " of ", o.workers,
                                                    " workers attached within 120 s"));
  }
  const auto cpu0 = cpu();
  const auto t_load = Clock::now();
  clients->Start();

  // The steady phase: until every job is submitted and restart_at of them have run.
  const double target = o.restart_at > 0 ? o.restart_at : 1.0;
  const int64_t want_done = std::min<int64_t>(o.jobs, static_cast<int64_t>(std::ceil(target * o.jobs)));
  int64_t max_queued = 0;
  const auto phase_deadline = t_load + std::chrono::seconds(120) +
                              std::chrono::milliseconds(static_cast<int64_t>(20000.0 * o.jobs / o.submit_rate));
  for (;;) {
    const int acked = clients->Acked();
    max_queued = std::max<int64_t>(max_queued, acked - fleet->Placements());
    if (acked >= o.jobs && fleet->Completed() >= want_done) break;
    if (Clock::now() > phase_deadline) {
      return absl::DeadlineExceededError(absl::StrCat("steady phase: ", acked, " of ", o.jobs, " jobs submitted, ",
                                                      fleet->Completed(), " run within its deadline; coordinator log:\n",
                                                      Tail(daemons[0].log)));
    }
    progress("steady");
    fleet->Nap(0.05);  // sampling the queue's length, and the phase's end
  }
  const auto t_steady_end = Clock::now();
  rep.steady_seconds = Seconds(t_steady_end - t_load);
  {
    const auto cpu1 = cpu();
    rep.coordinator_cpu_seconds = std::get<0>(cpu1) - std::get<0>(cpu0);
    rep.fleet_cpu_seconds = std::get<1>(cpu1) - std::get<1>(cpu0);
    rep.shard_cpu_seconds = std::get<2>(cpu1) - std::get<2>(cpu0);
  }
  rep.steady = rec.Stats(kSteady, rep.steady_seconds);
  rep.placements = fleet->Placements();
  rep.placements_per_second = static_cast<double>(rep.placements) / rep.steady_seconds;
  {
    auto times = fleet->PlacementTimes();
    std::sort(times.begin(), times.end());
    const double window = std::min(5.0, rep.steady_seconds);
    size_t lo = 0;
    for (size_t hi = 0; hi < times.size(); ++hi) {
      while (times[hi] - times[lo] > window) ++lo;
      rep.peak_placements_per_second =
          std::max(rep.peak_placements_per_second, static_cast<double>(hi - lo + 1) / window);
    }
    std::vector<double> waits;
    const auto submitted = clients->SubmitTimes();
    for (const auto& [i, at] : fleet->FirstPlaced()) waits.push_back(Seconds(at - submitted[static_cast<size_t>(i)]));
    std::sort(waits.begin(), waits.end());
    if (!waits.empty()) {
      rep.submit_to_placed_p50_ms = waits[waits.size() / 2] * 1e3;
      rep.submit_to_placed_p99_ms = waits[std::min(waits.size() - 1, waits.size() * 99 / 100)] * 1e3;
    }
  }
  rep.max_queued = max_queued;
  {
    std::ifstream load("/proc/loadavg");  // size 0 to stat(): read as a stream
    load >> rep.machine_load;
  }
  rep.coordinator_memory = MemoryOf(daemons[0].pid);
  rep.rocksdb_bytes = DirBytes(coord_dir + "/db");
  progress("steady phase over", true);

  double t_after_start = 0;
  if (o.restart_at > 0) {
    // The coordinator crashes with its state, and comes back on its port.
    rec.SetPhase(kOutage);
    clients->RetrySubmits();
    const auto t_kill = Clock::now();
    fleet->MarkKill(t_kill);
    const int port = daemons[0].port;
    KillDaemon(daemons[0]);
    auto d = SpawnDaemon("coordinator", o.coordinator_bin, coordinator_args(port), dir);
    if (!d.ok()) return d.status();
    daemons[0] = *d;
    const auto t_spawn = Clock::now();
    if (auto s = WaitReady(daemons[0]); !s.ok()) return s;
    if (daemons[0].port != port) return absl::InternalError("the coordinator came back on another port");
    rep.restarted = true;
    rep.ready_s = Seconds(Clock::now() - t_kill);
    rec.SetPhase(kAfter);
    t_after_start = Seconds(Clock::now() - t_start);
    if (!fleet->WaitReattached(o.workers, 120)) {
      return absl::DeadlineExceededError(absl::StrCat("only ", fleet->Reattached(), " of ", o.workers,
                                                      " workers re-attached within 120 s of the restart"));
    }
    const auto t_all = fleet->LastReattach();
    rep.reattached_s = Seconds(t_all - t_spawn);
    rep.reattached_from_kill_s = Seconds(t_all - t_kill);
    progress("re-attached", true);
    const auto interrupted = fleet->Interrupted();
    rep.interrupted_jobs = static_cast<int>(interrupted.size());
    const auto resume_deadline = Clock::now() + std::chrono::seconds(120);
    for (;;) {
      const auto resumed = fleet->Resumed();
      int n = 0;
      Clock::time_point last = t_kill;
      for (const auto& job : interrupted) {
        auto it = resumed.find(job);
        if (it == resumed.end()) continue;
        ++n;
        last = std::max(last, it->second);
      }
      if (!resumed.empty()) {
        Clock::time_point any = Clock::time_point::max();
        for (const auto& [job, at] : resumed) any = std::min(any, at);
        rep.first_resumed_s = Seconds(any - t_kill);
      }
      if (n == static_cast<int>(interrupted.size())) {
        rep.all_resumed_s = Seconds(last - t_kill);
        break;
      }
      if (Clock::now() > resume_deadline) {
        return absl::DeadlineExceededError(absl::StrCat(n, " of ", interrupted.size(),
                                                        " interrupted jobs stepped again within 120 s of the restart"));
      }
      fleet->Nap(0.05);  // sampling the jobs that stepped again
    }
    progress("interrupted jobs stepped again", true);
  }

  // To the end: every job run, and SUCCEEDED as the coordinator lists them.
  {
    const auto deadline = Clock::now() + std::chrono::seconds(300);
    for (;;) {
      if (fleet->Completed() >= o.jobs && clients->Acked() >= o.jobs) {
        auto n = succeeded();
        if (n.ok() && *n >= o.jobs) break;
      }
      if (Clock::now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("jobs not all SUCCEEDED 300 s after the steady phase (",
                                                        fleet->Completed(), " run); coordinator log:\n",
                                                        Tail(daemons[0].log)));
      }
      progress("finishing");
      fleet->Nap(0.2);  // sampling the jobs' ends
    }
  }
  const auto t_end = Clock::now();
  if (rep.restarted) rep.after_restart = rec.Stats(kAfter, Seconds(t_end - t_start) - t_after_start);
  clients->Stop();
  fleet->StopUploads();
  timer.Stop();
  fleet->Shutdown();
  rep.coordinator_memory_end = MemoryOf(daemons[0].pid);
  rep.rocksdb_bytes_end = DirBytes(coord_dir + "/db");

  // The end state, from the coordinator: every acknowledged job SUCCEEDED, whole.
  const std::vector<std::string> job_of = clients->JobOf();
  for (const auto& v : clients->Violations()) rep.violations.push_back(v);
  for (const auto& v : fleet->Violations()) rep.violations.push_back(v);
  std::map<std::string, v1::Job> final;
  {
    auto jobs = list_all(v1::ListJobsRequest());
    if (!jobs.ok()) return absl::UnavailableError(absl::StrCat("final ListJobs: ", jobs.status().message()));
    for (auto& j : *jobs) final[j.id()] = std::move(j);
  }
  std::set<std::string> acked;
  for (size_t i = 0; i < job_of.size(); ++i) {
    if (job_of[i].empty()) {
      rep.violations.push_back(absl::StrCat("spec load-", i, " was never accepted"));
      continue;
    }
    acked.insert(job_of[i]);
    auto it = final.find(job_of[i]);
    if (it == final.end()) {
      rep.violations.push_back(absl::StrCat("lost: job ", job_of[i], " (load-", i, ") was accepted and is not listed"));
      continue;
    }
    const v1::Job& j = it->second;
    if (j.state() != v1::SUCCEEDED) {
      rep.violations.push_back(absl::StrCat("job ", j.id(), " ended ", v1::JobState_Name(j.state()), ": ", j.reason()));
    } else if (j.steps_done() > o.steps || j.checkpoint_step() < o.checkpoint_every) {
      // steps_done is the last step reported: a job resumed from its last step's checkpoint
      // after the restart runs no step again. checkpoint_step is the last commit the
      // coordinator heard of (the shard servers' own listing is checked below).
      rep.violations.push_back(absl::StrCat("job ", j.id(), " SUCCEEDED at step ", j.steps_done(), " with checkpoint ",
                                            j.checkpoint_step()));
    } else {
      ++rep.jobs_succeeded;
    }
    if (j.generation() > (rep.restarted ? 2 : 1)) {
      rep.violations.push_back(absl::StrCat("job ", j.id(), " placed ", j.generation(), " times"));
    }
  }
  rep.jobs_submitted = static_cast<int64_t>(acked.size());
  for (const auto& [id, j] : final) {
    if (!acked.count(id)) rep.violations.push_back(absl::StrCat("job ", id, " listed, never accepted by SubmitJob"));
  }
  rep.watched_jobs = clients->Watched();
  std::tie(rep.list_bytes, rep.list_full_bytes) = clients->ListBytes();
  // Legitimate only for a job whose ranks had all ended before the SIGKILL but whose
  // SUCCEEDED was not stored yet (a client that had seen it would have made a violation).
  rep.jobs_run_twice = fleet->RanTwice();

  // The checkpoints on the shard servers: every job's whole, and a sample's bytes as written.
  {
    std::vector<std::string> servers;
    for (size_t i = 1; i < daemons.size(); ++i) servers.push_back(daemons[i].address());
    std::vector<std::string> ids(acked.begin(), acked.end());
    std::vector<std::string> errors;
    std::mutex mu;
    std::atomic<size_t> next{0};
    std::atomic<int64_t> committed{0}, verified{0}, bytes{0};
    const size_t stride = o.verify_jobs < 0 || o.verify_jobs >= static_cast<int>(ids.size())
                              ? 1
                              : std::max<size_t>(1, ids.size() / std::max(1, o.verify_jobs));
    std::vector<std::thread> threads;
    std::map<std::string, std::shared_ptr<v1::ShardServer::Stub>> stubs;
    for (const auto& s : servers) stubs[s] = v1::ShardServer::NewStub(MakeChannel(s));
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (size_t k = next++; k < ids.size(); k = next++) {
          const std::string& job = ids[k];
          std::vector<std::string> unreachable;
          const auto stored = shardserver::ListStoredCheckpoints(servers, job, &unreachable);
          std::vector<int64_t> steps;
          for (const auto& c : stored) steps.push_back(c.step);
          std::vector<int64_t> want;
          for (int s = o.checkpoint_every; s <= o.steps; s += o.checkpoint_every) want.push_back(s);
          if (steps != want) {
            std::lock_guard<std::mutex> l(mu);
            errors.push_back(absl::StrCat("job ", job, ": whole checkpoints of steps {", absl::StrJoin(steps, ", "),
                                          "} on the shard servers, want {", absl::StrJoin(want, ", "), "}",
                                          unreachable.empty() ? "" : absl::StrCat(" (", unreachable.front(), ")")));
            continue;
          }
          committed += static_cast<int64_t>(stored.size());
          if (k % stride != 0) continue;
          const auto jt = final.find(job);
          const int world = jt == final.end() ? 1 : std::max(1, jt->second.world_size());
          for (const auto& c : stored) {
            int slices = 0;
            for (const auto& [name, where] : c.files) slices += name.rfind("part-00000", 0) == 0;
            for (const auto& [name, where] : c.files) {
              std::string got;
              auto n = shardserver::ReadRange(*stubs[where.server], where.server, job, c.step, name, 0, 0,
                                        [&](const std::string& d) { got += d; });
              const std::string want_bytes = ExpectedFile(job, c.step, name, world, std::max(1, slices), o.part_bytes);
              if (!n.ok() || got != want_bytes) {
                std::lock_guard<std::mutex> l(mu);
                errors.push_back(absl::StrCat("job ", job, " step ", c.step, " file ", name, " on ", where.server, ": ",
                                              n.ok() ? absl::StrCat("read ", got.size(), " bytes unlike those written")
                                                     : std::string(n.status().message())));
                continue;
              }
              bytes += static_cast<int64_t>(got.size());
            }
            ++verified;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    rep.checkpoints_committed = committed;
    rep.checkpoints_verified = verified;
    rep.bytes_verified = bytes;
    for (size_t i = 0; i < errors.size() && i < 20; ++i) rep.violations.push_back(errors[i]);
    if (errors.size() > 20) rep.violations.push_back(absl::StrCat("... and ", errors.size() - 20, " more checkpoint errors"));
  }
  for (const auto& [method, what] : rec.FirstErrors()) {
    std::fprintf(stderr, "control_plane_load: first %s error: %s\n", method.c_str(), what.c_str());
  }
  clients.reset();
  fleet.reset();
  checker.reset();  // no connection left open: a daemon stops at once (else after its 5 s grace)
  for (size_t i = 0; i < daemons.size(); ++i) StopDaemon(daemons[i]);
  rep.total_seconds = Seconds(Clock::now() - t_start);
  return rep;
}

namespace {
const MethodStats* Find(const std::vector<MethodStats>& v, const std::string& m) {
  for (const auto& s : v) {
    if (s.method == m) return &s;
  }
  return nullptr;
}
std::string Table(const std::vector<MethodStats>& v, const std::map<std::string, double>& targets) {
  std::string out = absl::StrFormat("  %-24s %9s %8s %9s %9s %9s %7s  %s\n", "method", "calls", "per s", "p50 ms",
                                    "p99 ms", "max ms", "errors", "target (p99)");
  for (const auto& s : v) {
    auto t = targets.find(s.method);
    absl::StrAppend(&out, absl::StrFormat("  %-24s %9d %8.1f %9.2f %9.2f %9.1f %7d  %s\n", s.method, s.calls, s.rate,
                                          s.p50_ms, s.p99_ms, s.max_ms, s.errors,
                                          t == targets.end() ? ""
                                          : s.calls > 0 && s.p99_ms <= t->second
                                              ? absl::StrFormat("<= %.0f ms: met", t->second)
                                              : absl::StrFormat("<= %.0f ms: NOT met", t->second)));
  }
  return out;
}
const std::map<std::string, double>& Targets() {
  static const auto* t = new std::map<std::string, double>{{"Heartbeat", 50}, {"SubmitJob", 50}, {"ListJobs", 200}};
  return *t;
}
}  // namespace

bool TargetsMet(const ControlPlaneReport& r) {
  for (const auto& [m, limit] : Targets()) {
    const MethodStats* s = Find(r.steady, m);
    if (s == nullptr || s->calls == 0 || s->p99_ms > limit) return false;
  }
  if (r.restarted && r.reattached_s > 10) return false;
  return r.violations.empty();
}

std::string FormatReport(const ControlPlaneReport& r) {
  const auto& o = r.options;
  std::string out = absl::StrFormat(
      "control-plane load: %d workers (an Attach stream and connection each, heartbeat every %d ms), %d jobs "
      "(SubmitJob at %.0f/s; %d steps of %d ms, a checkpoint every %d; dp 2 every %d), %d shard servers; ListJobs "
      "every %.2f s (a page of 50 brief jobs, as gantry jobs; a page of 1000 with specs every %.1f s), GetJob every %.2f s, ListWorkers every %.2f s, "
      "%d watchers\n",
      o.workers, o.heartbeat_ms, o.jobs, o.submit_rate, o.steps, o.step_ms, o.checkpoint_every, o.multi_rank_every,
      o.shard_servers, o.list_jobs_period_s, o.list_jobs_full_period_s, o.get_job_period_s, o.list_workers_period_s,
      o.watchers);
  if (o.users > 0) {
    absl::StrAppend(&out, absl::StrFormat(
        "users%s: TLS, the cluster token and a principals file of %d users in %d teams (%s); SubmitJob, the brief "
        "ListJobs, GetJob and ListWorkers as users, the rest as the cluster token\n",
        o.quotas ? " and quotas" : "", o.users, o.teams,
        o.quotas ? absl::StrCat("a quota of ", (o.workers + o.teams - 1) / o.teams, " cpu slots each, one cohort")
                 : std::string("no quotas")));
  } else if (o.tls) {
    absl::StrAppend(&out, "TLS and the cluster token, no principals file: every call an admin\n");
  } else {
    absl::StrAppend(&out, "no TLS, token or principals: every call the laptop's admin\n");
  }
  absl::StrAppend(&out, absl::StrFormat("steady phase: %.1f s (until all %d jobs were submitted and %.0f%% had run); "
                                        "client-side latency, open loop:\n",
                                        r.steady_seconds, o.jobs, 100 * (o.restart_at > 0 ? o.restart_at : 1.0)));
  absl::StrAppend(&out, Table(r.steady, Targets()));
  absl::StrAppend(&out, absl::StrFormat(
      "placements: %d jobs in %.1f s = %.1f/s (best 5 s: %.1f/s); submit to placed p50 %.0f ms, p99 %.0f ms; "
      "most queued %d; largest ListJobs %s (full: %s)\n",
      r.placements, r.steady_seconds, r.placements_per_second, r.peak_placements_per_second, r.submit_to_placed_p50_ms,
      r.submit_to_placed_p99_ms, r.max_queued, Mb(r.list_bytes), Mb(r.list_full_bytes)));
  absl::StrAppend(&out, absl::StrFormat(
      "coordinator: rss %s (peak %s) at the kill; RocksDB %s at the kill, %s at the end; CPU in the steady phase: "
      "coordinator %.0f%%, this process (fleet and clients) %.0f%%, shard servers %.0f%% of one core; machine load "
      "average %.1f on %ld CPUs\n",
      Mb(r.coordinator_memory.rss), Mb(r.coordinator_memory.peak), Mb(r.rocksdb_bytes), Mb(r.rocksdb_bytes_end),
      100 * r.coordinator_cpu_seconds / r.steady_seconds, 100 * r.fleet_cpu_seconds / r.steady_seconds,
      100 * r.shard_cpu_seconds / r.steady_seconds, r.machine_load, ::sysconf(_SC_NPROCESSORS_ONLN)));
  if (r.restarted) {
    absl::StrAppend(&out, absl::StrFormat(
        "restart (SIGKILL, then the same data dir and port): serving %.2f s after the kill; all %d workers "
        "re-attached %.2f s after the new process started (%.2f s after the kill; target <= 10 s: %s); %d jobs "
        "were running: the first job placed again stepped %.2f s after the kill, all of them by %.2f s\n",
        r.ready_s, o.workers, r.reattached_s, r.reattached_from_kill_s, r.reattached_s <= 10 ? "met" : "NOT met",
        r.interrupted_jobs, r.first_resumed_s, r.all_resumed_s));
    absl::StrAppend(&out, absl::StrFormat("  %d jobs had ended on their workers but not yet in the coordinator's store at "
                                          "the kill, and ran again\n",
                                          r.jobs_run_twice));
    absl::StrAppend(&out, "after the restart:\n", Table(r.after_restart, {}));
    absl::StrAppend(&out, absl::StrFormat("coordinator rss at the end %s\n", Mb(r.coordinator_memory_end.rss)));
  }
  absl::StrAppend(&out, absl::StrFormat(
      "checks: %d jobs accepted, %d SUCCEEDED with every step and their last checkpoint; %d checkpoints whole on "
      "the shard servers, %d read back (%s, identical); %d jobs watched start to end; %d violations\n",
      r.jobs_submitted, r.jobs_succeeded, r.checkpoints_committed, r.checkpoints_verified, Mb(r.bytes_verified),
      r.watched_jobs, r.violations.size()));
  for (const auto& v : r.violations) absl::StrAppend(&out, "  VIOLATION: ", v, "\n");
  absl::StrAppend(&out, absl::StrFormat("total %.1f s; targets: %s\n", r.total_seconds, TargetsMet(r) ? "met" : "NOT met"));
  return out;
}

}  // namespace gantry::load
