#include "worker/agent/session.h"

#include <glog/logging.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "kernels/threads.h"
#include "nlohmann/json.hpp"
#include "worker/agent/assignment.h"
#include "worker/agent/coordinator_store.h"
#include "worker/agent/param_client.h"
#include "model/gpt.h"
#include "worker/agent/device_groups.h"
#include "worker/protocol/messages.h"
#include "checkpoint/checkpoint.h"

namespace gantry::agent {

bool Session::Send(const v1::WorkerMessage& m) {
  std::lock_guard<std::mutex> l(write_mu_);
  return stream_->Write(m);
}

// Runs one assignment to the end (or until cancelled), reporting as it goes.
void Session::Run(const v1::Assignment& a) {
  // Which job this worker runs, as a series to join the unlabelled worker metrics with
  // (deploy/grafana): 1 while it runs, 0 after.
  auto& info = registry_->GetGauge("gantry_worker_job_info", "1 for the job and rank this worker runs now.",
                                   {{"job", a.job_id()}, {"rank", std::to_string(a.rank())}});
  info.Set(1);
  struct Clear {
    metrics::Gauge& g;
    ~Clear() { g.Set(0); }
  } clear_info{info};
  RankState* rank = nullptr;
  {
    std::lock_guard<std::mutex> l(comm_mu_);
    hb_job_ = a.job_id();
    hb_generation_ = a.generation();
    auto& r = ranks_[a.rank()];
    r = std::make_unique<RankState>();
    rank = r.get();
  }
  LOG(INFO) << "job " << a.job_id() << " generation " << a.generation() << ": rank " << a.rank() << " of "
            << a.world_size()
            << (a.local_world() > 1 ? absl::StrCat(", local rank ", a.local_rank(), " of ", a.local_world()) : "");
  bool preempted = false;
  absl::Status s = Train(a, rank, &preempted);
  v1::WorkerMessage m = protocol::JobDoneMessage(a, s);
  v1::JobDone* d = m.mutable_done();
  d->set_preempted(preempted);
  {
    std::lock_guard<std::mutex> l(comm_mu_);
    for (const auto& server : unreachable_) d->add_unreachable_shard_servers(server);
    unreachable_.clear();
  }
  LOG(INFO) << "job " << a.job_id() << (s.ok() ? " finished" : " stopped: " + std::string(s.message()));
  Send(m);
  std::lock_guard<std::mutex> l(comm_mu_);
  ranks_.erase(a.rank());
  if (ranks_.empty()) hb_job_.clear();
}

// What a heartbeat says of the running job: placement, last step, last collective.
void Session::FillHeartbeat(v1::Heartbeat* hb) {
  std::lock_guard<std::mutex> l(comm_mu_);
  if (hb_job_.empty()) return;
  for (const auto& [r, st] : ranks_) {
    v1::RankProgress* p = protocol::AddRankProgress(hb, hb_job_, hb_generation_, r, st->step.load());
    uint64_t done = 0;  // over every group of the rank
    for (auto* c : st->comms) done += c->completed();
    if (!st->comms.empty()) p->set_collectives_done(done);
  }
}
// Ends the running job's placement: its step loop stops at the next step and a collective
// in flight fails at once rather than wait out its timeout.
void Session::Abort() {
  cancel = true;
  std::lock_guard<std::mutex> l(comm_mu_);
  for (const auto& [r, st] : ranks_) {
    for (auto* c : st->comms) c->Abort();
  }
}

void Session::Preempt(const std::string& job_id, int64_t generation, int64_t stop_step) {
  std::lock_guard<std::mutex> l(comm_mu_);
  preempt_job_ = job_id;
  preempt_generation_ = generation;
  preempt_step_ = stop_step;
}

bool Session::StopHere(const v1::Assignment& a, int64_t step) {
  std::lock_guard<std::mutex> l(comm_mu_);
  return preempt_job_ == a.job_id() && preempt_generation_ == a.generation() && step == preempt_step_;
}

void Session::Unreachable(const std::string& server) {
  std::lock_guard<std::mutex> l(comm_mu_);
  unreachable_.insert(server);
}

absl::Status Session::Train(const v1::Assignment& a, RankState* rank, bool* preempted) {
  // OpenMP's thread count and the pinning belong to the thread that starts the parallel
  // regions: this job thread, not main (an unpinned team here made steps 2x slower). The
  // ranks of one worker share its CPUs, each its own part of them.
  const int local = std::max(0, a.local_rank()), local_world = std::max(1, a.local_world());
  LOG(INFO) << "job " << a.job_id() << ": rank " << a.rank() << ": "
            << kernels::ConfigureThreads(options_.threads, local, local_world);
  // The job's spec as submitted, with the placement's layout and a checkpoint directory of this
  // worker's own (AssignedSpec says why): read once, in one place.
  auto spec = AssignedSpec(a, options_.work_dir);
  if (!spec.ok()) return spec.status();
  train::TrainOptions o;
  o.progress = false;
  o.device_options.attention = options_.attention;
  // A rank's local index on this worker is its device ordinal (counted from the worker's
  // first GPU).
  ASSIGN_OR_RETURN(train::DeviceName device, train::ParseDevice(options_.device));
  if (device.kind != kernels::BackendKind::kCpu) {
    device.ordinal += local;
    o.device = absl::StrCat(kernels::BackendKindName(device.kind), ":", device.ordinal);
  } else {
    o.device = options_.device;
  }
  // Where to start is the coordinator's decision (Assignment.resume_job_id, resume_step:
  // this job's last committed checkpoint after a restart, or checkpoint.resume_from's),
  // whatever layout wrote it. Every rank reads it in place on the shard servers, only the
  // ranges it needs; the listing finds which server holds which of its files.
  ASSIGN_OR_RETURN(std::optional<shardserver::StoredCheckpoint> best, FindResumePoint(a));
  std::unique_ptr<checkpoint::ShardCheckpointSource> resume_source;
  if (best) {
    LOG(INFO) << "job " << a.job_id() << ": rank " << a.rank() << " resuming from the checkpoint of step " << best->step
              << (best->job_id == a.job_id() ? std::string() : " of job " + best->job_id) << " on "
              << absl::StrJoin(best->servers, ", ") << " (" << best->files.size() << " files, " << best->bytes
              << " bytes)";
    resume_source = std::make_unique<checkpoint::ShardCheckpointSource>(std::move(*best));
    o.worker.resume_source = resume_source.get();
  }
  // The partition map: checkpoint parts are cut at its bounds, each slice to its server.
  std::vector<std::string> slice_server;
  for (const auto& r : a.param_ranges()) {
    if (!slice_server.empty()) o.worker.checkpoint_cuts.push_back(static_cast<size_t>(r.begin()));
    slice_server.push_back(r.shard_server());
  }
  if (slice_server.empty() && a.shard_servers_size() > 0) slice_server.push_back(a.shard_servers(0));
  std::unique_ptr<comm::Groups> joined;
  struct ForgetComm {  // destroyed before comm: Abort never reaches a dead communicator
    Session* s;
    RankState* rank;
    ~ForgetComm() {
      std::lock_guard<std::mutex> l(s->comm_mu_);
      rank->comms.clear();
    }
  } forget_comm{this, rank};
  ASSIGN_OR_RETURN(joined, JoinGroups(a, *spec, device, rank, &o));
  std::unique_ptr<agent::ParamServerClient> remote;
  if (spec->optimizer.placement == "shardserver") {  // the coordinator's partition map
    std::vector<jobspec::ParamRangeOf> ranges;
    for (const auto& r : a.param_ranges()) {
      ranges.push_back({r.shard_server(), static_cast<size_t>(r.begin()), static_cast<size_t>(r.end()), r.data_address()});
    }
    if (ranges.empty()) return absl::FailedPreconditionError("parameter-server job placed without a partition map");
    const std::vector<jobspec::ParamTensor> layout = jobspec::ParameterLayout(spec->model);
    remote = std::make_unique<agent::ParamServerClient>(
        a.job_id(), a.generation(), ranges, layout, layout.back().offset + layout.back().numel,
        optim::AdamWOf(spec->train));
    o.worker.remote_optimizer = remote.get();
    LOG(INFO) << "job " << a.job_id() << ": AdamW on " << ranges.size() << " shard server(s)";
  }
  FILE* log = std::fopen("/dev/null", "w");
  o.out = log;
  StepReporter reporter(a, *spec, registry_, options_.peak_flops, [this](const v1::WorkerMessage& m) { return Send(m); });
  SetStepHooks(rank, &reporter, &o);
  SetCheckpointHook(a, slice_server, &o);
  // A preemption: every rank stops after the same step, with that step's checkpoint.
  o.worker.stop_here = [this, &a](int64_t step) { return StopHere(a, step); };
  auto trainer = train::Trainer::Create(*spec, o);
  if (!trainer.ok()) {
    std::fclose(log);
    return trainer.status();
  }
  LOG(INFO) << "job " << a.job_id() << ": rank " << a.rank() << " runs on " << (*trainer)->model().backend().Describe();
  if (resume_source) {
    LOG(INFO) << "job " << a.job_id() << ": rank " << a.rank() << " read " << resume_source->bytes_read() << " of the "
              << resume_source->where() << " checkpoint's bytes (the ranges its layout needs)";
  }
  const train::MemoryAccount m0 = (*trainer)->memory();
  SetMemoryGauges(a, m0);
  LOG(INFO) << "job " << a.job_id() << ": rank " << a.rank() << " memory (ZeRO " << spec->parallel.zero_stage << ", dp "
            << spec->parallel.dp << "): params " << m0.params << " + grads " << m0.grads << " + optimizer "
            << m0.optimizer << " = " << m0.model_state() << " bytes; the ZeRO formula predicts " << m0.predicted
            << "; activations " << m0.activations;
  absl::Status s = (*trainer)->Run();
  const train::MemoryAccount m1 = (*trainer)->memory();
  SetMemoryGauges(a, m1);
  LOG(INFO) << "job " << a.job_id() << ": rank " << a.rank() << " held at the end: params " << m1.params << " + grads "
            << m1.grads << " + optimizer " << m1.optimizer << " = " << m1.model_state() << " bytes; activations "
            << m1.activations << ", working " << m1.working << ", peak " << m1.peak;
  std::fclose(log);
  if (absl::IsCancelled(s)) {
    return absl::CancelledError((*stop_) ? "worker shutting down (SIGTERM)" : "cancelled");
  }
  if (s.ok() && (*trainer)->stopped_early()) {
    *preempted = true;
    return absl::AbortedError("preempted: stopped after the checkpoint of its stop step");
  }
  return s;
}

absl::StatusOr<std::optional<shardserver::StoredCheckpoint>> Session::FindResumePoint(const v1::Assignment& a) {
  if (a.resume_step() <= 0) return std::optional<shardserver::StoredCheckpoint>();
  const std::vector<std::string> servers(a.shard_servers().begin(), a.shard_servers().end());
  // A shard server that cannot be listed may hold the checkpoint's slices: the placement
  // fails (UNAVAILABLE, retried) and the coordinator places the job again once the server
  // is back or counted out.
  std::vector<std::string> unreachable;
  auto stored = shardserver::ListStoredCheckpoints(servers, a.resume_job_id(), &unreachable);
  for (const auto& u : unreachable) Unreachable(u.substr(0, u.find(' ')));
  if (!unreachable.empty()) {
    return absl::UnavailableError(absl::StrCat("listing the checkpoints of ", a.resume_job_id(), ": shard server ",
                                               absl::StrJoin(unreachable, ", "), " is unreachable"));
  }
  std::vector<std::string> steps;
  for (auto& c : stored) {
    if (c.step == a.resume_step()) return std::optional<shardserver::StoredCheckpoint>(std::move(c));
    steps.push_back(std::to_string(c.step));
  }
  return absl::NotFoundError(absl::StrCat(
      a.resume_job_id() == a.job_id() ? "resuming: job " : "checkpoint.resume_from: job ", a.resume_job_id(),
      " has no committed checkpoint of step ", a.resume_step(), " on the shard servers (they hold: ",
      steps.empty() ? "none" : absl::StrJoin(steps, ", "), ")"));
}

absl::StatusOr<std::unique_ptr<comm::Groups>> Session::JoinGroups(const v1::Assignment& a,
                                                                  const jobspec::JobSpec& spec,
                                                                  const train::DeviceName& device, RankState* rank,
                                                                  train::TrainOptions* o) {
  std::unique_ptr<comm::Groups> g;
  if (a.world_size() > 1) {  // the job's ranks meet through the coordinator's rendezvous
    auto store = std::make_shared<agent::CoordinatorStore>(stub_, a.job_id(), a.generation(),
                                                           std::chrono::milliseconds(options_.collective_timeout_ms));
    comm::GlooOptions go;
    go.hostname = options_.gloo_host;
    go.timeout = std::chrono::milliseconds(spec.parallel.timeout_s > 0 ? static_cast<int64_t>(spec.parallel.timeout_s * 1000)
                                                                     : options_.collective_timeout_ms);
    // On the rank's device: NCCL on its GPU for cuda, Gloo for cpu and cuda-emulated.
    std::vector<comm::Communicator*> made;
    const comm::GroupFactory factory = agent::DeviceGroups(device.kind, device.ordinal, store, go, &made);
    // 3D, experts or context parallelism: every group (cp: the ring's and dp x cp's among them)
    if (spec.parallel.tp > 1 || spec.parallel.pp > 1 || spec.parallel.ep > 1 || spec.parallel.cp > 1) {
      ASSIGN_OR_RETURN(g, comm::MakeGroups(a.rank(),
                                           {spec.parallel.dp, spec.parallel.tp, spec.parallel.pp, spec.parallel.ep,
                                            spec.parallel.cp},
                                           factory));
    } else {  // data parallel only: one group of every rank, dp and world at once
      std::vector<int> world(static_cast<size_t>(a.world_size()));
      for (int r = 0; r < a.world_size(); ++r) world[static_cast<size_t>(r)] = r;
      ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> all, factory("world", world, a.rank()));
      g = comm::DataParallelGroups(all.get());
      g->owned.push_back(std::move(all));
    }
    o->groups = g.get();
    std::lock_guard<std::mutex> l(comm_mu_);
    rank->comms = made;
    if (cancel) {
      for (auto* c : made) c->Abort();  // aborted while joining
    }
    LOG(INFO) << "job " << a.job_id() << ": rank " << a.rank() << " joined its group of " << a.world_size();
  }
  return g;
}

