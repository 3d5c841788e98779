// GPT-2 (pre-LayerNorm, learned positions, GELU tanh, tied embeddings) and Llama (RMSNorm,
// RoPE, SwiGLU, grouped-query attention, untied embeddings, no biases) on flat parameter and
// gradient buffers, with Hugging Face's tensor names and layouts (GPT-2's Conv1D weights are
// (in, out), Llama's nn.Linear (out, in)), so a model directory loads and saves with plain
// copies.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/buffer.h"
#include "kernels/backend.h"
#include "jobspec/model_layout.h"
#include "comm/communicator.h"
#include "model/block.h"
#include "model/context_parallel.h"
#include "model/moe_layer.h"
#include "model/run_context.h"
#include "model/tensor_parallel.h"
#include "model/working_weights.h"

namespace gantry::model {

// Where the model finds a unit's parameters and puts its gradients when they do not live
// in its own full buffers (ZeRO stages 2 and 3). Pointers address the unit's first element;
// the model calls Release/GradsDone once it will not touch them again.
class ParamHost {
 public:
  virtual ~ParamHost() = default;
  virtual float* AcquireParams(int unit) = 0;
  virtual void ReleaseParams(int unit) = 0;
  // The unit's gradient accumulator, valid until GradsDone (the host zeroes it or keeps it).
  virtual float* AcquireGrads(int unit) = 0;
  // Backward of this micro-batch is done with the unit's gradients.
  virtual void GradsDone(int unit) = 0;
  // Whether AcquireParams hands out gathered copies (ZeRO 3) rather than the model's own
  // buffer: a mixed-precision model then makes its 16-bit GEMM weights per acquisition.
  virtual bool gathers_params() const { return false; }
};

// The model is the stack: the embedding, this shard's layers (each a model::Block of the
// config's architecture), the final norm, the classifier and its loss, over units of
// parameters that ZeRO may hold elsewhere (ParamHost), with activations in per-micro-batch
// slots (pipeline stages). It is written once over kernels::Backend: its parameters, gradients
// and activations live in the backend's memory, and every op runs there. On the cpu backend (the default)
// and cuda-emulated, host code may address that memory directly (params(), grads(),
// logits(), the stage buffers); on cuda it is device memory, reached through
// ReadParams/WriteParams and the backend's copies.
class GPT : private MoeHost {
 public:
  explicit GPT(const jobspec::GPTConfig& config) : GPT(config, jobspec::ModelShard{}) {}  // config must be valid
  // One shard of the model (tensor and pipeline parallel). Forward and backward all-reduce
  // over the tensor-parallel group (set_tp_comm) where the shards' partial sums meet.
  // backend: not owned; it outlives the model.
  GPT(const jobspec::GPTConfig& config, const jobspec::ModelShard& shard, kernels::Backend* backend = &kernels::CpuBackend());
  kernels::Backend& backend() const { return *be_; }

  const jobspec::GPTConfig& config() const { return config_; }
  const jobspec::ModelShard& shard() const { return shard_; }
  const std::vector<jobspec::ParamTensor>& tensors() const { return tensors_; }
  const jobspec::ParamTensor* FindTensor(const std::string& name) const;
  size_t num_params() const { return unit_begin_.back(); }
  int num_units() const { return static_cast<int>(unit_begin_.size()) - 1; }
  size_t unit_begin(int u) const { return unit_begin_[static_cast<size_t>(u)]; }
  size_t unit_end(int u) const { return unit_begin_[static_cast<size_t>(u) + 1]; }
  // The model's own full buffers are the default home of parameters and gradients. A host
  // (not owned) takes over every unit access; then a buffer it does not need may be freed
  // (ZeRO 2 frees the gradients, ZeRO 3 both) and re-allocated for whole-model work.
  void set_param_host(ParamHost* host) { host_ = host; }
  void FreeParamBuffer() {
    params_.Reset();
    working_->ReleaseImage();
  }
  void FreeGradBuffer() { grads_.Reset(); }
  void AllocateParamBuffer() {
    if (params_.size() != num_params()) params_.Assign(be_, num_params());
    MarkParamsChanged();
  }
  void AllocateGradBuffer() { if (grads_.size() != num_params()) grads_.Assign(be_, num_params()); }
  // The parameters to or from host memory (num_params() floats), on any backend.
  void ReadParams(float* host) const { be_->CopyToHost(host, params_.data(), num_params() * sizeof(float)); }
  void WriteParams(const float* host) {
    be_->CopyToDevice(params_.data(), host, num_params() * sizeof(float));
    MarkParamsChanged();
  }
  // Whoever writes the parameters other than through this class's own methods (an optimizer
  // step, a load into params()) says so: a mixed-precision model recasts its 16-bit working
  // copy of the GEMM weights from them before its next forward.
  void MarkParamsChanged() { working_->Invalidate(); }
  // Mixed precision with the persistent working copy (ZeRO 0-2) and a current one: where it
  // keeps each GEMM tensor, for an update that rewrites it with the parameters (empty where
  // there is none to keep up). After that update: WorkingCopyWritten() instead of
  // MarkParamsChanged().
  std::vector<kernels::WorkingCopyRange> WorkingCopyRanges() {
    if (gathers() || !has_param_buffer()) return {};
    return working_->ImageRanges();
  }
  void WorkingCopyWritten() { working_->Written(); }
  // The parameters where the host can read them: in place on a host-addressable backend,
  // else a copy in *staged.
  const float* HostParams(std::vector<float>* staged) const;
  void ReadGrads(float* host) const { be_->CopyToHost(host, grads_.data(), num_params() * sizeof(float)); }
  bool has_param_buffer() const { return params_.size() == num_params(); }
  bool has_grad_buffer() const { return grads_.size() == num_params(); }
  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() { return grads_.data(); }
  const float* grads() const { return grads_.data(); }

