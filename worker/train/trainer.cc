// One rank's trainer: Create's builders (groups, data, device, model, engine, resume, writers)
// and the step loop with its pipeline and evaluation paths. Over 700 lines because the step
// loop, the pipeline step and the builders share the Trainer's private state; the parts that
// stand alone live beside it (zero.cc, offload.cc, buckets.cc, comm_work.cc, device.cc).
#include "worker/train/trainer.h"

#include <functional>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "common/console.h"
#include "kernels/grad_norm.h"
#include "data/tokenizer.h"
#include "model/hf_io.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/gpt/load_gpt.h"

namespace gantry::train {

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const jobspec::JobSpec& spec,
                                                         const TrainOptions& options) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->spec_ = spec;
  t->options_ = options;
  RETURN_IF_ERROR(t->TakeGroups());
  RETURN_IF_ERROR(t->OpenData());
  ASSIGN_OR_RETURN(kernels::Backend* backend, t->CreateDevice());
  RETURN_IF_ERROR(t->CreateModel(backend));
  RETURN_IF_ERROR(t->CreateEngine());
  RETURN_IF_ERROR(t->Resume());
  RETURN_IF_ERROR(t->ReadyToStep());
  t->CreateWriters();
  return t;
}

bool Trainer::shards_model() const {
  const jobspec::ParallelSpec& p = spec_.parallel;
  return p.tp > 1 || p.pp > 1 || p.ep > 1;  // (expert parallelism: a rank holds some experts)
}
bool Trainer::splits_replica() const { return shards_model() || spec_.parallel.cp > 1; }

absl::Status Trainer::TakeGroups() {
  const jobspec::ParallelSpec& p = spec_.parallel;
  if (shards_model() && !options_.save_dir.empty()) {
    return absl::InvalidArgumentError("--save writes the whole model, and a tensor or pipeline parallel rank holds a "
                                      "shard: export a checkpoint instead (gantry export)");
  }
  if (options_.groups == nullptr) alone_ = comm::DataParallelGroups(nullptr);
  groups_ = options_.groups != nullptr ? options_.groups : alone_.get();
  const jobspec::Layout& l = groups_->layout;
  if (l.world() == 1 && spec_.world_size() > 1) {  // one rank, where the job needs several
    if (splits_replica()) {
      return absl::FailedPreconditionError(absl::StrCat("parallel.tp ", p.tp, " x pp ", p.pp, " x cp ", p.cp, " (ep ",
                                                        p.ep, ") runs ", spec_.world_size(),
                                                        " ranks: submit the job to a cluster"));
    }
    return absl::InvalidArgumentError(absl::StrCat("parallel.dp is ", p.dp, " but 1 rank runs this job (gantry-train "
                                                   "runs one: submit it to a cluster)"));
  }
  if (l.dp != p.dp || l.tp != p.tp || l.pp != p.pp || l.ep != p.ep || l.cp != p.cp) {
    return absl::InvalidArgumentError(absl::StrCat("the job spec has dp ", p.dp, " x cp ", p.cp, " x tp ", p.tp,
                                                   " x pp ", p.pp, " (ep ", p.ep, ") but this rank's groups are dp ",
                                                   l.dp, " x cp ", l.cp, " x tp ", l.tp, " x pp ", l.pp, " (ep ", l.ep,
                                                   ")"));
  }
  return absl::OkStatus();
}

absl::Status Trainer::OpenData() {
  const jobspec::JobSpec& spec = spec_;
  const int B = spec.train.micro_batch, T = spec.seq_len, cp = spec.parallel.cp;
  if (!spec.data.tokenizer.empty()) {  // the data's tokenizer: loadable, and within the model's vocabulary
    ASSIGN_OR_RETURN(std::unique_ptr<data::Tokenizer> tok, data::Tokenizer::Load(spec.data.tokenizer));
    if (tok->vocab_size() > static_cast<uint32_t>(spec.model.vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat("data.tokenizer ", spec.data.tokenizer, " has ", tok->vocab_size(),
                                                     " tokens, more than model.vocab_size ", spec.model.vocab_size));
    }
  }
  ASSIGN_OR_RETURN(train_data_, data::Dataset::Open(spec.data.train, T, spec.model.vocab_size));
  if (!spec.data.val.empty()) {
    ASSIGN_OR_RETURN(val_data_, data::Dataset::Open(spec.data.val, T, spec.model.vocab_size));
  }
  // The batch is split over dp: a replica's shards and cp ranks read the same rows.
  data_dp_ = spec.parallel.dp;
  data_rank_ = groups_->me.replica;
  inputs_.resize(static_cast<size_t>(B) * T);
  targets_.resize(static_cast<size_t>(B) * T);
  if (cp > 1) {  // this rank's rows of each sequence (the job spec checked that 2·cp divides T)
    ASSIGN_OR_RETURN(model::CpSharding cs, model::CpSharding::Make(T, cp, groups_->me.cp_rank));
    cp_shard_ = cs;
    cp_inputs_.resize(static_cast<size_t>(B) * cs.rows());
    cp_targets_.resize(static_cast<size_t>(B) * cs.rows());
  }
  return absl::OkStatus();
}

