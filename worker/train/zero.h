// Data parallelism with ZeRO over a DP group, on the model's flat buffers.
//
// The flat buffer is cut into buckets of whole units (see model::UnitBoundaries): greedily
// by parallel.bucket_mb in backward order under stages 0-2, one unit per bucket under stage
// 3 (a unit is what forward and backward gather at once). Each bucket is split evenly over
// the ranks (the last piece padded): rank r owns [begin + r*s, begin + (r+1)*s) of a bucket
// of s pieces, and keeps its pieces contiguously in compact shard buffers.
//
//   stage 0  gradients all-reduced bucket by bucket as backward finishes them, AdamW on all
//   stage 1  buckets reduce-scattered into the own piece, AdamW on the own pieces (the state
//            is 1/dp), updated pieces all-gathered into every rank's parameters
//   stage 2  as 1, and only the own gradient pieces are kept: backward writes a bucket into
//            a working buffer that is reduce-scattered (every micro-batch) and given back
//   stage 3  as 2, and only the own parameter pieces are kept: each unit is all-gathered
//            before its forward and its backward and released after; acquiring a unit
//            launches the gather of the next one in the same direction (up in forward,
//            down in backward), which runs while this one computes (prefetch)
//
// Reductions run on a communication thread while backward goes on (overlap). On a backend
// the host cannot address (cuda, cuda-emulated) the thread's staging and elementwise work
// runs on a peer backend of the same device (its own stream), and the training thread's
// queued work is waited for before the thread reads what it wrote (OrderForComm). Stages 0 and
// 1 reduce once per step, after the last micro-batch; stages 2 and 3 keep no full gradient,
// so they reduce every micro-batch. The global gradient norm is the sum over shards.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/buffer.h"
#include "model/gpt.h"
#include "comm/comm_thread.h"
#include "comm/communicator.h"
#include "checkpoint/checkpoint.h"
#include "optim/adamw.h"
#include "worker/train/buckets.h"
#include "worker/train/comm_work.h"
#include "worker/train/offload.h"
#include "worker/train/remote_params.h"
#include "worker/train/unit_gather.h"

namespace gantry::train {

// Parameter-server mode (optimizer.placement: shardserver): AdamW runs on the shard servers
// (RemoteOptimizer, RemoteParams: worker/train/remote_params.h). The engine reduces the
// gradients over the DP group as its ZeRO stage does (0: all-reduce; 1, 2: reduce-scatter),
// clips them, and RemoteParams pushes each rank's own pieces and reads the parameters back.

// Bytes held for training by one rank.
struct MemoryAccount {
  size_t params = 0, grads = 0, optimizer = 0;  // persistent model state
  size_t activations = 0;                       // the model's activation buffer
  size_t ring = 0;                              // context parallelism: the ring's working memory (host)
  size_t working = 0;                           // collective staging, gathered units, buckets
  size_t peak = 0;                              // the largest sum of all of the above seen
  size_t predicted = 0;  // the ZeRO formula for params + grads + optimizer at this stage and dp
  size_t host = 0;       // optimizer offload: host memory (master, m, v, gradient staging)
  size_t model_state() const { return params + grads + optimizer; }
};

// Where a step's time went (seconds). compute = step - exposed_comm - optimizer.
struct StepTiming {
  double exposed_comm = 0;  // the training thread waiting on collectives
  double optimizer = 0;     // clipping and AdamW
  double comm_busy = 0;     // the communication thread's time in collectives (overlapped or not)
  size_t offload_bytes = 0; // optimizer offload: bytes moved between host and device (gradients down, parameters up)
};

// Tensor and pipeline parallel (the model is a shard): mp joins the shards of one replica
// (the gradient norm and the loss are summed over it; tensors another rank speaks for are
// not counted), emb the two ends of the pipeline, whose wte gradients are summed before the
// DP reduction of the last micro-batch.
// Expert parallelism (the model's shard has ep > 1): the MoE layers' expert tensors are
// reduced (and, ZeRO 1, partitioned) over edp, the dp/ep replicas that hold the same experts
// (x cp: every cp rank of them; null: this rank alone), everything else over the DP group
// (dp x cp); both are scaled by 1/(dp x cp) (an expert's gradient already sums its ep group's
// tokens). Their buckets are split at the experts' ranges, each part over its own group.
// ZeRO 0 and 1.
struct ZeroModelParallel {
  comm::Communicator* mp = nullptr;
  comm::Communicator* emb = nullptr;
  comm::Communicator* edp = nullptr;
};

class ZeroEngine final : public model::ParamHost {
 public:
  // model holds the full parameters; comm is the DP group (SoloCommunicator for one rank).
  // The model's buffers stay until Shard().
  // remote: parameter-server mode (stages 0-2), or null; staleness: how many steps
  // behind the servers a rank's parameters may be (pulls every staleness + 1 steps).
  using ModelParallel = ZeroModelParallel;
  static absl::StatusOr<std::unique_ptr<ZeroEngine>> Create(model::GPT* model, comm::Communicator* comm,
                                                            int stage, double bucket_mb,
                                                            const kernels::AdamWConfig& config,
                                                            RemoteOptimizer* remote = nullptr, int staleness = 0,
                                                            ModelParallel mp = ModelParallel());
  // Parameter-server mode: brings the parameters up to the servers' (collective). Before a
  // checkpoint and at the end; a no-op otherwise or when they are current.
  absl::Status SyncRemote();
  // Parameter-server mode: rank 0 sets the servers up with the model's parameters (and the
  // optimizer state LoadOptimizerState kept, at step start_step), then every rank waits for
  // it (collective). A no-op otherwise.
  absl::Status StartRemote(int64_t start_step);
  ~ZeroEngine() override;