  // GPT-2 initialisation: weights N(0, 0.02), residual projections (attn.c_proj, mlp.c_proj)
  // N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm weights 1 (Llama, as transformers
  // initialises it: every weight matrix N(0, 0.02), RMSNorm weights 1). Each tensor draws from its
  // own stream of (seed, tensor index): deterministic per seed, and a shard holds exactly
  // the values the whole model has there.
  void InitRandom(uint64_t seed);
  // This shard's values from the whole model `whole` (same config).
  void CopyFromWhole(const GPT& whole);

  // Forward over inputs (B,T). With targets, returns the mean loss (and keeps per-token
  // losses); without, returns NaN. Logits (B,T,V) stay readable until the next call.
  // Whole models only (a shard runs stages: ForwardStage).
  float Forward(const int32_t* inputs, const int32_t* targets, int B, int T);
  // Forward and backward in one call (the classifier's softmax, loss and gradient in one
  // pass). Gradients accumulate into grads(); dloss_scale is 1/grad_accum. Returns the
  // mean loss of this micro-batch. On a device nothing here waits for the device to finish:
  // the tokens go down from page-locked memory, the per-token losses come up into it, and
  // the host waits only for that copy (event), with the backward queued behind it; the
  // backward may still be running on return (the engine's update waits for it; an error
  // of its ops is answered there or by the next Sync).
  float ForwardBackward(const int32_t* inputs, const int32_t* targets, int B, int T,
                        float dloss_scale);
  void ZeroGrad();