absl::StatusOr<kernels::Backend*> Trainer::CreateDevice() {
  ASSIGN_OR_RETURN(const DeviceName device, ParseDevice(options_.device));
  // One model over the rank's backend, every layout: its parameters, gradients, activations
  // and AdamW state in the device's memory, ZeroEngine's collectives on it (NCCL for cuda,
  // Gloo for cpu and cuda-emulated). cuda-emulated takes cuda's paths: the host reaches the
  // model's memory only through the backend's copies.
  if (device.kind == kernels::BackendKind::kCpu) return &kernels::CpuBackend();
  kernels::BackendOptions bo;
  bo.attention = options_.device_options.attention;
  bo.deterministic_attention = spec_.train.deterministic;
  ASSIGN_OR_RETURN(backend_, kernels::CreateBackend(device.kind, device.ordinal, bo));
  if (speaker()) std::fprintf(options_.out, "device %s\n", backend_->Describe().c_str());
  return backend_.get();
}

absl::Status Trainer::CreateModel(kernels::Backend* backend) {
  const jobspec::JobSpec& spec = spec_;
  const int tp = spec.parallel.tp, pp = spec.parallel.pp, ep = spec.parallel.ep;
  const bool sharded = shards_model();
  const std::string& init_from = options_.init_from;
  if (!init_from.empty()) {
    ASSIGN_OR_RETURN(jobspec::GPTConfig c, hf::ReadConfig(init_from));
    if (!(c == spec.model)) {
      return absl::InvalidArgumentError(absl::StrCat("--init-from ", init_from, ": model (", jobspec::DescribeModel(c),
                                                     ") differs from the job spec's in ",
                                                     jobspec::ModelDifferences(c, "config.json", spec.model, "job spec")));
    }
  }
  jobspec::ModelShard shard;
  if (sharded) {
    shard = jobspec::ShardOf(spec.model, tp, groups_->me.tp_rank, pp, groups_->me.stage, spec.parallel.stage_layers,
                             spec.parallel.virtual_stages);
    shard.sequence_parallel = spec.parallel.sequence_parallel;
    shard.ep = ep;
    shard.ep_rank = jobspec::EpRankOf(groups_->me, groups_->layout);
  }
  model_ = std::make_unique<model::GPT>(spec.model, shard, backend);
  model_->InitRandom(spec.train.seed);
  if (!init_from.empty()) {
    if (shard.whole()) {
      RETURN_IF_ERROR(model::LoadHFWeights(init_from, *model_));
    } else {  // the whole model, then this shard's blocks of it
      model::GPT whole(spec.model);
      RETURN_IF_ERROR(model::LoadHFWeights(init_from, whole));
      model_->CopyFromWhole(whole);
    }
  }
  model_->set_recompute(spec.recompute());
  model_->set_classifier_rows(spec.train.classifier_rows);
  model_->set_precision(optim::PrecisionOf(spec.train));
  if (spec.train.precision == "fp16") scaler_ = optim::LossScaler(spec.train.loss_scale, spec.train.loss_scale_window);
  if (spec.parallel.cp > 1) model_->set_cp_comm(groups_->cp);
  if (!sharded) return absl::OkStatus();
  model_->set_tp_comm(groups_->tp);
  model_->set_ep_comm(groups_->ep);
  if (pp == 1) return absl::OkStatus();
  ASSIGN_OR_RETURN(schedule_, jobspec::ParseSchedule(spec.parallel.schedule));
  const int vp = spec.parallel.virtual_stages, micro = spec.grad_accum();
  RETURN_IF_ERROR(jobspec::CheckInterleaved(schedule_, pp, micro, vp));
  ops_ = jobspec::PipelineOps(schedule_, pp, shard.stage, micro, vp);
  if (ops_.empty()) {
    return absl::InternalError(absl::StrCat("no pipeline schedule for pp ", pp, ", virtual_stages ", vp, ", ", micro,
                                            " micro-batches"));
  }
  slots_ = jobspec::PipelineSlots(schedule_, pp, shard.stage, micro, vp);
  model_->set_slots(slots_);
  return absl::OkStatus();
}

