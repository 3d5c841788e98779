// The ZeRO engine (zero.h): buckets planned by worker/train/buckets.h, their reductions run by
// the communication thread's CommWork (comm_work.h), stage-3 gathering by UnitGather
// (unit_gather.h), the offloaded optimizer's host side by HostOffload (offload.h) and the
// parameter server by RemoteParams (remote_params.h); the step (FinishStep) reads reduce,
// clip, update, gather.
#include "worker/train/zero.h"
#include "jobspec/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cast.h"
#include "kernels/grad_norm.h"

namespace gantry::train {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

void ZeroEngine::ReleaseWorking() {
  if (comm_) (void)comm_->WaitAll();
  DropPrefetches();
  work_->pool().ReleaseFree();
}

size_t ZeroEngine::PredictedModelStateBytes(size_t num_params, int stage, int dp, bool offload, bool offload_params) {
  // The planner's accounting for fp32 (params, grads, m, v), sharded by stage.
  return static_cast<size_t>(
      jobspec::StateBytes(static_cast<double>(num_params), jobspec::Precision::kFp32, false, stage, dp, offload, offload_params)
          .model_state());
}

absl::Status ZeroEngine::OffloadOptimizer() {
  if (stage_ < 1 || remote_ != nullptr) {
    return absl::FailedPreconditionError("optimizer offload shards the optimizer: ZeRO stage 1-3, placement worker");
  }
  opt_ = std::make_unique<optim::AdamW>(model_->tensors(), own_, local_size_, opt_config_, &kernels::CpuBackend());
  ASSIGN_OR_RETURN(offload_, HostOffload::Create(&model_->backend(), own_, local_size_));
  NotePeak();
  return absl::OkStatus();
}

absl::Status ZeroEngine::OffloadParams() {
  if (stage_ != 3 || !offload_) {
    return absl::FailedPreconditionError(
        "parameter offload keeps ZeRO 3's shard as the offloaded optimizer's master: stage 3, optimizer offloaded first");
  }
  offload_params_ = true;
  param_shard_.Reset();
  NotePeak();
  return absl::OkStatus();
}

absl::StatusOr<size_t> ZeroEngine::OffloadedStep(double lr, int step) {
  // The reduced (and clipped) gradient pieces: stage 1 in place in the model's gradients,
  // stages 2 and 3 in the compact shard. The parameters: the model's (stages 1, 2), the
  // compact shard (3), or none (offloaded parameters: the updated master is the shard).
  const float* grads = stage_ == 1 ? model_->grads() : grad_shard_.data();
  float* params = offload_params_ ? nullptr : stage_ == 3 ? param_shard_.data() : model_->params();
  return offload_->Step(*opt_, grads, /*grads_flat=*/stage_ == 1, params, /*params_flat=*/stage_ != 3, lr, step);
}

absl::StatusOr<std::unique_ptr<ZeroEngine>> ZeroEngine::Create(model::GPT* model, comm::Communicator* comm,
                                                               int stage, double bucket_mb,
                                                               const kernels::AdamWConfig& config,
                                                               RemoteOptimizer* remote, int staleness,
                                                               ModelParallel mp) {
  if (stage < 0 || stage > 3) return absl::InvalidArgumentError(absl::StrCat("ZeRO stage ", stage, " is not 0, 1, 2 or 3"));
  if (remote != nullptr && stage == 3) {
    return absl::InvalidArgumentError("parameter-server mode keeps whole parameters on the workers: ZeRO stage 3 shards them");
  }
  if (!(bucket_mb > 0)) return absl::InvalidArgumentError(absl::StrCat("bucket size ", bucket_mb, " MB must be > 0"));
  std::unique_ptr<ZeroEngine> e(new ZeroEngine());
  e->model_ = model;
  ASSIGN_OR_RETURN(e->work_, CommWork::Create(&model->backend()));
  e->mp_ = mp;
  e->opt_config_ = config;
  e->counted_ = MergedRanges(model->tensors(), [](const jobspec::ParamTensor& t) { return !t.replica; });
  if (mp.emb != nullptr) {
    const jobspec::ParamTensor* wte = model->FindTensor("wte.weight");
    e->tied_begin_ = wte->offset;
    e->tied_end_ = wte->offset + wte->numel;
  }
  e->stage_ = stage;
  e->dp_ = comm->size();
  e->rank_ = comm->rank();
  if (model->shard().ep > 1) {
    if (stage > 1 || remote != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("expert parallelism runs with ZeRO 0 or 1 and AdamW on the workers "
                                                     "(stage ", stage, remote ? ", parameter-server mode)" : ")"));
    }
    e->experts_ = MergedRanges(model->tensors(), [](const jobspec::ParamTensor& t) {
      return t.name.find(".mlp.experts.") != std::string::npos;
    });
  }
  // The buckets (worker/train/buckets.h), in backward order; expert ranges reduced over edp
  // (or alone, when no other replica holds them).
  std::vector<size_t> bounds;
  for (int u = 0; u <= model->num_units(); ++u) bounds.push_back(model->unit_begin(u));
  std::vector<BucketPlan> plan =
      GroupUnits(bounds, bucket_mb * (1 << 20), stage == 3, &e->unit_bucket_, model->ChunkStartUnits());
  if (!e->experts_.empty()) {
    plan = CutAtRanges(plan, e->experts_, &e->unit_bucket_);
    e->edp_rank_ = mp.edp != nullptr ? mp.edp->rank() : 0;
  }
  for (const BucketPlan& p : plan) {
    Bucket b;
    b.begin = p.begin;
    b.end = p.end;
    b.units = p.units;
    b.lead = p.lead;
    b.group_rank = e->rank_;
    b.group_size = e->dp_;
    if (p.expert) {
      b.group = mp.edp != nullptr ? mp.edp : &e->solo_;
      b.group_rank = b.group->rank();
      b.group_size = b.group->size();
    }
    e->buckets_.push_back(b);
  }
  std::vector<optim::ShardSegment> segments;
  for (Bucket& b : e->buckets_) {
    b.pending = b.units;
    b.piece = PieceSize(b.size(), b.group_size);
    b.local = e->local_size_;
    e->local_size_ += b.piece;
    if (e->PieceBegin(b) < e->PieceEnd(b)) segments.push_back({e->PieceBegin(b), e->PieceEnd(b), b.local});
  }
  e->own_ = segments;
  kernels::Backend* be = &model->backend();
  if (remote != nullptr) {
    e->opt_ = std::make_unique<optim::AdamW>(model->tensors(), std::vector<optim::ShardSegment>{}, 0, config, be);  // no state here
  } else if (stage == 0) {
    e->opt_ = std::make_unique<optim::AdamW>(model->tensors(), model->num_params(), config, be);
  } else {
    e->opt_ = std::make_unique<optim::AdamW>(model->tensors(), segments, e->local_size_, config, be);
  }
  if (stage >= 2) e->grad_shard_.Assign(be, e->local_size_);
  if (stage == 3) e->param_shard_.Assign(be, e->local_size_);
  if (e->dp_ > 1 || stage >= 1 || mp.emb != nullptr) {
    e->comm_ = std::make_unique<comm::CommThread>(comm);
    CommWork* work = e->work_.get();
    e->comm_->Submit([work](comm::Communicator&) { return work->BindThread(); });
    model->set_param_host(e.get());
  }
  if (stage == 3) {
    ZeroEngine* engine = e.get();
    e->gather_ = std::make_unique<UnitGather>(
        e->unit_bucket_, static_cast<int>(e->buckets_.size()),
        UnitGather::Ops{[engine](int k, uint64_t* ticket) {
                          return engine->StartGather(engine->buckets_[static_cast<size_t>(k)], ticket);
                        },
                        [engine](uint64_t ticket) { (void)engine->Wait(ticket); },
                        [engine](float* p) { engine->work_->pool().Give(p); }});
  }
  if (remote != nullptr) {
    ZeroEngine* engine = e.get();
    e->remote_ = std::make_unique<RemoteParams>(remote, model, e->rank_, staleness, [engine] { return engine->Barrier(); });
  }
  return e;
}