  int stage() const { return stage_; }
  int dp() const { return dp_; }
  // Starts using the layout: stage 3 copies its parameter pieces out of the model and frees
  // the model's parameters, stages 2 and 3 free its gradients. Call after loading weights.
  // With the optimizer offloaded, the host master shard is taken from the parameters here.
  void Shard();
  // ZeRO-Offload (optimizer.offload: cpu; stages 1-3): this rank's fp32 master pieces and
  // AdamW's m and v live in host memory and AdamW runs there (the cpu backend's kernel,
  // multi-threaded); each step the reduced, clipped gradient pieces go to the host and the
  // updated pieces come back into the model's parameters (ZeRO 3: its parameter shard). Call
  // right after Create, before loading a checkpoint's state into local_optimizer().
  absl::Status OffloadOptimizer();
  bool offloaded() const { return offload_ != nullptr; }
  // The chunk of the offloaded step's pipeline, in floats (tests make it small).
  void set_offload_chunk(size_t floats) { offload_->set_chunk(floats); }
  // ZeRO-3 parameter offload (parallel.offload_params: cpu; after OffloadOptimizer): the
  // rank's parameter shard is kept in host memory only (the offloaded master pieces); each
  // unit's own piece is copied to the device just before its all-gather (which the prefetch
  // launches a unit ahead). Call before Shard().
  absl::Status OffloadParams();
  // Parameter-server mode: the optimizer state of the whole flat buffer (num_params each),
  // from a checkpoint, for StartRemote to send to the servers.
  void LoadOptimizerState(const float* m, const float* v);
  // Where a checkpoint's m and v can be read straight into (LoadCheckpoint's `own`): this
  // rank's AdamW state and its segments. Null in parameter-server mode (the state goes to
  // the servers whole, through LoadOptimizerState).
  optim::AdamW* local_optimizer() { return remote_ ? nullptr : opt_.get(); }
  // What this rank writes into a checkpoint: its pieces (ZeRO 1-3: the ones it owns; ZeRO 0:
  // the same even split, so that ranks write in parallel), with parameters, m and v. In
  // parameter-server mode m and v are read from the shard servers first.
  absl::StatusOr<std::vector<checkpoint::CheckpointPiece>> CheckpointPieces();
  // Collective: returns once every rank has called it.
  absl::Status Barrier();
  // Collective: the model's full parameter buffer valid (stage 3 allocates and gathers it;
  // it stays until Shard() frees it again).
  absl::Status GatherParams();
  // Frees the pool's buffers that no collective holds (training is over; they are made again
  // when needed), after giving back prefetched units.
  void ReleaseWorking();