absl::Status Trainer::CreateEngine() {
  const jobspec::JobSpec& spec = spec_;
  const bool on_servers = spec.optimizer.placement == "shardserver";
  if (on_servers && options_.worker.remote_optimizer == nullptr) {
    return absl::FailedPreconditionError(
        "optimizer.placement shardserver runs AdamW on the shard servers: submit the job to a cluster");
  }
  // Gradients, ZeRO's shards and the loss over the ranks that hold the same parameters
  // (dp x cp), or this rank alone; the shards' groups join them inside a replica (null where
  // there is none: Llama's embedding and classifier are untied, so no emb).
  comm::Communicator* grads = groups_->grads() != nullptr ? groups_->grads() : &solo_;
  const ZeroEngine::ModelParallel mp{groups_->mp, spec.model.llama() ? nullptr : groups_->emb, groups_->edp};
  ASSIGN_OR_RETURN(engine_, ZeroEngine::Create(model_.get(), grads, spec.parallel.zero_stage, spec.parallel.bucket_mb,
                                               optim::AdamWOf(spec.train),
                                               on_servers ? options_.worker.remote_optimizer : nullptr,
                                               spec.optimizer.staleness, mp));
  engine_->set_grad_reduce_bf16(spec.train.grad_reduce_dtype == "bf16");
  if (spec.optimizer.offload == "cpu") RETURN_IF_ERROR(engine_->OffloadOptimizer());
  if (spec.parallel.offload_params == "cpu") RETURN_IF_ERROR(engine_->OffloadParams());
  return absl::OkStatus();
}

absl::Status Trainer::Resume() {
  const jobspec::JobSpec& spec = spec_;
  std::unique_ptr<checkpoint::CheckpointSource> local;
  checkpoint::CheckpointSource* from = options_.worker.resume_source;
  if (options_.resume && from == nullptr) {
    if (spec.checkpoint.dir.empty()) {
      return absl::InvalidArgumentError("--resume needs checkpoint.dir in the job spec");
    }
    auto latest = checkpoint::FindLatestCheckpoint(spec.checkpoint.dir);
    if (latest.ok()) {
      local = checkpoint::DirectorySource(*latest);
      from = local.get();
    } else if (!absl::IsNotFound(latest.status())) {
      return latest.status();
    }
  }
  if (from == nullptr) return absl::OkStatus();  // a fresh start
  // A ZeRO rank reads only its own pieces of the optimizer state, straight into AdamW's
  // buffers; parameter-server mode reads it whole, for the shard servers.
  checkpoint::CheckpointState st;
  // (The optimizer's backend: the model's, or the host's when it is offloaded.)
  if (optim::AdamW* opt = engine_->local_optimizer();
      opt != nullptr && opt->backend().Supports(kernels::Capability::kHostAddressable)) {
    ASSIGN_OR_RETURN(st, checkpoint::LoadCheckpoint(*from, *model_, opt->m().data(), opt->v().data(), &opt->segments()));
  } else if (opt != nullptr) {  // through host copies of m and v
    FloatBuffer m(opt->m().size()), v(opt->v().size());
    ASSIGN_OR_RETURN(st, checkpoint::LoadCheckpoint(*from, *model_, m.data(), v.data(), &opt->segments()));
    opt->backend().CopyToDevice(opt->m().data(), m.data(), m.size() * sizeof(float));
    opt->backend().CopyToDevice(opt->v().data(), v.data(), v.size() * sizeof(float));
  } else {
    const size_t n_params = model_->num_params();
    FloatBuffer m(n_params), v(n_params);
    ASSIGN_OR_RETURN(st, checkpoint::LoadCheckpoint(*from, *model_, m.data(), v.data()));
    engine_->LoadOptimizerState(m.data(), v.data());
  }
  if (st.seed != spec.train.seed) {
    return absl::FailedPreconditionError(absl::StrCat(from->where(), ": written with seed ", st.seed,
                                                      ", the job spec has ", spec.train.seed));
  }
  start_step_ = st.step;
  // The rows read so far: recorded since datasets of shards; before, step x global batch.
  step_base_ = st.step;
  rows_base_ = st.data_rows ? *st.data_rows : st.step * spec.train.global_batch;
  if (st.loss_scale) scaler_.Restore(*st.loss_scale);
  ASSIGN_OR_RETURN(checkpoint::CheckpointLayout was, checkpoint::ReadCheckpointLayout(*from));
  if (speaker()) {
    std::fprintf(options_.out, "resumed from %s (step %ld, written by dp %d x %stp %d x pp %d, ZeRO %d)\n",
                 from->where().c_str(), static_cast<long>(st.step), was.dp,
                 was.cp > 1 ? absl::StrCat("cp ", was.cp, " x ").c_str() : "", was.tp, was.pp, was.zero_stage);
  }
  return absl::OkStatus();
}

absl::Status Trainer::ReadyToStep() {
  engine_->Shard();
  RETURN_IF_ERROR(engine_->StartRemote(start_step_));
  model_->ReserveActivations(spec_.train.micro_batch, spec_.seq_len / spec_.parallel.cp);
  RETURN_IF_ERROR(model_->comm_status());
  if (absl::Status s = model_->backend().Synchronize(); !s.ok()) return Annotate(s, "setting the model up on its device");
  return absl::OkStatus();
}

void Trainer::CreateWriters() {
  console_ = std::make_unique<Console>(options_.out, speaker(), options_.progress);
  writer_ = std::make_unique<checkpoint::CheckpointWriter>(
      spec_.checkpoint.host_budget_mb * (1 << 20),
      [this](int64_t step, const std::vector<checkpoint::CheckpointPiece>& pieces) { return WritePart(step, pieces); });
}