ZeroEngine::~ZeroEngine() {
  if (comm_) {
    (void)comm_->WaitAll();
    model_->set_param_host(nullptr);
  }
}

void ZeroEngine::Shard() {
  kernels::Backend& be = model_->backend();
  if (offload_ && model_->has_param_buffer()) {  // the master pieces, from the parameters as loaded
    offload_->LoadMaster(model_->params());
    model_->Sync();  // a copy's error is kept in the model's status, which the first step answers
  }
  if (stage_ == 3 && model_->has_param_buffer()) {
    if (!offload_params_) {  // (offloaded, the master pieces are the shard)
      for (const Bucket& b : buckets_) {
        float* dst = param_shard_.data() + b.local;
        be.Zero(dst, b.piece * sizeof(float));
        be.Copy(dst, model_->params() + PieceBegin(b), (PieceEnd(b) - PieceBegin(b)) * sizeof(float));
      }
    }
    model_->FreeParamBuffer();
  }
  if (stage_ >= 2) model_->FreeGradBuffer();
  NotePeak();
}

void ZeroEngine::LoadOptimizerState(const float* m, const float* v) {
  // Parameter-server mode only (a ZeRO rank reads its own ranges straight into AdamW, see
  // local_optimizer()): kept whole until StartRemote sends it to the servers.
  if (remote_) remote_->KeepState(m, v);
}