  // Pipeline stages. What a micro-batch's backward reads lives in `slots` sets, one per
  // micro-batch in flight (set before the first forward); the step's scratch once
  // (jobspec::ActivationLayout's two regions). A stage's forward reads the tokens (first stage) or
  // stage_input(slot) (filled from the previous stage); the last stage computes the loss
  // and, with dloss_scale != 0, the classifier's gradient too (fused, as ForwardBackward),
  // and returns the mean loss (NaN elsewhere, or without targets). Backward starts from
  // that gradient (last stage) or from stage_output_grad(slot) (filled from the next
  // stage), accumulates into the gradients, and leaves d(input) in stage_input_grad(slot)
  // for the previous stage. Errors of the tensor-parallel group: comm_status().
  // The interleaved pipeline (shard().chunks): each call names the chunk it runs (its layers;
  // chunk 0 of the first stage embeds, the last chunk of the last stage computes the loss), and
  // a slot holds one micro-batch of any chunk (jobspec::LayoutChunks).
  void set_slots(int slots) {
    if (slots != slots_) act_B_ = act_T_ = 0;
    slots_ = slots;
  }
  float ForwardStage(int slot, const int32_t* inputs, const int32_t* targets, int B, int T, float dloss_scale,
                     int chunk = 0);
  void BackwardStage(int slot, int B, int T, int chunk = 0);
  // The stage's input and output, and their gradients: the input is kept per slot; the
  // output of a stage that sends it and the gradients are the stage's own, one of each, valid
  // from the op that fills them to the transfer that follows it (the schedule's order:
  // jobspec/pipeline.h).
  float* stage_input(int slot, int chunk = 0) { return SlotAct(chunk, slot, Chunk(chunk).encoded); }
  const float* stage_output(int slot, int chunk = 0);
  // (The interleaved pipeline: all three in the slot's mailbox, jobspec::ChunkedActivations.)
  float* stage_output_grad(int slot, int chunk = 0) {
    return act_mailbox_ > 0 ? Mailbox(slot) : SlotAct(chunk, slot, Chunk(chunk).dres);
  }
  const float* stage_input_grad(int slot, int chunk = 0) {
    return act_mailbox_ > 0 ? Mailbox(slot) : SlotAct(chunk, slot, Chunk(chunk).dres);
  }
  // The interleaved pipeline: the unit of each chunk's first layer, chunks 1 onwards (a gradient
  // bucket holds one chunk's units: a backward runs one chunk).
  std::vector<int> ChunkStartUnits() const;
  void set_tp_comm(comm::Communicator* comm) { tp_->set_comm(comm); }
  // Context parallelism (parallel.cp; model/context_parallel.h): the cp group, this rank's place
  // in it its cp rank (null or a group of one: none). Every call's (B, T) are then this rank's
  // rows of B sequences of T x cp: chunks rank and 2·cp−1−rank of each, in that order
  // (CpSharding::Take), inputs and targets alike. The layers run on those rows as on any; the
  // attention goes round the group (RingAttention, the exchanges on the group's own
  // communication thread), RoPE and GPT-2's position embeddings take the rows' global
  // positions; the loss is the mean over this rank's rows. Every backend (the ring's block ops
  // on its memory; in bf16 or fp16 the ring computes on widened fp32 copies), with tp (the
  // ring carries this rank's heads), pp (a stage's buffers hold T/cp rows) and MoE (the
  // routing statistics of the load-balancing loss summed over the group: MoeLayers::set_cp):
  // anything else fails the first forward with the reason.
  void set_cp_comm(comm::Communicator* comm);
  int cp() const { return cp_comm_ != nullptr ? cp_comm_->size() : 1; }
  // Expert parallelism (shard().ep > 1): the group whose ranks hold the other experts; the
  // MoE layers exchange token rows over it (all-to-all).
  void set_ep_comm(comm::Communicator* comm) { moe_->set_ep_comm(comm); }
  // The first error of the tensor-parallel group or of the backend's ops (a model whose
  // status is not OK has computed nothing reliable since).
  const absl::Status& comm_status() const { return ctx_->status(); }
  // Waits for the backend's queued ops; keeps their first error in comm_status().
  void Sync() override { ctx_->Sync(); }

  // The last forward's logits (B*T rows of this rank's vocabulary), in the backend's memory;
  // with classifier_rows, only a block's room: ReadLogits computes the rows it is asked for from
  // the last forward's final norm and the weights as they are (the forward's logits where no
  // update came between; the whole classifier's room holds dlogits after a backward).
  const float* logits() const { return act_.data() + ctx_->off().logits; }
  // Rows [row, row + rows) of them, copied to the host.
  void ReadLogits(float* host, size_t row, size_t rows);

  // Mixture of experts: what the forwards on this stage routed since the last TakeMoeStats
  // (summed over its MoE layers and the forwards), and the loss terms they added.
  MoeStats TakeMoeStats() { return moe_->TakeStats(); }
  // The last forward's MoE loss terms on this stage (aux_loss_coeff · Σ aux + z_loss_coeff · Σ z),
  // which the loss ForwardStage returns includes on a whole model.
  float last_moe_loss() const { return moe_->last_loss(); }