namespace {
// The mean of loss(inputs, targets) over the data's first `batches` micro-batches of B rows
// (in order; fewer when it holds fewer).
absl::StatusOr<float> MeanLoss(const data::Dataset& d, int B, int T, int batches,
                               const std::function<absl::StatusOr<float>(const int32_t*, const int32_t*)>& loss) {
  std::vector<int32_t> in(static_cast<size_t>(B) * T), tg(static_cast<size_t>(B) * T);
  const int64_t n = std::max<int64_t>(1, std::min<int64_t>(batches, d.rows() / B));
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    RETURN_IF_ERROR(d.Fill(i * B, B, 0, false, in.data(), tg.data()));
    ASSIGN_OR_RETURN(float l, loss(in.data(), tg.data()));
    sum += l;
  }
  return static_cast<float>(sum / static_cast<double>(n));
}
}  // namespace

int Trainer::TakeRows(const int32_t** inputs, const int32_t** targets, int B, int T) {
  if (!cp_shard_) return T;
  cp_shard_->Take(*inputs, cp_inputs_.data(), B, 1);
  cp_shard_->Take(*targets, cp_targets_.data(), B, 1);
  *inputs = cp_inputs_.data();
  *targets = cp_targets_.data();
  return cp_shard_->rows();
}

int64_t Trainer::RowsAt(int64_t step) const { return rows_base_ + (step - step_base_) * spec_.train.global_batch; }

absl::StatusOr<float> Trainer::Evaluate(model::GPT& model, const data::Dataset& data, int B, int T, int batches) {
  return MeanLoss(data, B, T, batches, [&](const int32_t* in, const int32_t* tg) -> absl::StatusOr<float> {
    return model.Forward(in, tg, B, T);
  });
}

StepReport Trainer::Step(int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  const int B = spec_.train.micro_batch, T = spec_.seq_len;
  const int accum = spec_.grad_accum();
  const int dp = data_dp_, rank = data_rank_;  // the batch's split (a replica's cp ranks read the same rows)
  model_->ZeroGrad();
  double loss = 0.0, bubble = 0.0;
  if (spec_.parallel.pp > 1) {
    loss = PipelineStep(step, &bubble);
  } else {
    for (int micro = 0; micro < accum; ++micro) {
      // Rank r's micro-batch is reads (micro*dp + r)*B onwards of the step's: together the
      // ranks read the step's global batch of rows. (Every shard of a replica reads them.)
      const int64_t k = RowsAt(step) + (static_cast<int64_t>(micro) * dp + rank) * B;
      if (absl::Status st = train_data_->Fill(k, B, spec_.train.seed, spec_.data.shuffle, inputs_.data(), targets_.data());
          !st.ok()) {
        comm_status_ = st;
        return StepReport{};
      }
      // This rank's next micro-batch read ahead while this one computes.
      const int64_t next = micro + 1 < accum ? k + static_cast<int64_t>(dp) * B : RowsAt(step + 1) + static_cast<int64_t>(rank) * B;
      train_data_->Prefetch(next, B, spec_.train.seed, spec_.data.shuffle);
      engine_->BeginMicroBatch(micro, accum);
      // (Context parallelism: this rank's rows of them, and the mean loss over those rows. Every
      // cp rank has T / cp of them, so the mean of the dp x cp ranks' means, which FinishStep
      // takes, is the mean over every token of the step, and their gradients' average its
      // gradient.)
      const int32_t *in = inputs_.data(), *tg = targets_.data();
      const int rows = TakeRows(&in, &tg, B, T);
      loss += model_->ForwardBackward(in, tg, B, rows, scaler_.scale() / accum);
    }
  }
  if (comm_status_.ok()) comm_status_ = model_->comm_status();
  if (!comm_status_.ok()) return StepReport{};
  loss /= accum;
  // A sharded replica's loss is the last stage's plus the earlier stages' MoE loss terms (tp
  // rank 0 gives each; FinishStep sums).
  const jobspec::ModelShard& sh = model_->shard();
  if (sh.tp_rank != 0) loss = 0;
  const double lr = jobspec::LearningRate(spec_.train, step);
  // AdamW's step count: the updates applied so far (a step skipped for an fp16 overflow is
  // not one), plus this one.
  const int64_t applied = step - scaler_.state().skipped_steps;
  const float scale = scaler_.scale();
  auto result = engine_->FinishStep(loss, lr, static_cast<int>(applied + 1), spec_.train.grad_clip, scale);
  if (!result.ok()) {
    comm_status_ = result.status();
    return StepReport{};
  }
  scaler_.Update(result->skipped);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const StepTiming timing = engine_->TakeTiming();
  StepReport r;
  r.step = step + 1;
  r.loss = static_cast<float>(result->loss);
  r.lr = lr;
  r.grad_norm = result->grad_norm;
  r.seconds = secs;
  r.tokens_per_second = static_cast<double>(B) * T * accum * dp / secs;
  r.comm_seconds = timing.exposed_comm;
  r.optimizer_seconds = timing.optimizer;
  r.compute_seconds = std::max(0.0, secs - timing.exposed_comm - timing.optimizer);
  r.comm_busy_seconds = timing.comm_busy;
  r.offload_bytes = timing.offload_bytes;
  r.bubble = bubble;
  r.notes = model_->backend().TakeNotices();
  if (model::MoeStats ms = model_->TakeMoeStats(); ms.forwards > 0) {
    r.moe_forwards = ms.forwards;
    r.moe_aux = ms.aux / ms.forwards;
    r.moe_z = ms.z / ms.forwards;
    r.moe_assignments = ms.assignments;
    r.moe_dropped = ms.dropped;
    r.moe_tokens_per_expert = std::move(ms.tokens_per_expert);
  }
  if (scaler_.enabled()) {
    r.loss_scale = scale;
    r.skipped = result->skipped;
    r.skipped_steps = scaler_.state().skipped_steps;
  }
  return r;
}

