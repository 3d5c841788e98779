// gantry-worker: attaches to the coordinator, runs the jobs it is assigned with the
// training core, reports every step, writes checkpoints to the shard servers.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <map>
#include <set>
#include <optional>
#include <thread>
#include <tuple>

#include "common/security.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/daemon.h"
#include "common/file_util.h"
#include "common/grpc_util.h"
#include "common/metrics.h"
#include "common/status.h"
#include "gantry/v1/coordinator.grpc.pb.h"
#include "kernels/matmul.h"
#include "kernels/threads.h"
#include "nlohmann/json.hpp"
#include "worker/agent/coordinator_store.h"
#include "worker/agent/param_client.h"
#include "worker/agent/shard_client.h"
#include "worker/parallel/gloo_communicator.h"
#include "worker/model/gpt.h"
#include "spec/job_spec.h"
#include "worker/train/checkpoint.h"
#include "worker/train/trainer.h"

DEFINE_string(coordinator, "127.0.0.1:7070", "coordinator address");
DEFINE_string(host, "", "host name to report (default: this machine's)");
DEFINE_string(work_dir, "", "scratch directory of the jobs (checkpoints stream to the shard servers from memory); required");
DEFINE_string(metrics_listen, "127.0.0.1:9490", "Prometheus /metrics address (port 0 picks one)");
DEFINE_int32(threads, 0, "CPU threads for training (0: all the process may use)");
DEFINE_string(device, "cpu", "where steps run: cpu, cuda or cuda:N (cuda: dp 1, ZeRO 0 jobs)");
DEFINE_int32(heartbeat_ms, 1000, "heartbeat period");
DEFINE_double(peak_flops, 0,
              "the device's peak FLOP/s for MFU; 0 on a CPU worker: the fp32 GEMM rate measured at start");
DEFINE_string(ready_file, "", "once the metrics endpoint is up, write {\"metrics_port\": M} here");
DEFINE_string(gloo_host, "127.0.0.1", "address this worker's collectives listen on (reachable by the other ranks)");
DEFINE_int32(collective_timeout_ms, 30000, "a collective that has not completed by then is an error");

namespace gantry::worker {
namespace {

using Stream = grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>;

std::atomic<bool> g_stop{false};

// The CPU's attainable fp32 FLOP/s: the best of a few 1024^3 GEMMs on the training threads.
// MFU on a CPU worker is measured against this (a GPU worker takes its datasheet peak).
double MeasureCpuPeak() {
  double best = 0;
  std::thread t([&] {
    kernels::ConfigureThreads(FLAGS_threads);
    const int n = 1024;
    std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
    for (int i = 0; i < 4; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      kernels::matmul_forward(c.data(), a.data(), b.data(), nullptr, n, n, n);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i > 0) best = std::max(best, 2.0 * n * n * n / s);
    }
  });
  t.join();
  return best;
}

class Session {
 public:
  Session(Stream* stream, metrics::Registry* registry, std::shared_ptr<v1::Coordinator::Stub> stub)
      : stream_(stream), registry_(registry), stub_(std::move(stub)) {}

  bool Send(const v1::WorkerMessage& m) {
    std::lock_guard<std::mutex> l(write_mu_);
    return stream_->Write(m);
  }