  // Per-op wall time, accumulated while profiling is on (bench/ prints it).
  void set_profiling(bool on) { ctx_->set_profiling(on); }
  const std::vector<std::pair<std::string, double>>& op_seconds() const { return ctx_->op_seconds(); }
  void ResetProfile() { ctx_->ResetProfile(); }
  // The floats of a stage's input or output (its residual stream) for a (B,T) micro-batch.
  size_t stage_floats(int B, int T) const {
    return static_cast<size_t>(shard_.residual_rows(static_cast<int64_t>(B) * T)) * static_cast<size_t>(config_.n_embd);
  }
  // Allocates the activations for (B,T) now rather than at the first forward.
  void ReserveActivations(int B, int T) { EnsureActivations(B, T); }
  // Frees the activations and the per-unit 16-bit copies (training is over: a ZeRO 3 rank
  // gathers the whole model next); the next forward allocates them again.
  void ReleaseActivations() {
    act_.Reset();
    tokens_.Reset();
    xent_stats_.Reset();
    working_->ReleasePerUnit();
    act_B_ = act_T_ = 0;
  }
  // Activation checkpointing (before the first forward, or re-laid out at the next).
  void set_recompute(jobspec::Recompute r) {
    if (r != recompute_) act_B_ = act_T_ = 0;
    recompute_ = r;
  }
  // Whether the layers' backward scratch may share the logits' room (the default; off, each
  // has its own: tests compare the two). Re-laid out at the next forward.
  void set_share_logits_room(bool on) {
    if (on != share_logits_) act_B_ = act_T_ = 0;
    share_logits_ = on;
  }
  // The classifier and its loss a block of this many token rows at a time (train.classifier_rows):
  // its logits never whole (the last stage's forward runs the classifier's backward block by
  // block; jobspec::ActivationLayout::classifier_rows). 0 (the default), or at least B·T: every
  // row at once. Re-laid out at the next forward.
  void set_classifier_rows(int rows) {
    if (rows != classifier_rows_) act_B_ = act_T_ = 0;
    classifier_rows_ = rows;
  }
  int classifier_rows() const { return classifier_rows_; }
  // Mixed precision, one rank a tensor-parallel group, no MoE: the backward's 16-bit gradient
  // casts fused into the ops that make the gradients (TensorParallel::CastsFused): the GEMMs
  // before a norm write its input gradient in 16 bits rather than fp32 rounded by a pass after
  // them, and the norms' backward writes the residual gradient's 16-bit copy beside it rather
  // than a pass converting it before each GEMM. The same bits (tests/model/grad_casts_test.cc);
  // two passes over B·T·C fp32 values fewer for each norm. Off by default until a GPU has measured
  // it (issue 48's rule).
  void set_fused_grad_casts(bool on) { ctx_->set_grad_casts_fused(on); }
  const jobspec::ActivationLayout& activation_layout() const { return ctx_->off(); }
  // Bytes of activation memory for the current (B,T).
  size_t activation_bytes() const { return act_.size() * sizeof(float); }
  // Context parallelism: host bytes of the ring's working memory beside the activation buffer
  // (RingAttention::bytes, and in bf16 or fp16 the widened copies of its operands), as the
  // forwards and backwards so far allocated it; 0 without cp.
  size_t context_parallel_bytes() const;
  // The ring's blocks computed so far (RingAttention::blocks; none at cp 1).
  RingAttention::Blocks context_parallel_blocks() const;
  // Mixed precision: bytes of the 16-bit working copies of the GEMM weights (the persistent
  // copy of ZeRO 0-2, or one unit's and the classifier's under ZeRO 3).
  size_t working_param_bytes() const { return working_->bytes(); }

  // Mixed precision (train.precision). In bf16 or fp16 the parameters stay fp32 (the
  // master copy; the optimizer updates them), and the GEMMs read a 16-bit working copy of
  // their weights and biases, recast after every update (MarkParamsChanged): kept whole
  // under ZeRO 0-2, made per unit as ZeRO 3 gathers it. The tensors autocast holds in 16 bits
  // are 16-bit tensors (model::LayoutActivations: GEMM inputs and outputs, GELU's, attention's,
  // the logits and the gradients flowing into each of those); each GEMM's weight gradient is
  // rounded to 16 bits before it joins the fp32 accumulation, as autocast's is. LayerNorm, the
  // residual stream, softmax, the loss and the gradient accumulation stay fp32.
  void set_precision(kernels::Precision p) {
    if (p != ctx_->precision()) act_B_ = act_T_ = 0;
    ctx_->set_precision(p);
    working_->set_precision(p);
  }
  kernels::Precision precision() const { return ctx_->precision(); }