double Trainer::PipelineStep(int64_t step, double* bubble) {
  using Clock = std::chrono::steady_clock;
  const int B = spec_.train.micro_batch, T = spec_.seq_len;
  const int accum = spec_.grad_accum();
  const int dp = data_dp_, rank = data_rank_;
  const jobspec::ModelShard& sh = model_->shard();
  comm::Communicator* pp = groups_->pp;
  const int rows = T / spec_.parallel.cp;  // a sequence's rows on this rank (context parallelism: T / cp)
  const size_t n = model_->stage_floats(B, rows);  // this rank's rows of the residual stream
  double loss = 0, compute = 0;
  const auto t0 = Clock::now();
  // The neighbours: the previous and next stage (round the ring: the interleaved schedule's last
  // stage feeds the first stage's next chunk).
  const int prev = (sh.stage + sh.pp - 1) % sh.pp, next = (sh.stage + 1) % sh.pp;
  // A transfer's buffer (the slots': model/gpt.h) and peer.
  struct Transfer {
    const float* send = nullptr;  // a send's
    float* recv = nullptr;        // a receive's
    int peer = 0;
  };
  auto transfer = [&](const jobspec::PipeOp& t) -> Transfer {
    const int ts = t.slot >= 0 ? t.slot : t.micro % slots_;
    switch (t.kind) {
      case jobspec::PipeOp::kRecvAct: return {nullptr, model_->stage_input(ts, t.chunk), prev};
      case jobspec::PipeOp::kSendAct: return {model_->stage_output(ts, t.chunk), nullptr, next};
      case jobspec::PipeOp::kRecvGrad: return {nullptr, model_->stage_output_grad(ts, t.chunk), next};
      default: return {model_->stage_input_grad(ts, t.chunk), nullptr, prev};
    }
  };
  op_seconds_.assign(ops_.size(), 0.0);
  for (size_t i = 0; i < ops_.size(); ++i) {
    const jobspec::PipeOp& op = ops_[i];
    const int slot = op.slot >= 0 ? op.slot : op.micro % slots_;
    const int c = op.chunk;
    absl::Status s;
    const auto c0 = Clock::now();
    // The communicator reads and writes the slots' buffers on its own (NCCL: its stream):
    // the model's queued work on them done first.
    if (op.kind != jobspec::PipeOp::kForward && op.kind != jobspec::PipeOp::kBackward) model_->Sync();
    switch (op.kind) {
      case jobspec::PipeOp::kRecvAct:
      case jobspec::PipeOp::kSendAct:
      case jobspec::PipeOp::kRecvGrad:
      case jobspec::PipeOp::kSendGrad: {
        const Transfer a = transfer(op);
        if (!op.joint) {
          s = a.send != nullptr ? pp->Send(a.send, n, a.peer) : pp->Recv(a.recv, n, a.peer);
          break;
        }
        // An exchange (jobspec/pipeline.h): this transfer and the next, one SendRecv, which the
        // peer runs for the two that match them.
        const Transfer b = i + 1 < ops_.size() ? transfer(ops_[++i]) : Transfer{};
        const Transfer& out = a.send != nullptr ? a : b;
        const Transfer& in = a.send != nullptr ? b : a;
        if (out.send == nullptr || in.recv == nullptr || (out.send < in.recv + n && in.recv < out.send + n)) {
          s = absl::InternalError(absl::StrCat("pipeline stage ", sh.stage, ": op ", i,
                                               " is not an exchange of one send and one receive in separate buffers"));
          break;
        }
        s = pp->SendRecv(out.send, n, out.peer, in.recv, n, in.peer);
        break;
      }
      case jobspec::PipeOp::kForward: {
        s = train_data_->Fill(RowsAt(step) + (static_cast<int64_t>(op.micro) * dp + rank) * B, B, spec_.train.seed,
                              spec_.data.shuffle, inputs_.data(), targets_.data());
        if (!s.ok()) break;
        const int32_t *in = inputs_.data(), *tg = targets_.data();
        TakeRows(&in, &tg, B, T);
        const float l = model_->ForwardStage(slot, in, tg, B, rows, scaler_.scale() / accum, c);
        // The last stage's loss (its last chunk's); an earlier chunk's MoE layers add their loss terms.
        loss += sh.last() && c == sh.num_chunks() - 1 ? l : model_->last_moe_loss();
        op_seconds_[i] = std::chrono::duration<double>(Clock::now() - c0).count();
        break;
      }
      case jobspec::PipeOp::kBackward:
        engine_->BeginMicroBatch(op.micro, accum);
        model_->BackwardStage(slot, B, rows, c);
        op_seconds_[i] = std::chrono::duration<double>(Clock::now() - c0).count();
        break;
    }
    compute += op_seconds_[i];
    if (!s.ok()) {
      comm_status_ = s;
      return 0;
    }
  }
  // The pipeline's time is the slowest stage's: a stage that ends early (the last one ends
  // before the first stage's final backward) still idles until the step's end.
  float wall = static_cast<float>(std::chrono::duration<double>(Clock::now() - t0).count());
  // (Over mp, not pp: the pp group's transfers number differently on the middle stages, and
  // Gloo tags a collective by its sequence number.)
  std::vector<float> walls(static_cast<size_t>(groups_->mp->size()));
  if (absl::Status s = groups_->mp->AllGather(&wall, walls.data(), 1); !s.ok()) {
    comm_status_ = s;
    return 0;
  }
  const double slowest = *std::max_element(walls.begin(), walls.end());
  *bubble = slowest > 0 ? std::max(0.0, 1.0 - compute / slowest) : 0.0;
  return loss;
}