absl::Status ZeroEngine::Wait(uint64_t ticket) {
  const auto t0 = Clock::now();
  absl::Status s = comm_->Wait(ticket);
  timing_.exposed_comm += Since(t0);
  return s;
}

absl::Status ZeroEngine::WaitAll() {
  const auto t0 = Clock::now();
  absl::Status s = comm_->WaitAll();
  timing_.exposed_comm += Since(t0);
  in_flight_.clear();
  return s;
}

absl::StatusOr<std::vector<checkpoint::CheckpointPiece>> ZeroEngine::CheckpointPieces() {
  std::vector<checkpoint::CheckpointPiece> out;
  if (remote_ != nullptr) {  // this rank's even share, with m and v from the shard servers
    std::vector<FlatRange> ranges;
    for (const Bucket& b : buckets_) ranges.push_back({PieceBegin(b), PieceEnd(b)});
    ASSIGN_OR_RETURN(out, remote_->Pieces(ranges));
    return HostPieces(std::move(out), /*state_on_device=*/false);
  }
  if (offload_) {  // the master pieces and their state, in host memory already
    for (const Bucket& b : buckets_) {
      const size_t pb = PieceBegin(b), pe = PieceEnd(b);
      if (pb < pe) out.push_back({pb, pe, offload_->master() + b.local, opt_->m().data() + b.local, opt_->v().data() + b.local});
    }
    return out;
  }
  for (const Bucket& b : buckets_) {
    const size_t pb = PieceBegin(b), pe = PieceEnd(b);
    if (pb >= pe) continue;
    checkpoint::CheckpointPiece p;
    p.flat_begin = pb;
    p.flat_end = pe;
    p.params = stage_ == 3 ? param_shard_.data() + b.local : model_->params() + pb;
    const size_t at = stage_ == 0 ? pb : b.local;  // stage 0's state is the whole flat buffer
    p.m = opt_->m().data() + at;
    p.v = opt_->v().data() + at;
    out.push_back(p);
  }
  return HostPieces(std::move(out), /*state_on_device=*/true);
}

absl::StatusOr<std::vector<checkpoint::CheckpointPiece>> ZeroEngine::HostPieces(std::vector<checkpoint::CheckpointPiece> pieces,
                                                                    bool state_on_device) {
  if (!work_->on_peer()) return pieces;  // the host reads the model's memory in place
  kernels::Backend& be = model_->backend();
  size_t total = 0;
  for (const checkpoint::CheckpointPiece& p : pieces) total += p.flat_end - p.flat_begin;
  host_pieces_.Assign(total * (state_on_device ? 3 : 1));
  float* at = host_pieces_.data();
  for (checkpoint::CheckpointPiece& p : pieces) {
    const size_t n = p.flat_end - p.flat_begin;
    for (const float** field : {&p.params, &p.m, &p.v}) {
      if (field != &p.params && !state_on_device) continue;
      be.CopyToHost(at, *field, n * sizeof(float));
      *field = at;
      at += n;
    }
  }
  RETURN_IF_ERROR(be.Synchronize());
  return pieces;
}