  // Before each micro-batch's forward: micro in [0, accum).
  void BeginMicroBatch(int micro, int accum);
  struct StepResult {
    double loss = 0, grad_norm = 0;
    bool skipped = false;  // loss scaling: the gradients held an inf or NaN, nothing was updated
  };
  // After the last micro-batch: waits for the reductions, averages loss and gradients over
  // the group, unscales them (loss_scale: what the loss was multiplied by, a power of 2),
  // clips to grad_clip (0: off), runs AdamW (step is 1-based: the updates applied so far + 1)
  // and brings every rank's parameters up to date. With loss scaling (loss_scale != 1), a
  // gradient holding an inf or NaN on any rank (the global norm is not finite, the same on
  // every rank) skips the update on every rank: `skipped`, parameters and state untouched.
  absl::StatusOr<StepResult> FinishStep(double local_loss, double lr, int step, double grad_clip,
                                        float loss_scale = 1.0f);
  // The timing since the last call.
  StepTiming TakeTiming();
  // ZeRO 3: gather the next unit while the current one computes (on by default; off for
  // the paired benchmark, bench/zero3_prefetch_bench.cc).
  void set_prefetch(bool on) {
    if (gather_) gather_->set_prefetch(on);
  }
  // train.grad_reduce_dtype bf16 (off: fp32). Each bucket's DP reduction (stage 0's
  // all-reduce, stage 1's reduce-scatter, stages 2 and 3's per-micro-batch reduce-scatter)
  // rounds the bucket's fp32 gradients to bf16 in a staging buffer, reduces those (the
  // communicator's bf16 sums: half the bytes), widens the result back to fp32 and scales it
  // by 1/dp. Accumulation stays fp32: the micro-batches' gradients in the model's buffer
  // (stages 0, 1), each micro-batch's reduced piece added into the fp32 shard (stages 2, 3).
  // The tied wte's sum over the pipeline's ends, the loss and the norm stay fp32. Set before
  // the first step.
  void set_grad_reduce_bf16(bool on) { grad_reduce_bf16_ = on; }
  bool grad_reduce_bf16() const { return grad_reduce_bf16_; }
  // Stage 3: acquisitions that found their unit's gather already launched (by a prefetch).
  int64_t prefetch_hits() const { return gather_ ? gather_->hits() : 0; }
  MemoryAccount memory() const;
  // Bytes of params + grads + optimizer state the ZeRO formula predicts per rank.
  static size_t PredictedModelStateBytes(size_t num_params, int stage, int dp, bool offload = false,
                                         bool offload_params = false);

  // model::ParamHost
  float* AcquireParams(int unit) override;
  void ReleaseParams(int unit) override;
  float* AcquireGrads(int unit) override;
  void GradsDone(int unit) override;
  bool gathers_params() const override { return stage_ == 3; }

 private:
  struct Bucket {
    size_t begin = 0, end = 0;  // flat range
    // The group the bucket is reduced over: null the DP group (the communication thread's),
    // else (expert parallelism: experts) edp, or solo_ when no other replica holds them;
    // this rank's place and the group's size.
    comm::Communicator* group = nullptr;
    int group_rank = 0, group_size = 1;
    // The bucket whose units' gradients launch this one: itself, or (an expert range split
    // off) the bucket it was cut from; pending and units count on the lead.
    int lead = 0;
    size_t piece = 0;           // elements per rank (ceil(size / group_size))
    size_t local = 0;           // offset of this rank's piece in the compact buffers
    int units = 0, pending = 0;
    float* work = nullptr;      // stage 2/3: this micro-batch's gradients of the bucket
    size_t size() const { return end - begin; }
  };
  ZeroEngine() = default;
  void LaunchBucket(int k);
  // Stage 3 (UnitGather's start): takes a buffer for b's gathered parameters and queues the
  // all-gather from this rank's piece (*ticket).
  float* StartGather(const Bucket& b, uint64_t* ticket);
  // Stage 3: prefetched units nobody acquired are given back (before an update makes them stale).
  void DropPrefetches() {
    if (gather_) gather_->DropPrefetches();
  }
  // Queues the all-gather of bucket b from this rank's piece (len elements, padded when the
  // last piece is short) into the model's parameters.
  void SubmitGather(const Bucket& b, const float* piece, size_t len);
  // The flat range of this rank's piece of bucket k (may be empty or short).
  size_t PieceBegin(const Bucket& b) const { return std::min(b.end, b.begin + b.piece * b.group_rank); }
  size_t PieceEnd(const Bucket& b) const { return std::min(b.end, b.begin + b.piece * (b.group_rank + 1)); }
  // The communicator of b's group, given the communication thread's (the DP group).
  static comm::Communicator& GroupOf(const Bucket& b, comm::Communicator& dp) {
    return b.group != nullptr ? *b.group : dp;
  }
  // FinishStep's parts, in order: reduce (this rank's squares of the gradients, then the norm's
  // and the loss's sums over the groups), update (AdamW over this rank's pieces, here or on
  // the host), gather (every rank's parameters brought up to date); parameter-server mode
  // pushes and pulls instead of the last two.
  double LocalSquares(double* expert_sq) const;
  absl::StatusOr<double> ReduceNormAndLoss(double local_loss, double* loss);
  // multiplier: null (the gradients scaled by coef first, where coef != 1), or the clip's
  // multiplier in the backend's memory, which AdamW applies as it reads them.
  absl::Status Update(float coef, double lr, int step, const float* multiplier = nullptr);
  // One rank that counts every gradient it holds (ZeRO 0 alone: no data, tensor or pipeline
  // group, parameter server, offload or expert ranges), without loss scaling: the norm, the
  // clip and AdamW are queued with no host read before the update, and the norm is read at
  // the step's one wait, its end. Elsewhere the norm is summed over groups on the host first.
  bool ClipsOnDevice(float loss_scale) const;
  // After an update: the model told its parameters changed, or that the update wrote its
  // 16-bit working copy too (working_written_: ZeRO 0, mixed precision).
  void ParamsUpdated();
  bool working_written_ = false;
  absl::Status DeviceClippedUpdate(double grad_clip, double lr, int step, double* grad_norm);
  absl::Status GatherUpdated();
  absl::Status PushAndPull(float coef, double lr, int step);
  // Offload: the update of the pieces on the host (HostOffload::Step) from this stage's
  // gradients into its parameters. Returns the bytes moved.
  absl::StatusOr<size_t> OffloadedStep(double lr, int step);
  std::vector<FlatRange> experts_;  // the expert tensors' flat ranges (ep > 1)
  comm::SoloCommunicator solo_;  // the expert ranges' group when no other replica holds them
  int edp_rank_ = 0;  // this rank's place in edp
  absl::Status Wait(uint64_t ticket);
  absl::Status WaitAll();
  void NotePeak();
  // Device backends: waits for the training thread's queued work before the communication
  // thread reads or writes the memory it touches.
  void OrderForComm();
  // The pieces' device pointers replaced by host copies in host_pieces_ (a device backend);
  // m and v too when state_on_device.
  absl::StatusOr<std::vector<checkpoint::CheckpointPiece>> HostPieces(std::vector<checkpoint::CheckpointPiece> pieces, bool state_on_device);