absl::StatusOr<float> Trainer::PipelineEval(int B, int T) {
  const jobspec::ModelShard& sh = model_->shard();
  const int rows = T / spec_.parallel.cp;
  const size_t n = model_->stage_floats(B, rows);  // this rank's rows of the residual stream
  const int prev = (sh.stage + sh.pp - 1) % sh.pp, next = (sh.stage + 1) % sh.pp, chunks = sh.num_chunks();
  auto sum = MeanLoss(*val_data_, B, T, spec_.eval.batches, [&](const int32_t* in, const int32_t* tg) -> absl::StatusOr<float> {
    float loss = 0;
    for (int c = 0; c < chunks; ++c) {  // (the interleaved schedule: each chunk in turn, round the ring)
      const bool first = sh.first() && c == 0, last = sh.last() && c == chunks - 1;
      if (!first) RETURN_IF_ERROR(groups_->pp->Recv(model_->stage_input(0, c), n, prev));
      const int32_t *rin = in, *rtg = tg;
      TakeRows(&rin, &rtg, B, T);
      const float l = model_->ForwardStage(0, rin, rtg, B, rows, 0.f, c);
      RETURN_IF_ERROR(model_->comm_status());
      if (!last) RETURN_IF_ERROR(groups_->pp->Send(model_->stage_output(0, c), n, next));
      // The last stage's loss; the other chunks' MoE layers add their loss terms (summed below).
      loss += last ? l : model_->last_moe_loss();
    }
    return loss;
  });
  RETURN_IF_ERROR(sum.status());
  float loss = sh.tp_rank == 0 ? *sum : 0.f;  // each stage's part (tp rank 0's), to every rank
  if (groups_->mp != nullptr) RETURN_IF_ERROR(groups_->mp->AllReduceSum(&loss, 1));
  if (groups_->cp != nullptr) {  // context parallelism: the mean over the cp ranks' rows
    RETURN_IF_ERROR(groups_->cp->AllReduceSum(&loss, 1));
    loss /= static_cast<float>(groups_->cp->size());
  }
  return loss;
}

bool Trainer::speaker() const { return world_rank() == 0; }
int Trainer::world_rank() const { return groups_->rank; }
int Trainer::world_size() const { return groups_->layout.world(); }

float Trainer::EvalLoss(int B, int T) {
  if (splits_replica()) {  // (context parallelism: each cp rank's rows, the mean over the cp group)
    auto v = PipelineEval(B, T);
    if (!v.ok()) {
      comm_status_ = v.status();
      return NAN;
    }
    return *v;
  }
  auto v = Evaluate(*model_, *val_data_, B, T, spec_.eval.batches);
  if (!v.ok()) {
    comm_status_ = v.status();
    return NAN;
  }
  return *v;
}