absl::Status ZeroEngine::SyncRemote() { return remote_ ? remote_->Sync() : absl::OkStatus(); }

absl::Status ZeroEngine::StartRemote(int64_t start_step) { return remote_ ? remote_->Start(start_step) : absl::OkStatus(); }

absl::Status ZeroEngine::Barrier() {
  if (!comm_) return absl::OkStatus();
  return Wait(comm_->Submit([](comm::Communicator& c) { return c.Barrier(); }));
}

absl::Status ZeroEngine::GatherParams() {
  if (stage_ != 3 || model_->has_param_buffer()) return absl::OkStatus();
  model_->AllocateParamBuffer();
  const float* shard = param_shard_.data();
  float* staged = nullptr;
  if (offload_params_) {  // the shard from the host, whole
    staged = work_->pool().Take(local_size_, &model_->backend());
    model_->backend().CopyToDevice(staged, offload_->master(), local_size_ * sizeof(float));
    shard = staged;
  }
  OrderForComm();
  for (const Bucket& b : buckets_) SubmitGather(b, shard + b.local, b.piece);
  absl::Status s = WaitAll();
  if (staged != nullptr) work_->pool().Give(staged);
  model_->MarkParamsChanged();
  return s;
}

void ZeroEngine::SubmitGather(const Bucket& b, const float* piece, size_t len) {
  float* params = model_->params();
  comm_->Submit([this, &b, piece, len, params](comm::Communicator& dp) {
    comm::Communicator& c = GroupOf(b, dp);
    kernels::Backend* on = work_->backend();
    float* out = work_->pool().Take(b.piece * b.group_size, on);
    const float* in = piece;
    float* staged = nullptr;
    absl::Status s;
    if (len != b.piece) {  // the short last piece, padded
      staged = work_->pool().Take(b.piece, on);
      work_->Copy(staged, piece, len);
      work_->Zero(staged + len, b.piece - len);
      s = work_->Sync();  // staged before the collective reads it
      in = staged;
    }
    s.Update(c.AllGather(in, out, b.piece));
    work_->Copy(params + b.begin, out, b.size());
    s.Update(work_->Sync());
    if (staged != nullptr) work_->pool().Give(staged);
    work_->pool().Give(out);
    return s;
  });
}

void ZeroEngine::BeginMicroBatch(int micro, int accum) {
  micro_ = micro;
  if (gather_) gather_->BeginMicroBatch();
  last_micro_ = micro == accum - 1;
  for (Bucket& b : buckets_) b.pending = b.units;
}

float* ZeroEngine::AcquireParams(int unit) {
  if (stage_ < 3) return model_->params() + model_->unit_begin(unit);
  // A failure is kept by the thread and answered by FinishStep; forward goes on with
  // whatever the buffer holds until then.
  float* p = gather_->Acquire(unit);
  NotePeak();
  return p;
}

float* ZeroEngine::StartGather(const Bucket& b, uint64_t* ticket) {
  OrderForComm();  // queued work may still read the buffer the pool hands out
  float* out = work_->pool().Take(b.piece * b.group_size, &model_->backend());
  const float* in = param_shard_.data() + b.local;
  const size_t piece = b.piece;
  float* staged = nullptr;
  if (offload_params_) {  // the own piece from the host first
    staged = work_->pool().Take(piece, &model_->backend());
    model_->backend().CopyToDevice(staged, offload_->master() + b.local, piece * sizeof(float));
    timing_.offload_bytes += piece * sizeof(float);
    OrderForComm();  // copied before the thread's collective reads it
    in = staged;
  }
  *ticket = comm_->Submit([this, in, out, piece, staged](comm::Communicator& c) {
    absl::Status s = c.AllGather(in, out, piece);
    if (staged != nullptr) work_->pool().Give(staged);
    return s;
  });
  return out;
}