  // Runs one assignment to the end (or until cancelled), reporting as it goes.
  void Run(const v1::Assignment& a) {
    // Which job this worker runs, as a series to join the unlabelled worker metrics with
    // (deploy/grafana): 1 while it runs, 0 after.
    auto& info = registry_->GetGauge("gantry_worker_job_info", "1 for the job and rank this worker runs now.",
                                     {{"job", a.job_id()}, {"rank", std::to_string(a.rank())}});
    info.Set(1);
    struct Clear {
      metrics::Gauge& g;
      ~Clear() { g.Set(0); }
    } clear_info{info};
    {
      std::lock_guard<std::mutex> l(comm_mu_);
      hb_job_ = a.job_id();
      hb_generation_ = a.generation();
      hb_rank_ = a.rank();
      hb_step_ = 0;
    }
    LOG(INFO) << "job " << a.job_id() << " generation " << a.generation() << ": rank " << a.rank() << " of "
              << a.world_size();
    absl::Status s = Train(a);
    v1::WorkerMessage m;
    auto* d = m.mutable_done();
    d->set_job_id(a.job_id());
    d->set_generation(a.generation());
    d->set_rank(a.rank());
    d->set_ok(s.ok());
    if (!s.ok()) d->set_error(std::string(s.message()));
    d->set_code(static_cast<int>(s.code()));
    {
      std::lock_guard<std::mutex> l(comm_mu_);
      for (const auto& server : unreachable_) d->add_unreachable_shard_servers(server);
      unreachable_.clear();
    }
    LOG(INFO) << "job " << a.job_id() << (s.ok() ? " finished" : " stopped: " + std::string(s.message()));
    Send(m);
    std::lock_guard<std::mutex> l(comm_mu_);
    hb_job_.clear();
  }

  std::atomic<bool> cancel{false};
  // What a heartbeat says of the running job: placement, last step, last collective.
  void FillHeartbeat(v1::Heartbeat* hb) {
    std::lock_guard<std::mutex> l(comm_mu_);
    if (hb_job_.empty()) return;
    hb->set_job_id(hb_job_);
    hb->set_generation(hb_generation_);
    hb->set_rank(hb_rank_);
    hb->set_step(hb_step_.load());
    uint64_t done = 0;  // over every group of the rank
    for (auto* c : comms_) done += c->completed();
    if (!comms_.empty()) hb->set_collectives_done(done);
  }
  // Ends the running job's placement: its step loop stops at the next step and a collective
  // in flight fails at once rather than wait out its timeout.
  void Abort() {
    cancel = true;
    std::lock_guard<std::mutex> l(comm_mu_);
    for (auto* c : comms_) c->Abort();
  }

 private:
  std::mutex comm_mu_;
  std::vector<parallel::GlooCommunicator*> comms_;  // the running job's groups, while they live
  std::set<std::string> unreachable_;            // shard servers this run could not reach (comm_mu_)
  std::string hb_job_;  // the running assignment, for heartbeats (comm_mu_)
  int64_t hb_generation_ = 0;
  int hb_rank_ = 0;
  std::atomic<int64_t> hb_step_{0};
  void Unreachable(const std::string& server) {
    std::lock_guard<std::mutex> l(comm_mu_);
    unreachable_.insert(server);
  }