absl::Status Trainer::WriteCheckpoint(int64_t step) {
  namespace fs = std::filesystem;
  const int rank = world_rank();
  // Every rank of the job: the world group, or, where the world is the engine's group (data
  // parallel only) or this rank alone, through the engine's thread, which owns that group.
  comm::Communicator* world = groups_->world;
  auto barrier = [&] { return world != nullptr && world != groups_->grads() ? world->Barrier() : engine_->Barrier(); };
  const std::string tmp = (fs::path(spec_.checkpoint.dir) / absl::StrCat(".", checkpoint::CheckpointDirName(step), ".tmp")).string();
  std::error_code ec;
  if (rank == 0) fs::remove_all(tmp, ec);  // a stale one from a crash
  RETURN_IF_ERROR(barrier());              // ...gone before any rank writes (ranks may share the directory)
  fs::create_directories(tmp, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("creating ", tmp, ": ", ec.message()));
  ASSIGN_OR_RETURN(std::vector<checkpoint::CheckpointPiece> pieces, engine_->CheckpointPieces());
  RETURN_IF_ERROR(checkpoint::WriteCheckpointPart(tmp, rank, model_->tensors(), pieces, options_.worker.checkpoint_cuts).status());
  RETURN_IF_ERROR(barrier());  // every part is written
  if (rank != 0) return absl::OkStatus();  // rank 0 publishes the directory they share
  RETURN_IF_ERROR(checkpoint::WriteCheckpointManifest(tmp, spec_.model, StateAt(step), Layout(), world_size(),
                                          options_.worker.checkpoint_cuts));
  ASSIGN_OR_RETURN(std::string path, checkpoint::PublishCheckpoint(tmp, spec_.checkpoint.dir, step, spec_.checkpoint.keep));
  Print(absl::StrCat("checkpoint ", path));
  return absl::OkStatus();
}

Trainer::~Trainer() = default;

checkpoint::CheckpointState Trainer::StateAt(int64_t step) {
  checkpoint::CheckpointState st;
  st.step = step;
  st.seed = spec_.train.seed;
  st.data_rows = RowsAt(step);
  if (!spec_.data.tokenizer.empty()) {
    std::error_code ec;
    const std::filesystem::path abs = std::filesystem::absolute(spec_.data.tokenizer, ec);
    st.tokenizer = ec ? spec_.data.tokenizer : abs.string();
  }
  if (!scaler_.enabled()) return st;
  std::lock_guard<std::mutex> l(scale_mu_);
  auto it = scale_at_.find(step);
  st.loss_scale = it != scale_at_.end() ? it->second : scaler_.state();
  scale_at_.erase(scale_at_.begin(), it);  // older steps' are written
  return st;
}

absl::Status Trainer::WritePart(int64_t step, const std::vector<checkpoint::CheckpointPiece>& pieces) {
  namespace fs = std::filesystem;
  const int rank = world_rank();
  if (options_.worker.on_checkpoint_part) {  // to the shard servers, from memory
    std::vector<checkpoint::CheckpointFile> files = checkpoint::CheckpointPartFiles(rank, model_->tensors(), pieces, options_.worker.checkpoint_cuts);
    if (rank == 0) {
      for (auto& f : checkpoint::CheckpointManifestFiles(spec_.model, StateAt(step), Layout(), world_size(),
                                             options_.worker.checkpoint_cuts)) {
        files.push_back(std::move(f));
      }
    }
    return options_.worker.on_checkpoint_part(files, step);
  }
  const std::string tmp =
      (fs::path(spec_.checkpoint.dir) / absl::StrCat(".", checkpoint::CheckpointDirName(step), ".rank", rank, ".tmp")).string();
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("creating ", tmp, ": ", ec.message()));
  ASSIGN_OR_RETURN(std::vector<std::string> files,
                   checkpoint::WriteCheckpointPart(tmp, rank, model_->tensors(), pieces, options_.worker.checkpoint_cuts));
  if (rank == 0) {
    RETURN_IF_ERROR(checkpoint::WriteCheckpointManifest(tmp, spec_.model, StateAt(step), Layout(), world_size(),
                                            options_.worker.checkpoint_cuts));
    files.push_back("manifest.json");
    files.push_back("config.json");
  }
  // One rank and no coordinator: the directory is the whole checkpoint; publish it here.
  ASSIGN_OR_RETURN(std::string path, checkpoint::PublishCheckpoint(tmp, spec_.checkpoint.dir, step, spec_.checkpoint.keep));
  Print(absl::StrCat("checkpoint ", path));
  return absl::OkStatus();
}