void ZeroEngine::ReleaseParams(int unit) {
  if (stage_ == 3) gather_->Release(unit);
}

float* ZeroEngine::AcquireGrads(int unit) {
  if (stage_ < 2) return model_->grads() + model_->unit_begin(unit);
  Bucket& b = buckets_[static_cast<size_t>(unit_bucket_[static_cast<size_t>(unit)])];
  if (!b.work) {
    // At most two buckets in flight: backward waits rather than outgrow the network.
    while (in_flight_.size() >= 2) {
      (void)Wait(in_flight_.front());
      in_flight_.pop_front();
    }
    b.work = work_->pool().Take(b.piece * b.group_size, &model_->backend());
    model_->backend().Zero(b.work, b.piece * b.group_size * sizeof(float));
    NotePeak();
  }
  return b.work + (model_->unit_begin(unit) - b.begin);
}

void ZeroEngine::GradsDone(int unit) {
  const int k = unit_bucket_[static_cast<size_t>(unit)];
  if (--buckets_[static_cast<size_t>(k)].pending != 0) return;
  // The lead and the parts cut from it (expert parallelism), in order.
  for (size_t j = static_cast<size_t>(k); j < buckets_.size() && buckets_[j].lead == k; ++j) {
    LaunchBucket(static_cast<int>(j));
  }
}

void ZeroEngine::LaunchBucket(int k) {
  Bucket& b = buckets_[static_cast<size_t>(k)];
  if (last_micro_ || stage_ >= 2) OrderForComm();  // backward's gradients written before the thread reads them
  if (last_micro_ && tied_end_ > tied_begin_ && b.begin <= tied_begin_ && tied_end_ <= b.end) {
    // The tied wte: this end's gradient plus the other end's, before the DP reduction.
    float* g = model_->grads() + tied_begin_;
    const size_t n = tied_end_ - tied_begin_;
    comm::Communicator* emb = mp_.emb;
    comm_->Submit([g, n, emb](comm::Communicator&) { return emb->AllReduceSum(g, n); });
  }
  // The bucket's reduction, by stage: 0 and 1 once per step, after the last micro-batch (0 not
  // at all in a DP group of one), 2 and 3 each micro-batch, from its working buffer into the
  // shard. The mean over the DP group: 1/dp, also for an expert range reduced over its smaller
  // group. bf16 reduction: the fp32 gradients are rounded into a bf16 staging buffer, the
  // collective sums that, and its result is widened back into fp32 before the 1/dp scale.
  BucketReduction r;
  r.group = b.group;
  r.begin = b.begin;
  r.end = b.end;
  r.piece = b.piece;
  r.inv = 1.0f / static_cast<float>(dp_);
  r.bf16 = grad_reduce_bf16_;
  if (stage_ == 0) {
    if (!last_micro_ || dp_ == 1) return;
    r.kind = BucketReduction::Kind::kAllReduceMean;
    r.grads = model_->grads();
  } else if (stage_ == 1) {
    if (!last_micro_) return;
    r.kind = BucketReduction::Kind::kReduceScatterMean;
    r.grads = model_->grads();
    r.pb = PieceBegin(b);
    r.pe = PieceEnd(b);
  } else {
    r.kind = BucketReduction::Kind::kReduceScatterAccumulate;
    r.work = std::exchange(b.work, nullptr);
    r.shard = grad_shard_.data() + b.local;
    r.first = micro_ == 0;
  }
  CommWork* w = work_.get();
  const uint64_t ticket = comm_->Submit([w, r](comm::Communicator& dp_group) { return w->Reduce(dp_group, r); });
  if (stage_ >= 2) in_flight_.push_back(ticket);  // AcquireGrads keeps at most two in flight
}