  absl::Status Train(const v1::Assignment& a) {
    // OpenMP's thread count and the pinning belong to the thread that starts the parallel
    // regions: this job thread, not main (an unpinned team here made steps 2x slower).
    LOG(INFO) << "job " << a.job_id() << ": " << kernels::ConfigureThreads(FLAGS_threads);
    // The coordinator's normalised spec, at this placement's dp.
    auto spec = train::ParseJobSpec(a.spec_yaml());
    if (!spec.ok()) return spec.status();
    const std::string dir = absl::StrCat(FLAGS_work_dir, "/", a.job_id(), "/gen", a.generation());
    spec->checkpoint.dir = dir + "/checkpoints";
    train::TrainOptions o;
    o.progress = false;
    o.device = FLAGS_device;
    // Where to start is the coordinator's decision (Assignment.resume_job_id, resume_step:
    // this job's last committed checkpoint after a restart, or checkpoint.resume_from's),
    // whatever layout wrote it. Every rank reads it in place on the shard servers, only the
    // ranges it needs; the listing finds which server holds which of its files.
    const std::vector<std::string> servers(a.shard_servers().begin(), a.shard_servers().end());
    std::optional<agent::StoredCheckpoint> best;
    if (a.resume_step() > 0) {
      // A shard server that cannot be listed may hold the checkpoint's slices: the placement
      // fails (UNAVAILABLE, retried) and the coordinator places the job again once the
      // server is back or counted out.
      std::vector<std::string> unreachable;
      auto stored = agent::ListStoredCheckpoints(servers, a.resume_job_id(), &unreachable);
      for (const auto& u : unreachable) Unreachable(u.substr(0, u.find(' ')));
      if (!unreachable.empty()) {
        return absl::UnavailableError(absl::StrCat("listing the checkpoints of ", a.resume_job_id(), ": shard server ",
                                                   absl::StrJoin(unreachable, ", "), " is unreachable"));
      }
      std::vector<std::string> steps;
      for (auto& c : stored) {
        if (c.step == a.resume_step()) best = std::move(c);
        else steps.push_back(std::to_string(c.step));
      }
      if (!best) {
        return absl::NotFoundError(absl::StrCat(
            a.resume_job_id() == a.job_id() ? "resuming: job " : "checkpoint.resume_from: job ", a.resume_job_id(),
            " has no committed checkpoint of step ", a.resume_step(), " on the shard servers (they hold: ",
            steps.empty() ? "none" : absl::StrJoin(steps, ", "), ")"));
      }
    }
    std::unique_ptr<agent::ShardCheckpointSource> resume_source;
    if (best) {
      LOG(INFO) << "job " << a.job_id() << ": rank " << a.rank() << " resuming from the checkpoint of step " << best->step
                << (best->job_id == a.job_id() ? std::string() : " of job " + best->job_id) << " on "
                << absl::StrJoin(best->servers, ", ") << " (" << best->files.size() << " files, " << best->bytes
                << " bytes)";
      resume_source = std::make_unique<agent::ShardCheckpointSource>(std::move(*best));
      o.resume_source = resume_source.get();
    }
    // The partition map: checkpoint parts are cut at its bounds, each slice to its server.
    std::vector<std::string> slice_server;
    for (const auto& r : a.param_ranges()) {
      if (!slice_server.empty()) o.checkpoint_cuts.push_back(static_cast<size_t>(r.begin()));
      slice_server.push_back(r.shard_server());
    }
    if (slice_server.empty() && !servers.empty()) slice_server.push_back(servers[0]);
    std::unique_ptr<parallel::GlooCommunicator> comm;
    std::unique_ptr<parallel::Groups> groups;
    struct ForgetComm {  // destroyed before comm: Abort never reaches a dead communicator
      Session* s;
      ~ForgetComm() {
        std::lock_guard<std::mutex> l(s->comm_mu_);
        s->comms_.clear();
      }
    } forget_comm{this};
    if (a.world_size() > 1) {  // the job's ranks meet through the coordinator's rendezvous
      auto store = std::make_shared<agent::CoordinatorStore>(stub_, a.job_id(), a.generation(),
                                                             std::chrono::milliseconds(FLAGS_collective_timeout_ms));
      parallel::GlooOptions go;
      go.hostname = FLAGS_gloo_host;
      go.timeout = std::chrono::milliseconds(spec->parallel.timeout_s > 0 ? static_cast<int64_t>(spec->parallel.timeout_s * 1000)
                                                                       : FLAGS_collective_timeout_ms);
      std::vector<parallel::GlooCommunicator*> made;
      if (spec->parallel.tp > 1 || spec->parallel.pp > 1) {  // 3D: every group of this rank
        ASSIGN_OR_RETURN(groups, parallel::MakeGroups(a.rank(), {spec->parallel.dp, spec->parallel.tp, spec->parallel.pp},
                                                      parallel::GlooGroups(store, go, &made)));
        o.groups = groups.get();
      } else {
        ASSIGN_OR_RETURN(comm, parallel::GlooCommunicator::Create(a.rank(), a.world_size(), store, go));
        o.comm = comm.get();
        made.push_back(comm.get());
      }
      std::lock_guard<std::mutex> l(comm_mu_);
      comms_ = made;
      if (cancel) {
        for (auto* c : comms_) c->Abort();  // aborted while joining
      }
      LOG(INFO) << "job " << a.job_id() << ": rank " << a.rank() << " joined its group of " << a.world_size();
    }
    std::unique_ptr<agent::ParamServerClient> remote;
    if (spec->optimizer.placement == "shardserver") {  // the coordinator's partition map
      std::vector<agent::ParamRangeOf> ranges;
      for (const auto& r : a.param_ranges()) {
        ranges.push_back({r.shard_server(), static_cast<size_t>(r.begin()), static_cast<size_t>(r.end()), r.data_address()});
      }
      if (ranges.empty()) return absl::FailedPreconditionError("parameter-server job placed without a partition map");
      const std::vector<model::ParamTensor> layout = model::ParameterLayout(spec->model);
      remote = std::make_unique<agent::ParamServerClient>(
          a.job_id(), a.generation(), ranges, layout, layout.back().offset + layout.back().numel,
          train::AdamWOf(spec->train));
      o.remote_optimizer = remote.get();
      LOG(INFO) << "job " << a.job_id() << ": AdamW on " << ranges.size() << " shard server(s)";
    }
    FILE* log = std::fopen("/dev/null", "w");
    o.out = log;
    std::optional<float> val;
    // This rank's share of a step's tokens: MFU and tokens/s are per worker (per device).
    const double rank_tokens_per_step =
        static_cast<double>(spec->train.global_batch) * spec->seq_len / spec->world_size();
    const auto& mc = spec->model;
    double n_params = 0;
    for (const auto& t : model::ParameterLayout(mc)) n_params += static_cast<double>(t.numel);
    const double flops_per_token = 6 * n_params + 6.0 * mc.n_layer * mc.n_embd * spec->seq_len;
    // A step update of this job generation and rank; the caller fills the report.
    auto step_update = [&a](v1::WorkerMessage& m) {
      auto* u = m.mutable_step();
      u->set_job_id(a.job_id());
      u->set_generation(a.generation());
      u->set_rank(a.rank());
      return u->mutable_report();
    };
    o.on_eval = [&](int64_t step, float v) {
      if (step > 0) {
        val = v;  // goes out with this step's report
        return;
      }
      v1::WorkerMessage m;  // before training: a report of its own, step 0
      auto* rep = step_update(m);
      rep->set_step(0);
      rep->set_loss(NAN);
      rep->set_val_loss(v);
      if (a.rank() == 0) Send(m);
    };
    o.on_step = [&](const train::StepReport& r) {
      hb_step_ = r.step;
      v1::WorkerMessage m;
      auto* rep = step_update(m);
      rep->set_step(r.step);
      rep->set_loss(r.loss);
      rep->set_lr(r.lr);
      rep->set_grad_norm(r.grad_norm);
      rep->set_step_seconds(r.seconds);
      rep->set_tokens_per_second(r.tokens_per_second);
      rep->set_compute_seconds(r.compute_seconds);
      rep->set_comm_seconds(r.comm_seconds);
      rep->set_optimizer_seconds(r.optimizer_seconds);
      rep->set_val_loss(val ? *val : NAN);
      val.reset();
      if (a.rank() == 0) Send(m);  // rank 0 speaks for the group (the ranks hold the same loss)
      registry_->GetGauge("gantry_worker_tokens_per_second", "This worker's training throughput in the last step.")
          .Set(rank_tokens_per_step / r.seconds);
      registry_->GetGauge("gantry_worker_loss", "Training loss of the last step.").Set(r.loss);
      registry_->GetHistogram("gantry_worker_step_seconds", "Training step time.", metrics::ExponentialBuckets(0.001, 2, 16))
          .Observe(r.seconds);
      registry_->GetCounter("gantry_worker_steps_total", "Training steps done.").Inc();
      if (r.checkpoint_stall_seconds > 0) {
        registry_->GetHistogram("gantry_worker_checkpoint_stall_seconds",
                                "Time the step loop spent on a checkpoint (the copy, or waiting for the budget).",
                                metrics::ExponentialBuckets(0.0001, 2, 18))
            .Observe(r.checkpoint_stall_seconds);
      }
      for (auto [part, secs] : {std::pair{"compute", r.compute_seconds}, std::pair{"comm_exposed", r.comm_seconds},
                                std::pair{"optimizer", r.optimizer_seconds}, std::pair{"comm_busy", r.comm_busy_seconds}}) {
        registry_->GetGauge("gantry_worker_step_part_seconds",
                            "The last step's time by part: compute, exposed communication, optimizer; comm_busy is "
                            "the communication thread's time, overlapped with compute or not.",
                            {{"part", part}})
            .Set(secs);
      }
      if (FLAGS_peak_flops > 0) {  // set in main: the flag, or the CPU rate measured at start
        registry_->GetGauge("gantry_worker_mfu_ratio", "Model FLOPs utilisation, (6N + 6LCT) x tokens/s / peak.")
            .Set(flops_per_token * rank_tokens_per_step / r.seconds / FLAGS_peak_flops);
      }
      return !cancel.load() && !g_stop.load();
    };
    // Checkpoints are asynchronous and sharded: the trainer's writer thread hands over this
    // rank's files in memory (rank 0's include the manifest); they stream to the shard
    // servers, and the coordinator, told, commits the checkpoint once every rank's part is in.
    o.on_checkpoint_part = [&](const std::vector<train::CheckpointFile>& files, int64_t step) -> absl::Status {
      if (slice_server.empty()) {
        LOG(WARNING) << "job " << a.job_id() << ": no shard server was registered when the job was placed: the "
                     << "checkpoint of step " << step << " is not kept";
        return absl::OkStatus();
      }
      const auto t0 = std::chrono::steady_clock::now();
      // The manifest and config go with slice 0.
      std::map<std::string, std::vector<std::pair<std::string, const ByteSource*>>> by_server;
      const train::CheckpointFile* manifest_file = nullptr;
      for (const auto& f : files) {
        const int slice = train::CheckpointFileSlice(f.name);
        if (slice >= static_cast<int>(slice_server.size())) {
          return absl::InternalError(absl::StrCat(f.name, ": slice ", slice, " of a partition map of ", slice_server.size()));
        }
        by_server[slice_server[std::max(slice, 0)]].emplace_back(f.name, f.bytes.get());
        if (f.name == "manifest.json") manifest_file = &f;
      }
      int64_t bytes = 0;
      for (const auto& [server, sources] : by_server) {
        auto n = agent::UploadSources(server, a.job_id(), step, sources);
        if (!n.ok()) {
          if (absl::IsUnavailable(n.status()) || absl::IsDeadlineExceeded(n.status())) Unreachable(server);
          return n.status();
        }
        bytes += *n;
      }
      v1::WorkerMessage m;
      auto* p = m.mutable_checkpoint_part();
      p->set_job_id(a.job_id());
      p->set_generation(a.generation());
      p->set_rank(a.rank());
      p->set_step(step);
      for (const auto& [server, sources] : by_server) {
        for (const auto& f : sources) {
          auto* pf = p->add_files();
          pf->set_name(f.first);
          pf->set_shard_server(server);
        }
      }
      p->set_bytes(bytes);
      if (a.rank() == 0) {
        if (manifest_file == nullptr) return absl::InternalError("rank 0's checkpoint part has no manifest.json");
        std::string text(manifest_file->bytes->size(), '\0');
        RETURN_IF_ERROR(manifest_file->bytes->ReadAt(0, text.size(), text.data()));
        nlohmann::json manifest = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
        if (manifest.is_discarded()) return absl::DataLossError("the checkpoint's manifest.json is not valid JSON");
        manifest["job_id"] = a.job_id();
        manifest["generation"] = a.generation();
        p->set_manifest_json(manifest.dump());
      }
      Send(m);
      registry_->GetHistogram("gantry_worker_checkpoint_write_seconds",
                              "Writing and uploading this rank's checkpoint part (off the step loop).",
                              metrics::ExponentialBuckets(0.001, 2, 16))
          .Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      registry_->GetGauge("gantry_worker_checkpoint_bytes", "Size of this rank's last checkpoint part.")
          .Set(static_cast<double>(bytes));
      return absl::OkStatus();
    };
    auto trainer = train::Trainer::Create(*spec, o);
    if (!trainer.ok()) {
      std::fclose(log);
      return trainer.status();
    }
    if (resume_source) {
      LOG(INFO) << "job " << a.job_id() << ": rank " << a.rank() << " read " << resume_source->bytes_read() << " of the "
                << resume_source->where() << " checkpoint's bytes (the ranges its layout needs)";
    }
    auto set_memory = [&](const train::MemoryAccount& m) {
      for (auto [kind, bytes] : {std::pair{"params", m.params}, std::pair{"grads", m.grads},
                                 std::pair{"optimizer", m.optimizer}, std::pair{"activations", m.activations},
                                 std::pair{"working", m.working}, std::pair{"peak", m.peak},
                                 std::pair{"zero_formula", m.predicted}}) {
        registry_->GetGauge("gantry_worker_memory_bytes",
                            "Bytes this rank holds for training, by kind; zero_formula is what ZeRO predicts for "
                            "params + grads + optimizer at the job's stage and dp.",
                            {{"kind", kind}})
            .Set(static_cast<double>(bytes));
      }
    };
    const train::MemoryAccount m0 = (*trainer)->memory();
    set_memory(m0);
    LOG(INFO) << "job " << a.job_id() << ": rank " << a.rank() << " memory (ZeRO " << spec->parallel.zero_stage << ", dp "
              << spec->parallel.dp << "): params " << m0.params << " + grads " << m0.grads << " + optimizer "
              << m0.optimizer << " = " << m0.model_state() << " bytes; the ZeRO formula predicts " << m0.predicted
              << "; activations " << m0.activations;
    absl::Status s = (*trainer)->Run();
    const train::MemoryAccount m1 = (*trainer)->memory();
    set_memory(m1);
    LOG(INFO) << "job " << a.job_id() << ": rank " << a.rank() << " held at the end: params " << m1.params << " + grads "
              << m1.grads << " + optimizer " << m1.optimizer << " = " << m1.model_state() << " bytes; activations "
              << m1.activations << ", working " << m1.working << ", peak " << m1.peak;
    std::fclose(log);
    if (absl::IsCancelled(s)) {
      return absl::CancelledError(g_stop ? "worker shutting down (SIGTERM)" : "cancelled");
    }
    return s;
  }

