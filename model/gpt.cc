// The stack of the GPT model: units of parameters, activation slots, the embedding, the
// layers (model/block.h, per architecture), the final norm, the classifier and its loss.
#include "model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/rng.h"
#include "kernels/crossentropy.h"
#include "kernels/encoder.h"
#include "kernels/matmul.h"

namespace gantry::model {

namespace k = gantry::kernels;

GPT::GPT(const jobspec::GPTConfig& config, const jobspec::ModelShard& shard, kernels::Backend* backend)
    : config_(config), shard_(shard), be_(backend), tensors_(jobspec::ParameterLayout(config, shard)) {
  if (shard_.layer_end < 0) shard_.layer_end = config.n_layer;
  ctx_ = std::make_unique<RunContext>(config_, shard_, be_);
  tp_ = std::make_unique<TensorParallel>(ctx_.get());
  // Units: the embedding, each layer, the head (the rest).
  auto at = [&](size_t i) { return i < tensors_.size() ? tensors_[i].offset : tensors_.back().offset + tensors_.back().numel; };
  size_t i = 0;
  unit_begin_ = {0};
  if (shard_.first()) unit_begin_.push_back(at(i += static_cast<size_t>(jobspec::EmbeddingTensors(config))));
  held_index_.assign(static_cast<size_t>(config.n_layer), -1);
  for (int l : jobspec::HeldLayers(config, shard_)) {
    held_index_[static_cast<size_t>(l)] = static_cast<int>(layer_tensor_.size());
    layer_tensor_.push_back(i);
    unit_begin_.push_back(at(i += static_cast<size_t>(jobspec::TensorsOfLayer(config, l, shard_))));
  }
  for (int c = 0; c < shard_.num_chunks(); ++c) {
    const jobspec::ModelShard one = jobspec::ChunkShard(config, shard_, c);
    chunk_layers_.push_back({one.layer_begin, one.layer_end});
  }
  ctx_->set_layers(chunk_layers_[0].first, chunk_layers_[0].second);
  moe_ = std::make_unique<MoeLayers>(config_, shard_, dims().Fm, be_, static_cast<MoeHost*>(this));
  block_ = MakeBlock(ctx_.get(), tp_.get(), moe_.get());
  if (shard_.last()) unit_begin_.push_back(at(tensors_.size()));
  size_t classifier = 0;  // the index in tensors_ of this shard's classifier rows (a stage with the classifier has them)
  if (const jobspec::ParamTensor* cls = FindTensor(jobspec::ClassifierTensor(config))) {
    classifier = static_cast<size_t>(cls - tensors_.data());
    // The classifier's unit: the first whose range holds it (GPT-2's first stage: the
    // embedding's wte, which it ties).
    while (cls_unit_ + 1 < num_units() && unit_end(cls_unit_) <= cls->offset) ++cls_unit_;
    cls_offset_ = cls->offset - unit_begin(cls_unit_);
  }
  working_ = std::make_unique<WorkingWeights>(be_, &tensors_, config.llama(), classifier);
  const size_t n = num_params();
  params_.Assign(be_, n);
  grads_.Assign(be_, n);
}

const float* GPT::HostParams(std::vector<float>* staged) const {
  if (be_->Supports(k::Capability::kHostAddressable)) return params_.data();
  staged->resize(num_params());
  ReadParams(staged->data());
  return staged->data();
}

template <typename F>
void GPT::FillParamsOnHost(F&& fill) {
  MarkParamsChanged();
  if (be_->Supports(k::Capability::kHostAddressable)) {
    fill(params_.data());
    return;
  }
  std::vector<float> host(num_params());
  ReadParams(host.data());
  fill(host.data());
  WriteParams(host.data());
}

void GPT::Select(int slot, int chunk) {
  slot_ = slot;
  chunk_ = chunk;
  ctx_->set_layers(chunk_layers_[static_cast<size_t>(chunk)].first, chunk_layers_[static_cast<size_t>(chunk)].second);
  if (layouts_.empty()) return;  // nothing laid out yet
  ctx_->set_layout(layouts_[static_cast<size_t>(chunk)]);
  ctx_->set_bases(act_.data(), SlotBase(chunk, slot));
}

std::vector<int> GPT::ChunkStartUnits() const {
  std::vector<int> units;
  for (size_t c = 1; c < chunk_layers_.size(); ++c) units.push_back(layer_unit(chunk_layers_[c].first));
  return units;
}

const jobspec::ParamTensor* GPT::FindTensor(const std::string& name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

LayerParams GPT::Layer(float* unit_base, int l) const {
  const size_t i = LayerTensor(l);
  const size_t begin = unit_begin(layer_unit(l));
  return block_->Bind(l, [&](size_t j) { return unit_base + (tensors_[i + j].offset - begin); });
}

void GPT::InitRandom(uint64_t seed) {
  const float std_base = 0.02f;
  const float std_resid = 0.02f / std::sqrt(2.0f * config_.n_layer);
  // Streams are numbered by the whole model's tensor index.
  const std::vector<jobspec::ParamTensor> all = jobspec::ParameterLayout(config_);
  std::vector<float> whole;
  FillParamsOnHost([&](float* params) {
    for (const jobspec::ParamTensor& t : tensors_) {
      size_t ti = 0;
      while (all[ti].name != t.name) ++ti;
      float* p = params + t.offset;
      const bool is_norm = t.name.find("ln_") != std::string::npos || t.name.find("layernorm") != std::string::npos ||
                           t.name == "model.norm.weight";
      if (is_norm && t.name.ends_with(".weight")) {
        std::fill(p, p + t.numel, 1.0f);
      } else if (t.shape.size() == 1 && t.global_shape.size() == 1) {
        std::fill(p, p + t.numel, 0.0f);
      } else {
        const bool resid = t.name.ends_with("attn.c_proj.weight") || t.name.ends_with("mlp.c_proj.weight");
        const double sd = resid ? std_resid : std_base;
        Rng rng(MixSeed(seed, ti));
        // A shard draws the whole tensor's stream and keeps its block.
        whole.resize(all[ti].numel);
        for (float& x : whole) x = static_cast<float>(rng.Normal() * sd);
        jobspec::ForEachRun(t, [&](int64_t g, int64_t l, int64_t n) { std::copy_n(whole.data() + g, n, p + l); });
      }
    }
  });
}

void GPT::CopyFromWhole(const GPT& whole) {
  std::vector<float> staged;
  const float* all = whole.HostParams(&staged);
  FillParamsOnHost([&](float* params) {
    for (const jobspec::ParamTensor& t : tensors_) {
      const jobspec::ParamTensor* w = whole.FindTensor(t.name);
      const float* src = all + w->offset;
      float* dst = params + t.offset;
      jobspec::ForEachRun(t, [&](int64_t g, int64_t l, int64_t n) { std::copy_n(src + g, n, dst + l); });
    }
  });
}

GemmOperands GPT::GemmWeights(const LayerParams& w, int l) {
  const float* src[8] = {w.qkvw, w.qkvb, w.projw, w.projb, w.fcw, w.fcb, w.fcprojw, w.fcprojb};
  return working_->Layer(src, LayerTensor(l), gathers());
}

void GPT::ZeroGrad() { be_->Zero(grads_.data(), grads_.size() * sizeof(float)); }

void GPT::set_cp_comm(comm::Communicator* comm) {
  cp_comm_ = comm != nullptr && comm->size() > 1 ? comm : nullptr;
  cp_thread_ = cp_comm_ != nullptr ? std::make_unique<comm::CommThread>(cp_comm_) : nullptr;
  // The exchanges reach the backend's memory from that thread (a GPU's: bound to its device).
  if (cp_thread_ != nullptr) cp_thread_->Submit([be = be_](comm::Communicator&) { return be->BindThread(); });
  ring_.reset();
  ctx_->set_context_parallel(nullptr, nullptr);
  moe_->set_cp(cp_thread_.get());
  act_B_ = act_T_ = 0;  // laid out again at the next forward
}

size_t GPT::context_parallel_bytes() const {
  return ring_ != nullptr ? ring_->bytes() + ctx_->ring_scratch_bytes() : 0;
}

RingAttention::Blocks GPT::context_parallel_blocks() const {
  return ring_ != nullptr ? ring_->blocks() : RingAttention::Blocks{};
}

bool GPT::SetUpContextParallel(int T) {
  const int cp = this->cp();
  absl::StatusOr<CpSharding> shard = CpSharding::Make(T * cp, cp, cp_comm_->rank());
  if (!shard.ok()) {
    ctx_->Fail(shard.status());
    return false;
  }
  // The ring's block ops, RoPE at the positions and the position embeddings' gather run on the
  // backend, on its memory.
  ring_ = std::make_unique<RingAttention>(cp_thread_.get(), *shard, be_);
  const std::vector<int> positions = shard->Positions();
  static_assert(sizeof(int32_t) == sizeof(float) && sizeof(int) == sizeof(int32_t));
  cp_positions_.Assign(be_, positions.size(), /*zero=*/false);
  be_->CopyToDevice(cp_positions_.data(), positions.data(), positions.size() * sizeof(int32_t));
  ctx_->set_context_parallel(ring_.get(), reinterpret_cast<const int32_t*>(cp_positions_.data()));
  return true;
}

void GPT::EnsureActivations(int B, int T) {
  if (B == act_B_ && T == act_T_) return;
  const bool ring = cp_comm_ != nullptr && SetUpContextParallel(T);
  // A Llama's grouped key/value heads straight to the attention where the backend takes them
  // (cuDNN's SDPA), or to the ring (only the key/value heads travel): no repeated copy of them,
  // nor of their gradient. The ring keeps each row's log-sum-exp where the fused attention does.
  const bool grouped = config_.llama() &&
                       (ring || be_->Supports(k::Capability::kGroupedAttention,
                                              {B, T, dims().NH, dims().NKV, dims().hd, ctx_->precision()}));
  const bool fused = ring || be_->Supports(k::Capability::kFusedAttention);
  jobspec::LayoutOptions lo;
  lo.recompute = recompute_;
  lo.fused_attention = fused;
  lo.half = mixed();
  lo.grouped_attention = grouped;
  lo.share_logits = share_logits_;
  lo.classifier_rows = classifier_rows_;
  const jobspec::ChunkedActivations o = jobspec::LayoutChunks(config_, shard_, B, T, lo);
  act_.Assign(be_, o.floats(slots_));
  layouts_ = o.chunks;
  act_shared_ = o.shared;
  act_kept_ = o.kept;
  act_mailbox_ = o.mailbox;
  act_B_ = B;
  act_T_ = T;
  tokens_per_slot_ = static_cast<size_t>(B) * T;
  static_assert(sizeof(int32_t) == sizeof(float));
  tokens_.Assign(be_, 2 * tokens_per_slot_ * static_cast<size_t>(slots_));
  if (!be_->Supports(k::Capability::kHostAddressable)) {
    if (tokens_in_flight_) ctx_->Fail(be_->SynchronizeEvent(tokens_sent_));  // the old staging is read
    tokens_in_flight_ = false;
    staging_.AssignHost(be_, (2 * static_cast<size_t>(slots_) + 1) * tokens_per_slot_);
    if (tokens_sent_ == nullptr) tokens_sent_ = be_->NewEvent();
    if (losses_read_ == nullptr) losses_read_ = be_->NewEvent();
  }
  Select(0);
}

void GPT::RunForward(int B, int T) {
  const jobspec::ActivationLayout& o = ctx_->off();
  const int C = dims().C, v0 = dims().v0, Vl = dims().Vl;
  const int BT = B * T;
  if (first_chunk()) {
    float* E = UnitParams(0);  // wte's (embed_tokens') rows at E, wpe at E + wpe offset
    // Vocabulary-parallel: each rank embeds the tokens it holds, rank 0 adds the positions
    // (Llama has none: RoPE), the group's sum is the embedding.
    const float* wpe = shard_.tp_rank == 0 && !config_.llama() ? E + tensors_[1].offset : nullptr;
    if (wpe != nullptr && ring_ != nullptr) {  // context parallelism: the rows' positions' embeddings
      // (each half of the rows is one chunk: positions in a row)
      const CpSharding& cs = ring_->shard();
      const size_t n = static_cast<size_t>(cs.chunk()) * C;
      if (cp_wpe_.size() != static_cast<size_t>(T) * C) cp_wpe_.Assign(be_, static_cast<size_t>(T) * C, false);
      for (int half = 0; half < 2; ++half) {
        be_->Copy(cp_wpe_.data() + half * n, wpe + static_cast<size_t>(cs.ChunkOf(half)) * n, n * sizeof(float));
      }
      wpe = cp_wpe_.data();
    }
    // With sequence parallelism the sum is reduce-scattered: this rank's rows.
    float* out = tp_->sp() ? A(o.proj) : A(o.encoded);
    ctx_->Op("encoder fwd", [&] { be_->EncoderForward(out, SlotTokens(), E, v0, v0 + Vl, wpe, B, T, C); });
    ReleaseUnitParams(0);
    if (tp_->sp()) {
      ctx_->Op("sp reduce-scatter",
               [&] { tp_->ReduceScatter(out, A(o.encoded), static_cast<size_t>(tp_->Rows(BT)) * C); });
    } else {
      ctx_->Op("tp all-reduce", [&] { tp_->AllReduce(out, static_cast<size_t>(BT) * C); });
    }
  }
  // The classifier reads every row: with sequence parallelism the final norm's rows are gathered.
  const kernels::Ptr lnf = H(tp_->sp() ? A(o.gathered) : A(o.lnf));
  // Each layer's last residual add runs fused with the norm its output meets next (the next
  // layer's input norm, on the last layer the final norm), where that norm's tensors are at hand:
  // not under ZeRO 3, whose gathered units are held one at a time (and prefetched one ahead), so
  // that holding the next one early would raise its peak memory.
  const bool chain = host_ == nullptr || !host_->gathers_params();
  const float* residual = A(o.encoded);
  bool final_normed = false;  // fused with the last layer's residual add
  for (int l = dims().lb; l < dims().le; ++l) {
    const LayerParams p = Layer(UnitParams(layer_unit(l)), l);
    const bool last = l + 1 == dims().le;
    const int next_unit = last ? head_unit() : layer_unit(l + 1);
    NormOut next{};
    if (chain && (!last || last_chunk())) {
      float* np = UnitParams(next_unit);  // the head's: ln_f weight, then bias (Llama: norm's weight)
      next = last ? block_->FinalNorm(lnf, np) : block_->InputNorm(l + 1, Layer(np, l + 1));
    }
    block_->Forward(l, p, GemmWeights(p, l), residual, B, T, "", next.w != nullptr ? &next : nullptr,
                    chain && l > dims().lb);
    if (next.w != nullptr) ReleaseUnitParams(next_unit);
    ReleaseUnitParams(layer_unit(l));
    residual = ctx_->LayerOutput(l);
    final_normed = last && next.w != nullptr;
  }
  if (!last_chunk()) return;
  {
    const int R = tp_->Rows(BT);
    if (!final_normed) {
      block_->FinalNormForward(lnf, residual, UnitParams(head_unit()), R);
      ReleaseUnitParams(head_unit());
    }
    if (tp_->sp()) {
      const size_t elems = static_cast<size_t>(R) * C;
      ctx_->Op("sp all-gather", [&] { tp_->AllGather(lnf.as_f32(), A(o.lnf), mixed() ? elems / 2 : elems); });
    }
  }
  // Classifier: logits = lnf @ W^T, W this rank's vocabulary rows of the tied wte (Llama's
  // lm_head). W stays acquired until the classifier's backward (or, without one, the end of
  // ForwardStage). In blocks of rows (classifier_rows), the loss computes them (QueueLoss), or
  // ReadLogits the rows it is asked for.
  float* wte = UnitParams(wte_unit());
  if (o.classifier_rows > 0) return;  // (held; ClassifierBlocks makes the GEMM's weight)
  const kernels::CPtr W = ClassifierWeight(wte + wte_offset());
  ctx_->Op("classifier matmul fwd", [&] {
    be_->MatmulForward(H(A(o.logits)), H(A(o.lnf)), W, nullptr, BT, C, Vl, k::WeightLayout::kOutIn);
  });
}

void GPT::ReadLogits(float* host, size_t row, size_t rows) {
  const jobspec::ActivationLayout& o = ctx_->off();
  const size_t Vl = static_cast<size_t>(dims().Vl);
  if (o.classifier_rows > 0) {
    // The logits of a block of rows at a time into the block's room, each copied out as it is made.
    const size_t C = static_cast<size_t>(dims().C), block = static_cast<size_t>(o.classifier_rows);
    const kernels::CPtr W = ClassifierWeight(UnitParams(wte_unit()) + wte_offset());
    const kernels::CPtr lnf = H(A(o.lnf));
    for (size_t done = 0; done < rows;) {
      const size_t m = std::min(block, rows - done);
      be_->MatmulForward(H(A(o.logits)), lnf + static_cast<int64_t>((row + done) * C), W, nullptr,
                         static_cast<int>(m), static_cast<int>(C), static_cast<int>(Vl), k::WeightLayout::kOutIn);
      CopyLogitsOut(host + done * Vl, 0, m);
      done += m;
    }
    ReleaseUnitParams(wte_unit());
    return;
  }
  CopyLogitsOut(host, row, rows);
}

void GPT::CopyLogitsOut(float* host, size_t row, size_t rows) {
  const size_t Vl = static_cast<size_t>(dims().Vl);
  const size_t n = rows * Vl;
  if (!mixed()) {
    be_->CopyToHost(host, logits() + row * Vl, n * sizeof(float));
    Sync();
    return;
  }
  // 16-bit logits: widened on the device into the backward scratch dln's room (free between
  // steps), a block of rows at a time.
  const kernels::CPtr all = H(const_cast<float*>(logits()));
  const size_t room = static_cast<size_t>(act_B_) * act_T_ * config_.n_embd;
  for (size_t done = 0; done < n;) {
    const size_t m = std::min(room, n - done);
    float* wide = A(ctx_->off().dln);
    be_->Convert(wide, all + static_cast<int64_t>(row * Vl + done), static_cast<int64_t>(m));
    be_->CopyToHost(host + done, wide, m * sizeof(float));
    done += m;
  }
  Sync();
}

float GPT::TakeLoss() {
  const int n = pending_losses_;
  pending_losses_ = 0;
  const float* losses = A(ctx_->off().losses);
  // their copy up (QueueLoss); the host reads the others in place
  if (!be_->Supports(k::Capability::kHostAddressable)) {
    ctx_->Fail(be_->SynchronizeEvent(losses_read_));
    losses = StagedLosses();
  }
  double s = 0.0;
  for (int i = 0; i < n; ++i) s += losses[i];
  return static_cast<float>(s / n);
}

void GPT::PutTokens(int slot, const int32_t* inputs, const int32_t* targets, size_t count) {
  const size_t at = static_cast<size_t>(slot) * 2 * tokens_per_slot_;
  auto* device = reinterpret_cast<int32_t*>(tokens_.data()) + at;
  const size_t bytes = count * sizeof(int32_t);
  if (be_->Supports(k::Capability::kHostAddressable)) {
    if (inputs != nullptr) be_->CopyToDevice(device, inputs, bytes);
    if (targets != nullptr) be_->CopyToDevice(device + tokens_per_slot_, targets, bytes);
    return;
  }
  // The staging may be rewritten once the last copies from it are done (long since, in a
  // step: they went down before that micro-batch's forward).
  if (tokens_in_flight_) ctx_->Fail(be_->SynchronizeEvent(tokens_sent_));
  auto* staged = reinterpret_cast<int32_t*>(staging_.data()) + at;
  if (inputs != nullptr) {
    std::memcpy(staged, inputs, bytes);
    be_->CopyToDeviceAsync(device, staged, bytes);
  }
  if (targets != nullptr) {
    std::memcpy(staged + tokens_per_slot_, targets, bytes);
    be_->CopyToDeviceAsync(device + tokens_per_slot_, staged + tokens_per_slot_, bytes);
  }
  be_->Record(tokens_sent_);
  tokens_in_flight_ = true;
}

void GPT::QueueLoss(int B, int T, float dloss) {
  const jobspec::ActivationLayout& o = ctx_->off();
  const int BT = B * T;
  if (o.classifier_rows > 0) {
    ClassifierBlocks(BT, dloss);
  } else {
    LossRows(0, BT, dloss);
  }
  pending_losses_ = BT;
  if (!be_->Supports(k::Capability::kHostAddressable)) {
    be_->CopyToHostAsync(StagedLosses(), A(o.losses), static_cast<size_t>(BT) * sizeof(float));
    be_->Record(losses_read_);
  }
}

void GPT::ClassifierBlocks(int BT, float dloss) {
  const jobspec::ActivationLayout& o = ctx_->off();
  const int C = dims().C, Vl = dims().Vl, block = o.classifier_rows;
  const kernels::CPtr lnf = H(A(o.lnf));
  // wte is still held from this micro-batch's forward: acquiring it again gathers nothing. On the
  // first stage its gradient stays acquired until the encoder's backward adds its part.
  const kernels::CPtr W = ClassifierWeight(UnitParams(wte_unit()) + wte_offset());
  float* dE = dloss != 0.f ? UnitGrads(wte_unit()) + wte_offset() : nullptr;
  for (int row = 0; row < BT; row += block) {
    const int n = std::min(block, BT - row);
    const kernels::CPtr rows_in = lnf + static_cast<int64_t>(row) * C;
    ctx_->Op("classifier matmul fwd", [&] {
      be_->MatmulForward(H(A(o.logits)), rows_in, W, nullptr, n, C, Vl, k::WeightLayout::kOutIn);
    });
    LossRows(row, n, dloss);
    if (dloss == 0.f) continue;
    // The block's logits now hold its dlogits: dlnf's rows = dlogits @ W, dW += dlogits^T lnf's rows.
    ctx_->Op("classifier matmul bwd", [&] {
      be_->MatmulBackward(tp_->NormGradOut(A(o.dlnf)) + static_cast<int64_t>(row) * C, dE, nullptr, H(A(o.logits)),
                          rows_in, W, n, C, Vl, k::WeightLayout::kOutIn);
    });
  }
  ReleaseUnitParams(wte_unit());  // this hold
  if (dloss != 0.f) ReleaseUnitParams(wte_unit());  // and the forward's: the backward reads W no more
}

void GPT::LossRows(int row, int rows, float dloss) {
  const jobspec::ActivationLayout& o = ctx_->off();
  const int32_t* targets = SlotTokens() + tokens_per_slot_ + row;
  float* losses = A(o.losses) + row;
  const kernels::Ptr logits = H(A(o.logits));  // these rows' (from the room's start in blocks)
  if (shard_.tp == 1) {
    if (dloss == 0.f) {
      ctx_->Op("classifier xent fwd",
               [&] { be_->CrossEntropyForward(losses, logits, targets, rows, config_.vocab_size); });
    } else {
      ctx_->Op("classifier softmax+xent", [&] {
        be_->CrossEntropyFusedForwardBackward(losses, logits, targets, dloss, rows, config_.vocab_size);
      });
    }
    return;
  }
  // Vocabulary-parallel: each rank's row statistics, all-gathered, combined in rank order.
  const int Vl = dims().Vl, v0 = dims().v0;
  const size_t room = static_cast<size_t>(o.classifier_rows > 0 ? o.classifier_rows : rows) * 3;
  const size_t n = static_cast<size_t>(rows) * 3;
  if (xent_stats_.size() != room * (static_cast<size_t>(shard_.tp) + 1)) {
    xent_stats_.Assign(be_, room * (static_cast<size_t>(shard_.tp) + 1));
  }
  float* mine = xent_stats_.data() + n * static_cast<size_t>(shard_.tp);
  ctx_->Op("classifier softmax+xent", [&] {
    be_->CrossEntropyShardStats(mine, logits, targets, rows, Vl, v0);
    if (tp_->comm() != nullptr) tp_->AllGather(mine, xent_stats_.data(), n);
    be_->CrossEntropyShardFinish(losses, logits, xent_stats_.data(), shard_.tp, targets, dloss, rows, Vl, v0);
  });
}

float GPT::Forward(const int32_t* inputs, const int32_t* targets, int B, int T) {
  return ForwardStage(0, inputs, targets, B, T, 0.f);
}

float GPT::ForwardStage(int slot, const int32_t* inputs, const int32_t* targets, int B, int T, float dloss_scale,
                        int chunk) {
  QueueForwardStage(slot, inputs, targets, B, T, dloss_scale, chunk);
  // The interleaved pipeline: the output, to be sent, into the slot's mailbox (the stage's
  // buffer is the next forward's).
  if (act_mailbox_ > 0 && !last_chunk()) {
    be_->Copy(Mailbox(slot), ctx_->LayerOutput(dims().le - 1), stage_floats(B, T) * sizeof(float));
  }
  float loss = std::numeric_limits<float>::quiet_NaN();
  // Mean over the B*T tokens, times 1/grad_accum; plus this stage's MoE loss terms.
  if (pending_losses_ > 0) loss = TakeLoss() + moe_->last_loss();
  Sync();
  return loss;
}

bool GPT::Refused() {
  if (mixed() && config_.moe.num_experts > 0) {  // the job spec refuses this; a model built directly says so
    ctx_->Fail(absl::UnimplementedError(absl::StrCat("a mixture-of-experts model runs in fp32 only (precision is ",
                                                     kernels::PrecisionName(ctx_->precision()),
                                                     "; the experts' 16-bit path is not built yet)")));
    pending_losses_ = 0;
    return true;
  }
  return false;
}

void GPT::QueueForwardStage(int slot, const int32_t* inputs, const int32_t* targets, int B, int T,
                            float dloss_scale, int chunk) {
  if (Refused()) return;
  EnsureActivations(B, T);
  RefreshWorking();
  Select(slot, chunk);
  // The tokens into the backend's memory: the encoder reads the inputs again in backward.
  const bool loss = last_chunk() && targets != nullptr;
  PutTokens(slot, first_chunk() ? inputs : nullptr, loss ? targets : nullptr, static_cast<size_t>(B) * T);
  moe_->BeginForward(dloss_scale);
  RunForward(B, T);
  moe_->EndForward();
  pending_losses_ = 0;
  if (last_chunk()) {
    if (loss) QueueLoss(B, T, dloss_scale / static_cast<float>(B * T));
    if (dloss_scale == 0.f) ReleaseUnitParams(wte_unit());  // no backward follows
    if (dloss_scale != 0.f && !loss && ctx_->off().classifier_rows > 0) {
      // In blocks the forward runs the classifier's backward from the targets; without them there
      // is no gradient to start from (the whole classifier's backward would read the logits).
      ReleaseUnitParams(wte_unit());
      ctx_->Fail(absl::InvalidArgumentError(
          "a backward needs the last stage's targets (the classifier runs in blocks of rows, "
          "classifier_rows, and computes its gradient in the forward)"));
    }
  }
}

const float* GPT::stage_output(int slot, int chunk) {
  if (act_mailbox_ > 0) return Mailbox(slot);  // ForwardStage put it there
  Select(slot, chunk);
  return ctx_->LayerOutput(dims().le - 1);
}

void GPT::BackwardStage(int slot, int B, int T, int chunk) {
  Select(slot, chunk);
  const size_t bytes = stage_floats(B, T) * sizeof(float);
  if (act_mailbox_ > 0 && !last_chunk()) be_->Copy(A(ctx_->off().dres), Mailbox(slot), bytes);  // the gradient received
  RunBackward(B, T);
  // d(input), to be sent, into the mailbox (the stage's buffer is the next backward's).
  if (act_mailbox_ > 0 && !first_chunk()) be_->Copy(Mailbox(slot), A(ctx_->off().dres), bytes);
  Sync();
}

float GPT::ForwardBackward(const int32_t* inputs, const int32_t* targets, int B, int T,
                           float dloss_scale) {
  QueueForwardStage(0, inputs, targets, B, T, dloss_scale);
  RunBackward(B, T);
  // The loss's copy was queued before the backward, which the device runs meanwhile.
  if (pending_losses_ == 0) return std::numeric_limits<float>::quiet_NaN();
  return TakeLoss() + moe_->last_loss();
}

void GPT::RunBackward(int B, int T) {
  if (Refused()) return;
  const jobspec::ActivationLayout& o = ctx_->off();
  const int C = dims().C, lb = dims().lb, le = dims().le;
  const int BT = B * T, R = tp_->Rows(BT);
  float* dres = A(o.dres);
  tp_->ForgetDres16();  // (dres is the final norm's, or the next stage's)
  if (last_chunk()) {
    if (o.classifier_rows == 0) {  // (in blocks, the forward ran the classifier's backward: ClassifierBlocks)
      // logits now hold dlogits. Classifier (tied): dlnf = dlogits @ wte, dwte += dlogits^T lnf.
      // On the first stage wte's gradient stays acquired until the encoder's backward adds its part.
      // wte is still held from this micro-batch's forward: acquiring it again gathers nothing.
      float* dE = UnitGrads(wte_unit()) + wte_offset();
      const kernels::CPtr W = ClassifierWeight(UnitParams(wte_unit()) + wte_offset());
      ctx_->Op("classifier matmul bwd", [&] {
        be_->MatmulBackward(tp_->NormGradOut(A(o.dlnf)), dE, nullptr, H(A(o.logits)), H(A(o.lnf)), W, BT, C,
                            dims().Vl, k::WeightLayout::kOutIn);
      });
      ReleaseUnitParams(wte_unit());  // this hold, and the forward's
      ReleaseUnitParams(wte_unit());
    }
    const kernels::CPtr dlnf = tp_->NormGradIn(A(o.dlnf), BT);
    const float* last = ctx_->LayerOutput(le - 1);
    be_->Zero(dres, static_cast<size_t>(R) * C * sizeof(float));
    float* F = UnitParams(head_unit());
    float* dF = UnitGrads(head_unit());
    const size_t norm_n = block_->final_norm_floats();  // the final norm's weight (and bias)
    block_->FinalNormBackward(dres, tp_->NormGrads(dF, norm_n), dlnf, last, F, R, tp_->Dres16Out());
    tp_->FinishNormGrads(dF, norm_n);
    ReleaseUnitParams(head_unit());
    UnitGradsDone(head_unit());
  }  // else dres holds d(output), from the next stage
  for (int l = le - 1; l >= lb; --l) {
    const int u = layer_unit(l);
    const LayerParams p = Layer(UnitParams(u), l);
    const GemmOperands w = GemmWeights(p, l);
    const LayerParams g = Layer(UnitGrads(u), l);
    const float* residual = l > lb ? ctx_->LayerOutput(l - 1) : A(o.encoded);
    block_->Backward(l, p, w, g, residual, B, T);
    ReleaseUnitParams(u);
    UnitGradsDone(u);
  }
  if (!first_chunk()) return;  // dres holds d(input), for the previous stage
  float* dE = UnitGrads(0);
  // The vocabulary-parallel embedding's backward reads every row's gradient.
  const float* dall = dres;
  if (tp_->sp()) {
    ctx_->Op("sp all-gather", [&] { tp_->AllGather(dres, A(o.dres_all), static_cast<size_t>(R) * C); });
    dall = A(o.dres_all);
  }
  float* dwpe = config_.llama() ? nullptr : dE + tensors_[1].offset;
  // Context parallelism: the gradient of the rows' positions' embeddings (T x C, in row order),
  // then added at those positions.
  const bool at_positions = dwpe != nullptr && ring_ != nullptr;
  if (at_positions) {
    if (cp_dwpe_.size() != static_cast<size_t>(T) * C) cp_dwpe_.Assign(be_, static_cast<size_t>(T) * C, false);
    be_->Zero(cp_dwpe_.data(), cp_dwpe_.size() * sizeof(float));
  }
  ctx_->Op("encoder bwd", [&] {
    be_->EncoderBackward(dE, at_positions ? cp_dwpe_.data() : dwpe, dall, SlotTokens(), dims().v0,
                         dims().v0 + dims().Vl, B, T, C);
    if (at_positions) {  // each half of the rows is one chunk of positions
      const CpSharding& cs = ring_->shard();
      const size_t n = static_cast<size_t>(cs.chunk()) * C;
      for (int half = 0; half < 2; ++half) {
        float* to = dwpe + static_cast<size_t>(cs.ChunkOf(half)) * n;
        be_->ResidualForward(to, to, cp_dwpe_.data() + half * n, static_cast<int64_t>(n));
      }
    }
  });
  UnitGradsDone(0);
}

}  // namespace gantry::model