absl::StatusOr<ZeroEngine::StepResult> ZeroEngine::FinishStep(double local_loss, double lr, int step, double grad_clip,
                                                               float loss_scale) {
  // Reduce: the buckets' reductions done (launched during backward); the gradients' squares
  // and the loss summed over the groups.
  if (comm_) RETURN_IF_ERROR(WaitAll());
  DropPrefetches();  // gathered before this update: stale after it
  StepResult r;
  if (ClipsOnDevice(loss_scale)) {
    r.loss = local_loss;
    RETURN_IF_ERROR(DeviceClippedUpdate(grad_clip, lr, step, &r.grad_norm));
    ParamsUpdated();
    NotePeak();
    return r;
  }
  ASSIGN_OR_RETURN(const double sum_sq, ReduceNormAndLoss(local_loss, &r.loss));
  // Clip. Unscaled: the scale is a power of 2, so the norm of the unscaled gradients is exactly
  // this one times 1/scale, and scaling each gradient once by coef/scale rounds as
  // GradScaler's unscale (exact) followed by the clip does.
  const float inv_scale = 1.0f / loss_scale;
  r.grad_norm = std::sqrt(sum_sq) * inv_scale;
  if (loss_scale != 1.0f && !std::isfinite(sum_sq)) {
    r.skipped = true;
    NotePeak();
    return r;
  }
  const float coef = kernels::clip_coefficient(r.grad_norm, static_cast<float>(grad_clip)) * inv_scale;
  // Update, then gather: here, or on the shard servers (parameter-server mode).
  if (remote_ != nullptr) {
    RETURN_IF_ERROR(PushAndPull(coef, lr, step));
  } else {
    RETURN_IF_ERROR(Update(coef, lr, step));
    RETURN_IF_ERROR(GatherUpdated());
    ParamsUpdated();
  }
  NotePeak();
  return r;
}

void ZeroEngine::ParamsUpdated() {
  // Mixed precision: the working copy written by the update, or recast before the next forward.
  if (working_written_) {
    model_->WorkingCopyWritten();
  } else {
    model_->MarkParamsChanged();
  }
  working_written_ = false;
}

bool ZeroEngine::ClipsOnDevice(float loss_scale) const {
  const size_t n = model_->num_params();
  return stage_ == 0 && dp_ == 1 && mp_.mp == nullptr && mp_.emb == nullptr && mp_.edp == nullptr && remote_ == nullptr &&
         !offload_ && experts_.empty() &&
         loss_scale == 1.0f && counted_.size() == 1 && counted_[0] == std::make_pair(size_t{0}, n);
}

absl::Status ZeroEngine::DeviceClippedUpdate(double grad_clip, double lr, int step, double* grad_norm) {
  kernels::Backend& be = model_->backend();
  if (clip_.size() == 0) {
    clip_.Assign(&be, 6);  // doubles at floats 0 and 2, the multiplier at 4
    clip_host_.AssignHost(&be, 2);
  }
  auto* sum_sq = reinterpret_cast<double*>(clip_.data());
  double* norm = sum_sq + 1;
  float* multiplier = clip_.data() + 4;
  be.SumSquaresTo(sum_sq, model_->grads(), static_cast<int64_t>(model_->num_params()));
  be.ClipMultiplier(multiplier, norm, sum_sq, static_cast<float>(grad_clip), 1.0f);
  be.CopyToHostAsync(clip_host_.data(), norm, sizeof(double));
  RETURN_IF_ERROR(Update(1.0f, lr, step, multiplier));  // waits for the update: the norm is up too
  std::memcpy(grad_norm, clip_host_.data(), sizeof(double));
  return absl::OkStatus();
}