  Stream* stream_;
  metrics::Registry* registry_;
  std::shared_ptr<v1::Coordinator::Stub> stub_;
  std::mutex write_mu_;
};

v1::Resources MyResources() {
  v1::Resources r;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  r.set_host(FLAGS_host.empty() ? host : FLAGS_host);
  r.set_device_kind("cpu");
  r.set_device_count(1);
  struct sysinfo si;
  if (sysinfo(&si) == 0) r.set_memory_bytes(static_cast<int64_t>(si.totalram) * si.mem_unit);
  return r;
}

// One attach session: returns when the stream ends.
void AttachOnce(const std::shared_ptr<v1::Coordinator::Stub>& stub, metrics::Registry* registry) {
  grpc::ClientContext ctx;
  auto stream = stub->Attach(&ctx);
  Session session(stream.get(), registry, stub);
  v1::WorkerMessage reg;
  *reg.mutable_register_() = MyResources();
  if (!session.Send(reg)) {
    LOG(WARNING) << "coordinator " << FLAGS_coordinator << " unreachable: " << stream->Finish().error_message();
    return;
  }
  std::mutex mu;
  std::condition_variable cv;
  bool ended = false;
  std::thread heartbeat([&] {
    std::unique_lock<std::mutex> l(mu);
    while (!ended && !g_stop) {
      cv.wait_for(l, std::chrono::milliseconds(FLAGS_heartbeat_ms));
      if (ended || g_stop) break;
      v1::WorkerMessage hb;
      hb.mutable_heartbeat()->set_time_unix_ms(NowUnixMs());
      session.FillHeartbeat(hb.mutable_heartbeat());
      l.unlock();
      session.Send(hb);
      l.lock();
    }
    if (g_stop) ctx.TryCancel();  // unblock the reader
  });
  std::thread job;
  std::string job_id;
  v1::CoordinatorMessage in;
  while (stream->Read(&in)) {
    if (!in.worker_id().empty()) {
      LOG(INFO) << "attached to " << FLAGS_coordinator << " as " << in.worker_id();
    } else if (in.has_assign()) {
      if (job.joinable()) job.join();  // the coordinator only assigns an idle worker
      session.cancel = false;
      job_id = in.assign().job_id();
      job = std::thread([&session, a = in.assign()] { session.Run(a); });
    } else if (in.restart_job_id() == job_id || in.cancel_job_id() == job_id) {
      // Restarted or cancelled: drop this generation now. Every rank stops, including one
      // already waiting in the next step's collective for a rank that stopped at the step
      // boundary.
      LOG(INFO) << "job " << job_id << ": " << (in.has_cancel_job_id() ? "cancel" : "restart") << " received";
      session.Abort();
    } else if (in.abort_job_id() == job_id) {
      LOG(INFO) << "job " << job_id << ": abort received";
      session.cancel = true;  // the job failed: a collective in flight fails on its own, naming the ranks missing
    }
  }
  session.Abort();  // the coordinator is gone: this generation of the job is over
  if (job.joinable()) job.join();
  {
    std::lock_guard<std::mutex> l(mu);
    ended = true;
  }
  cv.notify_all();
  heartbeat.join();
  auto st = stream->Finish();
  if (!g_stop) LOG(WARNING) << "attach stream ended: " << st.error_message();
}

}  // namespace
}  // namespace gantry::worker