 private:
  // MoeHost: what the MoE layers ask of the model.
  void RunOp(const char* name, const std::function<void()>& f) override { ctx_->Op(name, f); }
  void Fail(absl::Status s) override { ctx_->Fail(std::move(s)); }
  void TpAllReduce(float* data, size_t n) override { tp_->AllReduce(data, n); }
  // This shard's layers (every chunk's, ascending); units: the embedding (first stage), one per
  // layer, the head (last stage: ln_f, and with pp > 1 the copy of wte).
  int layer_unit(int l) const { return (shard_.first() ? 1 : 0) + held_index_[static_cast<size_t>(l)]; }
  int head_unit() const { return num_units() - 1; }
  // Whether the running chunk embeds (the model's first) or computes the loss (its last).
  bool first_chunk() const { return shard_.first() && chunk_ == 0; }
  bool last_chunk() const { return shard_.last() && chunk_ == shard_.num_chunks() - 1; }
  // Chunk c's activation layout (before the first forward: the running one's, empty).
  const jobspec::ActivationLayout& Chunk(int c) const {
    return layouts_.empty() ? ctx_->off() : layouts_[static_cast<size_t>(c)];
  }
  // The unit and offset within it of the classifier's weight (GPT-2's tied wte: the
  // embedding's on the first stage, else its copy in the head; Llama's lm_head, in the head).
  int wte_unit() const { return cls_unit_; }
  size_t wte_offset() const { return cls_offset_; }
  // Tensor pointers of layer l, from the layer's unit base pointer.
  LayerParams Layer(float* unit_base, int l) const;
  float* UnitParams(int u) { return host_ ? host_->AcquireParams(u) : params_.data() + unit_begin(u); }
  void ReleaseUnitParams(int u) { if (host_) host_->ReleaseParams(u); }
  float* UnitGrads(int u) { return host_ ? host_->AcquireGrads(u) : grads_.data() + unit_begin(u); }
  void UnitGradsDone(int u) { if (host_) host_->GradsDone(u); }
  void EnsureActivations(int B, int T);
  // The activation at `off` of chunk `chunk`'s layout in slot `slot` (RunContext::A's
  // addressing): the stage's region first, act_shared_ floats, then the slots, act_kept_ each.
  float* SlotAct(int chunk, int slot, size_t off) {
    const jobspec::ActivationLayout& o = Chunk(chunk);
    return off < o.shared ? act_.data() + off : SlotBase(chunk, slot) + off;
  }
  // Where slot `slot`'s offsets of chunk `chunk`'s layout are from.
  float* SlotBase(int chunk, int slot) {
    return act_.data() + act_shared_ + static_cast<size_t>(slot) * act_kept_ - Chunk(chunk).shared;
  }
  float* Mailbox(int slot) {
    return act_.data() + act_shared_ + static_cast<size_t>(slot) * act_kept_ + act_mailbox_;
  }
  // Makes `slot` the current activation set, running chunk `chunk`'s layers.
  void Select(int slot, int chunk = 0);
  const ShardDims& dims() const { return ctx_->dims(); }
  // The current slot's activation at `off` (RunContext::A).
  float* A(size_t off) const { return ctx_->A(off); }
  kernels::Ptr H(float* p) const { return ctx_->H(p); }
  // Runs fill(p) on the parameters as host memory: in place where the backend is host
  // addressable, else on a host copy written back.
  template <typename F>
  void FillParamsOnHost(F&& fill);
  // The current slot's tokens (inputs, then targets) in the backend's memory.
  const int32_t* SlotTokens() const {
    return reinterpret_cast<const int32_t*>(tokens_.data()) + static_cast<size_t>(slot_) * 2 * tokens_per_slot_;
  }
  void RunForward(int B, int T);  // the first stage reads the slot's tokens
  // ForwardStage up to the loss, queued: the loss's read started (TakeLoss finishes it) and
  // no wait for the device.
  void QueueForwardStage(int slot, const int32_t* inputs, const int32_t* targets, int B, int T, float dloss_scale,
                         int chunk = 0);
  // The slot's inputs and targets (either null: not sent) into its device memory: on a device
  // through page-locked staging, asynchronously.
  void PutTokens(int slot, const int32_t* inputs, const int32_t* targets, size_t count);
  // The loss of the logits (vocabulary-parallel with tp > 1), fused with its gradient when
  // dloss != 0; the read of the current slot's B*T per-token losses started.
  void QueueLoss(int B, int T, float dloss);
  // The loss of rows [row, row + rows), whose logits start the logits' room (all rows, or one
  // block of them), fused with its gradient when dloss != 0 (tp > 1: vocabulary-parallel).
  void LossRows(int row, int rows, float dloss);
  // classifier_rows: the classifier, its loss and (dloss != 0) its backward a block at a time;
  // W's holds released (the backward runs from dlnf).
  void ClassifierBlocks(int BT, float dloss);
  // Rows [row, row + rows) of the logits' room to the host (16-bit: widened on the device).
  void CopyLogitsOut(float* host, size_t row, size_t rows);
  float* StagedLosses() { return staging_.data() + 2 * static_cast<size_t>(slots_) * tokens_per_slot_; }
  // The mean of the per-token losses QueueLoss started to read (waits for their copy only).
  float TakeLoss();
  void RunBackward(int B, int T);
  // The GEMMs' operands of a layer: its weights and biases in fp32, or their 16-bit copies.
  // Layer l's GEMM operands from its fp32 tensors w (working_weights.h).
  GemmOperands GemmWeights(const LayerParams& w, int l);
  // The classifier's weight (this rank's wte rows at W) for its GEMM, likewise.
  kernels::CPtr ClassifierWeight(const float* W) { return working_->Classifier(W, gathers()); }
  // What this model cannot run (a mixture of experts in 16 bits): true, with the error kept as
  // the model's first (comm_status()), so that a forward or backward runs nothing.
  bool Refused();
  // Mixed precision, ZeRO 0-2: the working copy recast from the parameters when they changed.
  void RefreshWorking() {
    if (!gathers() && has_param_buffer()) working_->Refresh(params_.data());
  }
  bool gathers() const { return host_ != nullptr && host_->gathers_params(); }
  bool mixed() const { return ctx_->mixed(); }
  // The index in tensors_ of layer l's first tensor.
  size_t LayerTensor(int l) const {
    return layer_tensor_[static_cast<size_t>(held_index_[static_cast<size_t>(l)])];
  }
  std::vector<size_t> layer_tensor_;  // LayerTensor's answers, by held index
  std::vector<int> held_index_;       // layer l's place among the layers held (-1: not held)
  std::vector<std::pair<int, int>> chunk_layers_;  // each chunk's layers [first, second)
  std::vector<jobspec::ActivationLayout> layouts_;  // each chunk's (jobspec::LayoutChunks)
  size_t act_shared_ = 0, act_kept_ = 0;            // the stage's region and a slot, in floats
  size_t act_mailbox_ = 0;                          // a slot's mailbox, from its start (chunks > 1)
  int chunk_ = 0;                                   // the running chunk