double ZeroEngine::LocalSquares(double* expert_sq) const {
  kernels::Backend& be = model_->backend();
  const size_t n = model_->num_params();
  *expert_sq = 0;
  // Squares of the gradients this rank holds: all of them (stage 0, identical on every
  // rank) or its pieces, summed over the group after.
  // Expert parallelism, ZeRO 0: the expert ranges differ between the ep ranks (each edp
  // group's first rank counts its experts in the sum over the group); the rest is the same
  // on every rank.
  if (stage_ == 0 && !experts_.empty()) {
    if (edp_rank_ == 0) *expert_sq = CountedSquares(model_->grads(), experts_);
    return CountedSquares(model_->grads(), Complement(experts_, n));
  }
  if (stage_ == 0) return CountedSquares(model_->grads(), {{0, n}});
  if (stage_ == 1) {
    std::vector<FlatRange> own;
    for (const optim::ShardSegment& s : own_) own.push_back({s.flat_begin, s.flat_end});
    return CountedSquares(model_->grads(), own);
  }
  if (counted_.size() == 1 && counted_[0] == FlatRange{0, n}) {
    return be.SumSquares(grad_shard_.data(), static_cast<int64_t>(local_size_));
  }
  double sum_sq = 0;  // a tensor-parallel shard: its own pieces of the tensors it speaks for
  for (const optim::ShardSegment& s : own_) {
    for (const auto& [cb, ce] : counted_) {
      const size_t lo = std::max(s.flat_begin, cb), hi = std::min(s.flat_end, ce);
      if (lo < hi) sum_sq += be.SumSquares(grad_shard_.data() + s.local + (lo - s.flat_begin), static_cast<int64_t>(hi - lo));
    }
  }
  return sum_sq;
}

absl::StatusOr<double> ZeroEngine::ReduceNormAndLoss(double local_loss, double* loss) {
  double expert_sq = 0;
  double sum_sq = LocalSquares(&expert_sq);
  *loss = local_loss;
  if (dp_ > 1) {
    float sums[2] = {static_cast<float>(stage_ == 0 ? expert_sq : sum_sq), static_cast<float>(local_loss)};
    RETURN_IF_ERROR(Wait(comm_->Submit([&sums](comm::Communicator& c) { return c.AllReduceSum(sums, 2); })));
    sum_sq = stage_ == 0 ? sum_sq + sums[0] : sums[0];
    *loss = sums[1] / static_cast<float>(dp_);
  }
  if (mp_.mp != nullptr) {  // every shard's squares; the loss from the last stage
    float sums[2] = {static_cast<float>(sum_sq), static_cast<float>(*loss)};
    RETURN_IF_ERROR(mp_.mp->AllReduceSum(sums, 2));
    sum_sq = sums[0];
    *loss = sums[1];
  }
  return sum_sq;
}

absl::Status ZeroEngine::PushAndPull(float coef, double lr, int step) {
  // Each rank pushes its own pieces of the reduced gradient (ZeRO 0: its even share of the
  // all-reduced buffer; 1: the pieces it reduce-scattered, in place; 2: its compact gradient
  // shard), then reads the servers' new parameters when they are due.
  const auto t_push = Clock::now();
  std::vector<RemoteParams::GradPiece> pieces;
  for (const optim::ShardSegment& sg : own_) {
    pieces.push_back({stage_ == 2 ? grad_shard_.data() + sg.local : model_->grads() + sg.flat_begin, sg.flat_begin,
                      sg.flat_end});
  }
  RETURN_IF_ERROR(remote_->PushAndPull(pieces, coef, lr, step));
  timing_.exposed_comm += Since(t_push);
  return absl::OkStatus();
}

absl::Status ZeroEngine::Update(float coef, double lr, int step, const float* multiplier) {
  kernels::Backend& be = model_->backend();
  std::vector<kernels::WorkingCopyRange> working;
  const auto t_opt = Clock::now();
  using I = optim::AdamW::Index;
  float* params = model_->params();
  if (stage_ == 0) {
    if (coef != 1.0f) be.Scale(model_->grads(), static_cast<int64_t>(model_->num_params()), coef);
    // Every parameter updated here: the 16-bit working copy is written in the same pass.
    working = model_->WorkingCopyRanges();
    opt_->Step(params, I::kFlat, model_->grads(), I::kFlat, lr, step, 0, static_cast<size_t>(-1), multiplier,
               working.empty() ? nullptr : &working);
  } else if (stage_ == 1) {
    for (const optim::ShardSegment& s : opt_->segments()) {
      if (coef != 1.0f) be.Scale(model_->grads() + s.flat_begin, static_cast<int64_t>(s.flat_end - s.flat_begin), coef);
    }
    if (!offload_) opt_->Step(params, I::kFlat, model_->grads(), I::kFlat, lr, step);
  } else {
    if (coef != 1.0f) be.Scale(grad_shard_.data(), static_cast<int64_t>(local_size_), coef);
    if (offload_) {
      // below
    } else if (stage_ == 2) {
      opt_->Step(params, I::kFlat, grad_shard_.data(), I::kLocal, lr, step);
    } else {
      opt_->Step(param_shard_.data(), I::kLocal, grad_shard_.data(), I::kLocal, lr, step);
    }
  }
  if (offload_) {
    ASSIGN_OR_RETURN(const size_t moved, OffloadedStep(lr, step));
    timing_.offload_bytes += moved;
  }
  RETURN_IF_ERROR(be.Synchronize());  // the update done, before the gathers read it
  timing_.optimizer += Since(t_opt);
  working_written_ = !working.empty();
  return absl::OkStatus();
}