  // Squares of the gradients in `ranges` (flat), only where a tensor is this rank's to count.
  double CountedSquares(const float* grads, const std::vector<std::pair<size_t, size_t>>& ranges) const;

  model::GPT* model_ = nullptr;
  std::unique_ptr<RemoteParams> remote_;  // parameter-server mode
  ModelParallel mp_;
  std::vector<std::pair<size_t, size_t>> counted_;  // flat ranges of the tensors this rank counts in the norm
  size_t tied_begin_ = 0, tied_end_ = 0;           // pp > 1: this stage's wte (flat), summed over emb
  int stage_ = 0, dp_ = 1, rank_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<optim::ShardSegment> own_;  // this rank's pieces (flat range and compact offset)
  std::vector<int> unit_bucket_;
  size_t local_size_ = 0;
  std::unique_ptr<optim::AdamW> opt_;
  kernels::AdamWConfig opt_config_;
  std::unique_ptr<HostOffload> offload_;  // optimizer offload: the master pieces on the host
  bool offload_params_ = false;  // ZeRO 3: the parameter shard is offload_'s master only
  // In the model's backend's memory, as its parameters and gradients are.
  kernels::DeviceBuffer grad_shard_;   // stage 2/3: the own gradient pieces (compact)
  kernels::DeviceBuffer param_shard_;  // stage 3: the own parameter pieces (compact)
  // ClipsOnDevice: the sum of squares and the norm (doubles), then the clip's multiplier; and
  // page-locked room for the norm's copy up.
  kernels::DeviceBuffer clip_, clip_host_;
  // The communication thread's buffers, element-wise work and reductions (outlives comm_).
  std::unique_ptr<CommWork> work_;
  FloatBuffer host_pieces_;  // device backends: the last CheckpointPieces' host copies
  std::unique_ptr<comm::CommThread> comm_;
  std::deque<uint64_t> in_flight_;  // stage 2/3: tickets of launched bucket reductions
  int micro_ = 0;
  bool last_micro_ = true;
  bool grad_reduce_bf16_ = false;
  std::unique_ptr<UnitGather> gather_;  // stage 3: the gathered units and the prefetch
  StepTiming timing_;
  size_t peak_ = 0;
};

}  // namespace gantry::train