  jobspec::GPTConfig config_;
  jobspec::ModelShard shard_;
  kernels::Backend* be_;
  // What the stack and its blocks share while they run: dimensions, the current slot's
  // activations, precision, profile, first error.
  std::unique_ptr<RunContext> ctx_;
  std::unique_ptr<TensorParallel> tp_;  // the tensor- and sequence-parallel exchanges
  std::unique_ptr<MoeLayers> moe_;  // the MoE MLPs: their routing statistics and expert exchange
  std::unique_ptr<Block> block_;    // the architecture's layer
  int cls_unit_ = 0;
  size_t cls_offset_ = 0;
  std::vector<jobspec::ParamTensor> tensors_;
  std::vector<size_t> unit_begin_;
  ParamHost* host_ = nullptr;
  kernels::DeviceBuffer params_;
  kernels::DeviceBuffer grads_;
  kernels::DeviceBuffer act_;
  int slot_ = 0;
  int act_B_ = 0, act_T_ = 0, slots_ = 1;
  jobspec::Recompute recompute_ = jobspec::Recompute::kNone;
  bool share_logits_ = true;
  int classifier_rows_ = 0;
  kernels::DeviceBuffer tokens_;  // per slot: inputs (B*T) then targets (B*T), as int32
  size_t tokens_per_slot_ = 0;
  // Backends the host cannot address: page-locked host memory for the tokens on their way down
  // (2 * tokens_per_slot_ per slot) and the per-token losses on their way up (tokens_per_slot_
  // after them), and the events that mark each copy done.
  kernels::DeviceBuffer staging_;
  kernels::Backend::Event tokens_sent_ = nullptr, losses_read_ = nullptr;
  bool tokens_in_flight_ = false;
  int pending_losses_ = 0;  // QueueLoss's count, until TakeLoss
  kernels::DeviceBuffer xent_stats_;  // tensor parallel: every rank's per-row (max, sum, target logit)
  // Mixed precision: the 16-bit working copies of the GEMM weights.
  std::unique_ptr<WorkingWeights> working_;
  // Context parallelism: the group, its communication thread, the ring for the current (B, T),
  // the rows' positions (int32, the backend's memory: RoPE's), and GPT-2's position
  // embeddings at them (forward) and their gradient (backward), T x C each, the backend's.
  comm::Communicator* cp_comm_ = nullptr;
  std::unique_ptr<comm::CommThread> cp_thread_;
  std::unique_ptr<RingAttention> ring_;
  kernels::DeviceBuffer cp_positions_, cp_wpe_, cp_dwpe_;
  // Sets up the ring for (B, T) rows a rank; false, with the error kept, where cp cannot run.
  bool SetUpContextParallel(int T);
};

}  // namespace gantry::model