absl::Status ZeroEngine::GatherUpdated() {
  if ((stage_ != 1 && stage_ != 2) || dp_ == 1) return absl::OkStatus();  // ZeRO 3 gathers per unit, at use
  // Every rank updated its pieces: gather each bucket into every rank's parameters.
  float* params = model_->params();
  for (const Bucket& b : buckets_) {
    if (b.group_size > 1) SubmitGather(b, params + PieceBegin(b), PieceEnd(b) - PieceBegin(b));
  }
  return WaitAll();
}

StepTiming ZeroEngine::TakeTiming() {
  StepTiming t = timing_;
  if (comm_) t.comm_busy = comm_->TakeBusySeconds();
  timing_ = StepTiming{};
  return t;
}

MemoryAccount ZeroEngine::memory() const {
  MemoryAccount m;
  const size_t f = sizeof(float);
  m.params = (model_->has_param_buffer() ? model_->num_params() * f : 0) + param_shard_.size() * f;
  m.grads = (model_->has_grad_buffer() ? model_->num_params() * f : 0) + grad_shard_.size() * f;
  m.optimizer = offload_ ? 0 : (opt_->m().size() + opt_->v().size()) * f;
  if (offload_) m.host = (opt_->m().size() + opt_->v().size()) * f + offload_->host_bytes();
  m.activations = model_->activation_bytes();
  m.ring = model_->context_parallel_bytes();
  m.working = work_->pool().allocated_bytes();
  // Mixed precision: the 16-bit working copy of the GEMM weights (ZeRO 0-2, persistent) is
  // parameter memory; ZeRO 3's per-unit copies are working memory.
  (stage_ == 3 ? m.working : m.params) += model_->working_param_bytes();
  m.peak = std::max(peak_, m.model_state() + m.activations + m.ring + m.working);
  // Parameter-server mode: params and grads (ZeRO 2: a 1/dp shard of them); the optimizer
  // state is on the servers.
  const size_t pbytes = model_->num_params() * f;
  m.predicted = !remote_ ? PredictedModelStateBytes(model_->num_params(), stage_, dp_, offloaded(), offload_params_)
                         : pbytes + (stage_ == 2 ? pbytes / static_cast<size_t>(dp_) : pbytes);
  if (model_->precision() != kernels::Precision::kFp32 && stage_ < 3) {  // + the working copy (2 bytes a GEMM parameter)
    for (const jobspec::ParamTensor& t : model_->tensors()) m.predicted += t.gemm ? 2 * t.working_room() : 0;
  }
  return m;
}

double ZeroEngine::CountedSquares(const float* grads, const std::vector<std::pair<size_t, size_t>>& ranges) const {
  double sum = 0;
  for (const auto& [b, e] : ranges) {
    for (const auto& [cb, ce] : counted_) {
      const size_t lo = std::max(b, cb), hi = std::min(e, ce);
      if (lo < hi) sum += model_->backend().SumSquares(grads + lo, static_cast<int64_t>(hi - lo));
    }
  }
  return sum;
}

void ZeroEngine::NotePeak() { peak_ = memory().peak; }

void ZeroEngine::OrderForComm() {
  if (work_->on_peer()) model_->Sync();  // keeps an error for the step to answer
}

}  // namespace gantry::train