int main(int argc, char** argv) {
  const sigset_t sigs = gantry::InitDaemon(&argc, &argv, "gantry-worker --work_dir DIR [--coordinator HOST:PORT]");
  if (FLAGS_work_dir.empty()) {
    LOG(ERROR) << "--work_dir is required";
    return 2;
  }
  // Threads are configured (and pinned) by each job's thread, not here: a pinned main
  // thread would hand its single CPU to every thread it creates.
  gantry::metrics::Registry registry;
  auto http = gantry::metrics::HttpServer::Start(FLAGS_metrics_listen, &registry);
  if (!http.ok()) {
    LOG(ERROR) << http.status();
    return 1;
  }
  if (FLAGS_peak_flops <= 0) {
    FLAGS_peak_flops = gantry::worker::MeasureCpuPeak();
    LOG(INFO) << "CPU fp32 GEMM rate " << FLAGS_peak_flops / 1e9 << " GFLOP/s: the peak for MFU";
  }
  gantry::WriteReadyFile(FLAGS_ready_file, 0, (*http)->port());
  std::thread signals([&] {
    gantry::WaitForTermination(sigs);
    gantry::worker::g_stop = true;
  });
  std::shared_ptr<gantry::v1::Coordinator::Stub> stub =
      gantry::v1::Coordinator::NewStub(gantry::MakeChannel(FLAGS_coordinator));
  int backoff_ms = 200;
  while (!gantry::worker::g_stop) {
    const auto t0 = std::chrono::steady_clock::now();
    gantry::worker::AttachOnce(stub, &registry);
    if (gantry::worker::g_stop) break;
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) backoff_ms = 200;
    // Wait before re-attaching (bounded exponential backoff), checking for SIGTERM.
    for (int waited = 0; waited < backoff_ms && !gantry::worker::g_stop; waited += 50) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    backoff_ms = std::min(backoff_ms * 2, 5000);
  }
  signals.join();
  LOG(INFO) << "stopped";
  return 0;
}