absl::Status Trainer::Run() {
  const jobspec::JobSpec& s = spec_;
  const int B = s.train.micro_batch, T = s.seq_len;
  Print(absl::StrFormat(
      "job %s: %zu parameters | %d layers, %d heads, %d embd, vocab %d | B %d x T %d x accum %d x dp %d "
      "= %d tokens/step | %ld steps",
      s.name, model_->num_params(), s.model.n_layer, s.model.n_head, s.model.n_embd,
      s.model.vocab_size, B, T, s.grad_accum(), s.parallel.dp, B * T * s.grad_accum() * s.parallel.dp,
      static_cast<long>(s.train.steps)));
  const MemoryAccount mem = engine_->memory();
  auto mb = [](size_t b) { return static_cast<double>(b) / (1 << 20); };
  Print(absl::StrFormat(
      "memory per rank (ZeRO %d, dp %d): params %.2f + grads %.2f + optimizer %.2f = %.2f MB (the ZeRO formula: "
      "%.2f MB, %+.1f%%) | activations %.2f MB | working %.2f MB",
      engine_->stage(), engine_->dp(), mb(mem.params), mb(mem.grads), mb(mem.optimizer), mb(mem.model_state()),
      mb(mem.predicted), 100.0 * (static_cast<double>(mem.model_state()) / mem.predicted - 1), mb(mem.activations),
      mb(mem.working)));
  auto eval = [&](int64_t step) {
    if (!val_data_) return;
    const float v = EvalLoss(B, T);
    val_losses_.push_back({step, v});
    if (options_.worker.on_eval) options_.worker.on_eval(step, v);
    Print(absl::StrFormat("val loss %.4f (step %ld)", v, static_cast<long>(step)));
  };
  if (start_step_ == 0) eval(0);
  const auto t_start = std::chrono::steady_clock::now();
  for (int64_t step = start_step_; step < s.train.steps; ++step) {
    StepReport r = Step(step);
    RETURN_IF_ERROR(comm_status_);
    reports_.push_back(r);
    step_memory_ = engine_->memory();
    if (!std::isfinite(r.loss)) {
      return absl::InternalError(absl::StrCat("loss is not finite at step ", r.step,
                                              " (lower train.lr or enable train.grad_clip)"));
    }
    if (options_.print_losses) {
      Print(absl::StrFormat("step %ld loss %.9g", static_cast<long>(r.step), r.loss));
    } else {
      StepLine line{r.step, s.train.steps, r.loss, r.lr, r.grad_norm, r.seconds, r.tokens_per_second,
                    r.compute_seconds, r.comm_seconds, r.optimizer_seconds};
      line.loss_scale = r.loss_scale;
      line.skipped = r.skipped;
      line.skipped_steps = r.skipped_steps;
      line.offload_bytes = static_cast<double>(r.offload_bytes);
      if (r.moe_forwards > 0) line.SetMoe(r.moe_aux, r.moe_z, r.moe_dropped, r.moe_assignments, r.moe_tokens_per_expert);
      line.notes = r.notes;
      Print(FormatStepLine(line));
    }
    const bool last = r.step == s.train.steps;
    // Every rank answers alike (the worker: the same stop step on each), so the ranks stop together.
    const bool stop_here = !last && options_.worker.stop_here && options_.worker.stop_here(r.step);
    if ((s.eval.every > 0 && r.step % s.eval.every == 0) || last) {
      eval(r.step);
    }
    if ((s.checkpoint.every > 0 && (r.step % s.checkpoint.every == 0 || last)) || stop_here) {
      const auto c0 = std::chrono::steady_clock::now();
      const bool async = options_.worker.on_checkpoint_part || world_size() == 1;
      if (scaler_.enabled()) {  // the scaler's state as of this step, for the writer
        std::lock_guard<std::mutex> l(scale_mu_);
        scale_at_[r.step] = scaler_.state();
      }
      if (async) {
        ASSIGN_OR_RETURN(std::vector<checkpoint::CheckpointPiece> live, engine_->CheckpointPieces());
        RETURN_IF_ERROR(writer_->Snapshot(r.step, live));
      } else {
        RETURN_IF_ERROR(WriteCheckpoint(r.step));
      }
      r.checkpoint_stall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
      reports_.back().checkpoint_stall_seconds = r.checkpoint_stall_seconds;
    }
    console_->Progress(r.step, s.train.steps, r.step - start_step_,
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count());
    if (options_.worker.on_step && !options_.worker.on_step(r)) {
      return absl::CancelledError(absl::StrCat("stopped at step ", r.step));
    }
    if (stop_here) {
      Print(absl::StrCat("stopped after step ", r.step, " and its checkpoint (preempted)"));
      stopped_early_ = true;
      break;
    }
    if (options_.stop_after > 0 && r.step >= options_.stop_after && !last) {
      Print(absl::StrCat("stopped after step ", r.step, " (--stop-after)"));
      break;
    }
  }
  console_->ClearProgress();
  RETURN_IF_ERROR(comm_status_);          // a device evaluation that failed
  RETURN_IF_ERROR(writer_->Flush());        // every checkpoint written
  RETURN_IF_ERROR(engine_->SyncRemote());  // parameter-server mode: the servers' final parameters
  // The whole model on every rank at the end (ZeRO 3 gathers it): for --save and callers. Under
  // ZeRO 3 the training's buffers go first, so that the rank's whole fp32 model takes their
  // room rather than adding to its training peak.
  if (engine_->stage() == 3) {
    model_->ReleaseActivations();
    engine_->ReleaseWorking();
  }
  RETURN_IF_ERROR(engine_->GatherParams());
  if (!options_.save_dir.empty() && speaker()) {
    RETURN_IF_ERROR(model::SaveHFModel(options_.save_dir, *model_));
    Print(absl::StrCat("saved ", options_.save_dir));
  }
  return absl::OkStatus();
}

}  // namespace gantry::train