void Session::SetStepHooks(RankState* rank, StepReporter* reporter, train::TrainOptions* o) {
  o->worker.on_eval = [reporter](int64_t step, float v) { reporter->Eval(step, v); };
  o->worker.on_step = [this, rank, reporter](const train::StepReport& r) {
    rank->step = r.step;  // for the heartbeats
    reporter->Step(r);
    return !cancel.load() && !stop_->load();  // cancelled, or the worker stopping: the run ends
  };
}

void Session::SetCheckpointHook(const v1::Assignment& a, const std::vector<std::string>& slice_server,
                                train::TrainOptions* o) {
  // Checkpoints are asynchronous and sharded: the trainer's writer thread hands over this
  // rank's files in memory (rank 0's include the manifest); they stream to the shard
  // servers, and the coordinator, told, commits the checkpoint once every rank's part is in.
  o->worker.on_checkpoint_part = [this, &a, slice_server](const std::vector<checkpoint::CheckpointFile>& files,
                                                           int64_t step) -> absl::Status {
    if (slice_server.empty()) {
      LOG(WARNING) << "job " << a.job_id() << ": no shard server was registered when the job was placed: the "
                   << "checkpoint of step " << step << " is not kept";
      return absl::OkStatus();
    }
    const auto t0 = std::chrono::steady_clock::now();
    // The manifest and config go with slice 0.
    std::map<std::string, std::vector<std::pair<std::string, const ByteSource*>>> by_server;
    const checkpoint::CheckpointFile* manifest_file = nullptr;
    for (const auto& f : files) {
      const int slice = checkpoint::CheckpointFileSlice(f.name);
      if (slice >= static_cast<int>(slice_server.size())) {
        return absl::InternalError(absl::StrCat(f.name, ": slice ", slice, " of a partition map of ", slice_server.size()));
      }
      by_server[slice_server[std::max(slice, 0)]].emplace_back(f.name, f.bytes.get());
      if (f.name == "manifest.json") manifest_file = &f;
    }
    int64_t bytes = 0;
    for (const auto& [server, sources] : by_server) {
      auto n = shardserver::UploadSources(server, a.job_id(), step, sources);
      if (!n.ok()) {
        if (absl::IsUnavailable(n.status()) || absl::IsDeadlineExceeded(n.status())) Unreachable(server);
        return n.status();
      }
      bytes += *n;
    }
    v1::WorkerMessage m;
    v1::CheckpointPart* p = protocol::SetCheckpointPart(a, step, &m);
    for (const auto& [server, sources] : by_server) {
      for (const auto& f : sources) protocol::AddPlacedFile(p, f.first, server);
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
}

void Session::SetMemoryGauges(const v1::Assignment& a, const train::MemoryAccount& m) {
    if (a.local_rank() != 0) return;  // local rank 0's (the ranks of a job hold alike)
    for (auto [kind, bytes] : {std::pair{"params", m.params}, std::pair{"grads", m.grads},
                               std::pair{"optimizer", m.optimizer}, std::pair{"activations", m.activations},
                               std::pair{"cp_ring", m.ring}, std::pair{"working", m.working}, std::pair{"peak", m.peak},
                               std::pair{"zero_formula", m.predicted}}) {
      registry_->GetGauge("gantry_worker_memory_bytes",
                          "Bytes this rank holds for training, by kind; zero_formula is what ZeRO predicts for "
                          "params + grads + optimizer at the job's stage and dp.",
                          {{"kind", kind}})
          .Set(static_cast<double>(bytes));
    }
  }

}  // namespace gantry::agent
