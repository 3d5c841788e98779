// The model's shape and where its numbers live, without the model itself: the GPT config,
// the parameter tensors of the whole model or of one tensor/pipeline shard (names, shapes,
// flat offsets, where each shard's block sits in the whole tensor), the units forward and
// backward use together, the pipeline stages' layers, and the activation buffer's layout.
// The job spec, the planner, the coordinator and the checkpoint format need this; none of
// them needs the kernels (model/gpt.h runs the model over this layout).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace gantry::jobspec {

// The model families: GPT-2 (pre-LayerNorm, learned positions, GELU MLP, biases, tied
// embeddings), and Llama (RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention, no
// biases, untied embeddings).
enum class Arch { kGpt2, kLlama };
const char* ArchName(Arch a);  // "gpt2", "llama"

// Mixture of experts (docs/architecture.md, "Mixture of experts"): the MLP of layer l is a
// router over num_experts experts, each shaped like the dense MLP, when num_experts > 0 and
// (l + 1) % every_n_layers == 0. top_k experts a token, weights renormalised over them;
// capacity_factor 0 is dropless; the loss adds aux_loss_coeff · (Switch's load-balancing
// loss) and z_loss_coeff · (the router z-loss), each summed over the MoE layers.
struct MoeConfig {
  int num_experts = 0;
  int top_k = 1;
  double capacity_factor = 1.25;
  double aux_loss_coeff = 0.01;
  double z_loss_coeff = 0.0;
  int every_n_layers = 1;
  bool operator==(const MoeConfig&) const = default;
};

// An expert's slots for N tokens routed together: ceil(capacity_factor · N · top_k /
// num_experts), at most N; N (nothing dropped: a token picks an expert once) for
// capacity_factor 0.
int MoeCapacity(const MoeConfig& moe, int N);

struct GPTConfig {
  int max_seq_len = 1024;  // n_positions (GPT-2: rows of wpe; Llama: max_position_embeddings)
  int vocab_size = 50257;
  int n_layer = 12;
  int n_head = 12;
  int n_embd = 768;
  Arch arch = Arch::kGpt2;
  // 0 is the family's default, which the accessors below resolve: n_kv_head n_head (Llama's
  // grouped-query attention; GPT-2 has n_head), ffn_hidden the MLP's width (GPT-2 4 n_embd;
  // Llama 8/3 n_embd rounded up to a multiple of 256, as Meta's reference sizes it).
  int n_kv_head = 0;
  int ffn_hidden = 0;
  double rope_theta = 10000.0;  // Llama: RoPE's base
  double norm_eps = 1e-5;       // GPT-2's LayerNorm (1e-5 only) or Llama's RMSNorm epsilon
  MoeConfig moe{};              // GPT-2 only, for now

  bool moe_layer(int l) const { return moe.num_experts > 0 && (l + 1) % moe.every_n_layers == 0; }
  int moe_layers() const { return moe.num_experts > 0 ? n_layer / moe.every_n_layers : 0; }

  bool llama() const { return arch == Arch::kLlama; }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int head_dim() const { return n_embd / n_head; }
  int ffn() const {
    if (ffn_hidden > 0) return ffn_hidden;
    if (!llama()) return 4 * n_embd;
    return (8 * n_embd / 3 + 255) / 256 * 256;
  }
  absl::Status Validate() const;
  // Equal as models: defaults resolved (n_kv_head 0 equals n_head stated), and the MoE knobs
  // only where there are experts (a spec's moe: {num_experts: 0, top_k: 2} is the dense
  // model its config.json and normal form describe without them).
  bool operator==(const GPTConfig& o) const {
    return max_seq_len == o.max_seq_len && vocab_size == o.vocab_size && n_layer == o.n_layer && n_head == o.n_head &&
           n_embd == o.n_embd && arch == o.arch && kv_heads() == o.kv_heads() && ffn() == o.ffn() &&
           (!llama() || rope_theta == o.rope_theta) && norm_eps == o.norm_eps &&
           (moe == o.moe || (moe.num_experts == 0 && o.moe.num_experts == 0));
  }
};

struct ParamTensor {
  std::string name;  // Hugging Face name without the "transformer." prefix
  std::vector<int64_t> shape;
  size_t offset = 0;  // into the flat buffer, in elements
  size_t numel = 0;
  bool decay = false;  // AdamW weight decay: tensors of 2 or more dimensions only
  // An operand of a GEMM (the projections' weights and biases, wte as the classifier): a
  // mixed-precision model reads it in 16 bits, as autocast casts it (LayerNorm's tensors and
  // wpe stay fp32, and so does wte for the embedding's lookup).
  bool gemm = false;
  // A GEMM reads this tensor with the one before it as one matrix (Llama's q|k|v and gate|up
  // projections, adjacent in the flat buffer): its 16-bit copy follows that one's unpadded.
  bool gemm_joined = false;
  // The 16-bit elements the tensor's working copy takes (a GEMM tensor's, in mixed precision):
  // numel rounded up to 32, so that each copy starts 64-byte aligned.
  size_t working_room() const { return (numel + 31) / 32 * 32; }
  // Where the tensor sits in the whole model's tensor of the same name: a tensor or pipeline
  // parallel shard holds a block of it. Seen as a matrix (global_shape[0] rows, the rest
  // flattened into columns; a 1-D tensor is one row), the shard holds rows [row_begin,
  // row_begin + rows()) and, of each, the column runs col_runs, concatenated. The whole
  // tensor: row_begin 0, one run [0, cols).
  std::vector<int64_t> global_shape;
  int64_t row_begin = 0;
  std::vector<std::pair<int64_t, int64_t>> col_runs;
  // Another rank holds the same values and speaks for them: it writes them into checkpoints
  // and counts them in the gradient norm (tensor-parallel ranks > 0 for the replicated
  // tensors, the last pipeline stage for its copy of the tied wte).
  bool replica = false;
  int64_t rows() const { return shape.size() == 1 ? 1 : shape[0]; }
  int64_t global_rows() const { return global_shape.size() == 1 ? 1 : global_shape[0]; }
  int64_t global_numel() const {
    int64_t n = 1;
    for (int64_t d : global_shape) n *= d;
    return n;
  }
  int64_t global_cols() const { return global_numel() / global_rows(); }
};

// A shard's elements as runs of its whole tensor, in local order: f(global, local, n) says
// elements [local, local + n) of the shard are [global, global + n) of the whole tensor
// (flat indices). Whole rows come as one run.
template <typename F>
void ForEachRun(const ParamTensor& t, F&& f) {
  const int64_t gcols = t.global_cols();
  if (t.col_runs.size() == 1 && t.col_runs[0].first == 0 && t.col_runs[0].second == gcols) {
    f(t.row_begin * gcols, int64_t{0}, static_cast<int64_t>(t.numel));
    return;
  }
  int64_t local = 0;
  for (int64_t r = 0; r < t.rows(); ++r) {
    for (const auto& [b, e] : t.col_runs) {
      f((t.row_begin + r) * gcols + b, local, e - b);
      local += e - b;
    }
  }
}

// Which part of the model one rank holds. Tensor parallel (Megatron): rank tp_rank of tp
// holds heads [tp_rank·H/tp, ...) of every attention (c_attn's q, k and v columns, c_proj's
// rows), a 1/tp slice of the MLP (c_fc's columns, its c_proj's rows) and of the vocabulary
// (wte's rows, for the embedding and the classifier); LayerNorms, wpe and the row-parallel
// biases are replicated. Pipeline parallel: stage `stage` of pp holds layers [layer_begin,
// layer_end); the first stage the embedding, the last ln_f and the classifier (with pp > 1
// a copy of wte, whose gradient the two ends sum every step).
struct ModelShard {
  int tp = 1, tp_rank = 0;
  int pp = 1, stage = 0;
  int layer_begin = 0, layer_end = -1;  // -1: n_layer
  // Sequence parallelism (tp > 1): the residual stream and the norms' inputs and outputs hold
  // rows [tp_rank·BT/tp, (tp_rank+1)·BT/tp) of the B·T rows (LayoutActivations; GPT's step).
  bool sequence_parallel = false;
  // Expert parallelism (ep > 1): every MoE layer holds experts [expert_begin, expert_end) of
  // its E, named by their global index; tokens reach them by all-to-all within the group.
  int ep = 1, ep_rank = 0;
  int expert_begin(int E) const { return E / ep * ep_rank; }
  int expert_end(int E) const { return E / ep * (ep_rank + 1); }
  // The rows of a (B, T) micro-batch this rank's residual stream holds.
  int64_t residual_rows(int64_t BT) const { return sequence_parallel ? BT / tp : BT; }
  // The interleaved pipeline (parallel.virtual_stages v > 1): the rank holds v chunks of layers,
  // chunk c being virtual stage c·pp + stage of pp·v, layers [chunks[c].first, chunks[c].second)
  // (ascending, apart); layer_begin and layer_end then span them. Empty: one chunk,
  // [layer_begin, layer_end). first() and last() are the rank's (the embedding lies in chunk 0
  // of stage 0, the head in the last chunk of stage pp - 1); ChunkShard gives one chunk's.
  std::vector<std::pair<int, int>> chunks{};
  int num_chunks() const { return chunks.empty() ? 1 : static_cast<int>(chunks.size()); }
  bool first() const { return stage == 0; }
  bool last() const { return stage == pp - 1; }
  bool whole() const { return tp == 1 && pp == 1 && ep == 1; }
  // Rows [vocab_begin, vocab_end) of wte for a vocabulary of V.
  int vocab_begin(int V) const { return static_cast<int>(static_cast<int64_t>(V) * tp_rank / tp); }
  int vocab_end(int V) const { return static_cast<int>(static_cast<int64_t>(V) * (tp_rank + 1) / tp); }
};

// The family's tensor counts: the embedding's (GPT-2 wte and wpe; Llama embed_tokens) and a
// layer's (12; 9); and the classifier's weight (GPT-2's tied wte; Llama's lm_head).
int EmbeddingTensors(const GPTConfig& config);
// A MoE layer: 8 + the gate + 4 per expert held (all of them, or the shard's under ep).
int TensorsOfLayer(const GPTConfig& config, int l, const ModelShard& shard = ModelShard{});
const char* ClassifierTensor(const GPTConfig& config);

// The parameter tensors of a config (or of one shard of it), in flat-buffer order.
std::vector<ParamTensor> ParameterLayout(const GPTConfig& config);
std::vector<ParamTensor> ParameterLayout(const GPTConfig& config, const ModelShard& shard);
// Pipeline stages balanced by cost: the layer bounds (pp + 1 entries) that minimise the
// costliest stage, counting a layer's flops, the embedding's on the first stage and the
// classifier's on the last. Each stage gets at least one layer (pp <= n_layer).
std::vector<int> BalanceStages(const GPTConfig& config, int pp);
// The interleaved schedule's pp·vp chunks (stage s holding chunks s, s + pp, ...): BalanceStages'
// bounds for pp·vp stages, then each cut moved a layer at a time while that lowers the costliest
// stage's chunks together, then the costliest chunk (a stage computes all its chunks each
// micro-batch: balancing the chunks alone may pile them up on one stage, as a heavy classifier's
// chunk does on the last). vp 1: BalanceStages.
std::vector<int> BalanceChunks(const GPTConfig& config, int pp, int vp);
// Whether stage_layers gives pp stages of one layer or more that hold n_layer in all; the
// error says what is wrong.
absl::Status CheckStageLayers(const std::vector<int>& stage_layers, int pp, int n_layer);
// The layer bounds of pp stages: stage_layers' (valid: CheckStageLayers), or BalanceStages'
// when it is empty.
std::vector<int> StageBounds(const GPTConfig& config, int pp, const std::vector<int>& stage_layers = {});
// The shard of tensor rank tp_rank of tp on stage `stage` of pp, its layers from StageBounds.
// vp > 1 (the interleaved schedule): the layers split into pp·vp virtual stages (stage_layers,
// if given, has pp·vp entries), the rank holding virtual stages stage, stage + pp, ... (chunks).
ModelShard ShardOf(const GPTConfig& config, int tp, int tp_rank, int pp, int stage,
                   const std::vector<int>& stage_layers = {}, int vp = 1);
// The layers a shard holds, ascending (every chunk's).
std::vector<int> HeldLayers(const GPTConfig& config, const ModelShard& shard);
// Chunk c of a shard as a shard of its own: its layers only, pp and stage those of the virtual
// pipeline (pp·v stages), so that first() and last() say whether the chunk holds the embedding
// and the head. The shard itself for one chunk.
ModelShard ChunkShard(const GPTConfig& config, const ModelShard& shard, int c);

// Units are the blocks of the flat buffer that forward and backward use together, in
// flat-buffer order: unit 0 is the embedding (wte and wpe; embed_tokens), unit 1 + l is layer
// l, unit n_layer + 1 the head (ln_f; Llama's norm and lm_head).
// unit_begin[u] .. unit_begin[u + 1] is unit u's range (n_layer + 3 entries).
std::vector<size_t> UnitBoundaries(const GPTConfig& config);

// Where each activation of a (B, T) step lives (in floats; sub-buffers 64-byte aligned). The
// offsets fall in two regions. [0, shared) is the stage's: the one-step scratch (the
// projections' sums, the backward's gradients, the sequence-parallel exchanges, the loss's
// scratch), the recomputation scratch, and on a stage that sends its output the output until
// it is sent; it exists once, however many micro-batches are in flight. [shared, shared + kept)
// is one micro-batch's: what its backward reads, kept from its forward until its backward (a
// pipeline stage keeps one such region per micro-batch in flight: floats(slots)). That is the
// stage's input (encoded), each layer's output that the next layer takes as its input (outputs:
// the last layer's too on the last stage, where the final norm reads it), each layer's saved
// activations (layer0 + l · layer_stride + the offset: none under kFull, whose layers are
// recomputed from their inputs), and on the last stage the final norm's output and statistics,
// the logits (dlogits after the fused loss) and the per-token losses.
// Mixed precision (half): the tensors autocast keeps in 16 bits (LayerNorms' outputs, qkv,
// attention's output, the MLP's hidden and GELU, the logits, and their gradients dqkv, datty,
// dfch) take 2 bytes an element, the rest (the residual stream, statistics, the projections'
// fp32 sums that tensor parallelism adds up, the attention probabilities) 4.
// Sequence parallelism (shard.sequence_parallel): the embedding's output, the norms' outputs and
// statistics, res2 and the layers' outputs hold the rank's BT/tp rows; lnf stays whole (the
// vocabulary-parallel classifier reads every row; its statistics are the rank's rows). Scratch
// the step gathers into and reduce-scatters out of: `gathered` (a norm's output, all rows,
// 16-bit where it is), `proj_rows` (the projections' sum, the rank's rows), `dres_all` (the
// residual gradient, all rows) and `dln_rows` (a norm's input gradient, the rank's rows);
// `dnorm` the norms' weight gradients of one micro-batch, summed over the group before they
// are accumulated.
// Activation checkpointing: kFull keeps only each layer's input and recomputes the layer's
// forward in backward, into one block of the stage's; kSelective keeps all but attention's
// probabilities (B, NH, T, T), recomputed from the kept qkv into one buffer of the stage's.
// Both give the same bits as kNone: the recomputation runs the same kernels on the same inputs.
enum class Recompute { kNone, kFull, kSelective };

struct ActivationLayout {
  // The stage's region [0, shared) and one micro-batch's [shared, shared + kept); total is
  // shared + kept, the floats of a single micro-batch's step (a whole model's).
  size_t shared = 0, kept = 0, total = 0;
  // The floats of a stage that keeps `slots` micro-batches in flight.
  size_t floats(int slots) const { return shared + kept * static_cast<size_t>(slots); }
  size_t encoded, logits, losses, lnf, lnf_mean, lnf_rstd;
  // The attention and MLP projections' output (before tensor parallelism sums it), added to
  // the residual stream at once: one buffer, not kept.
  size_t proj;
  // The layers' outputs (the residual stream after each layer): layer l's at outputs +
  // (l - first layer) · output_stride, except the last layer's on a stage that sends it, which
  // is `output`, in the stage's region (sent, then dead: backward never reads it).
  size_t outputs = 0, output_stride = 0, output = 0;
  bool output_shared = false;
  // The layers' saved activations: layer l's block at layer0 + (l - first layer) · layer_stride.
  size_t layer0, layer_stride;
  // Llama: ln1/ln2/lnf are RMSNorm's outputs (their means empty), qkv is the attention's
  // (B,T,3·NH·hd) input after RoPE and the key/value heads' repetition (with grouped_attention
  // the (B,T,(NH + 2 NKV)·hd) rows after RoPE, unrepeated), fch SwiGLU's [gate | up]
  // (2F wide) and fch_gelu its output (F).
  size_t ln1, ln1_mean, ln1_rstd, qkv, atty, att, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
  // backward scratch; dres16: the residual stream's gradient rounded, for the GEMMs (half)
  size_t dres, dres16, dln, dqkv, datty, datt, dfch, dlnf;
  // The layers' backward scratch (dres, dres16, dqkv, datty, datt, dfch, dswi and the MoE's
  // moe_dy, moe_dw, moe_dlogits, moe_dx, moe_dyr, moe_dxr) lies in the logits' room, dead by
  // the time it is written, when it fits there (GPT-2 at B 64: 1.1 GB of 6.6). Only the last
  // pipeline stage has logits.
  bool backward_scratch_in_logits = false;
  // The classifier in blocks of rows (LayoutOptions::classifier_rows, when fewer than B·T): the
  // last stage's forward computes a block's logits, its loss and, in training, its gradient and
  // the classifier's backward (dlnf's rows, the weight's gradient) before the next block, so
  // that `logits` holds one block (classifier_rows rows) in the stage's region, where the
  // layers' backward scratch shares its room (the block is dead before any layer's backward),
  // and dlnf, written by the forward and read by the backward, is kept with the micro-batch.
  // 0: every row at once (logits kept, B·T rows).
  int classifier_rows = 0;
  // Llama, not kept: the q|k|v projection's (NH + 2 NKV)·hd rows before the key/value heads'
  // repetition, forward, and their gradient, backward (empty when NKV = NH: the projection
  // writes qkv itself); dswi: the gradient of SwiGLU's output.
  size_t qkvr, dswi;
  // Llama with NKV < NH on a backend whose attention reads grouped key/value heads
  // (kernels::Capability::kGroupedAttention): qkv and dqkv hold the projection's (NH + 2 NKV)·hd
  // rows themselves, the attention runs on them, and qkvr is empty.
  bool grouped_attention = false;
  // Sequence parallelism (empty without it): see above.
  size_t gathered, proj_rows, dres_all, dln_rows, dnorm;
  bool sequence_parallel = false;
  // Mixture of experts (every layer's block has room for a MoE layer's when the model has
  // any): the router's probabilities (B·T, E) (its logits first), log-sum-exps, choices,
  // weights and slots (B·T, k), the counts and offsets (2E + 1 int32) and the aux and z losses
  // (2); the dispatched rows moe_x and the experts' outputs moe_y (moe_rows, C), the experts'
  // hidden rows in fch and fch_gelu (sized for moe_rows too). Backward scratch: moe_dy
  // (moe_rows, C), moe_dw (B·T, k), moe_dlogits (B·T, E), moe_dx (moe_rows, C), and dfch.
  size_t moe_probs, moe_lse, moe_choice, moe_weight, moe_slot, moe_counts, moe_stats, moe_x, moe_y;
  size_t moe_dy, moe_dw, moe_dlogits, moe_dx;
  int moe_rows = 0;  // rows the experts take at most: min(B·T·k, E·capacity)
  // Expert parallelism (empty without it): the rows this rank's experts receive, at most
  // moe_expert_rows = ep · min(B·T·min(k, E/ep), (E/ep)·capacity) (each peer routes B·T tokens
  // as this rank does); kept per layer: moe_xr (those rows, the experts' input) and
  // moe_rcounts (2E int32: the rows kept for each expert, sent, then the rows from each peer
  // for each expert held, received: peer-major); scratch: moe_yr
  // (the experts' outputs, sent back), moe_dyr and moe_dxr (their gradients). The experts'
  // hidden rows (fch, fch_gelu, dfch) are sized for moe_expert_rows.
  size_t moe_xr, moe_rcounts, moe_yr, moe_dyr, moe_dxr;
  int moe_expert_rows = 0;
  bool half = false;
  // In the stage's region: kFull, the one block the layers are recomputed into (a layer's
  // offsets from it); kSelective, the one att buffer (att is the block's last entry, left out
  // of the kept blocks).
  size_t scratch = 0;
  Recompute recompute = Recompute::kNone;
};
// How a model lays its activations out, beside the shapes: what the backend and the job chose.
struct LayoutOptions {
  Recompute recompute = Recompute::kNone;
  // The CUDA model's fused attention (flash-style kernels, cuDNN): `att` holds each query row's
  // log-sum-exp, (B, NH, T), rather than the probabilities, and `datt` is empty.
  bool fused_attention = false;
  // Mixed precision: the tensors autocast keeps in 16 bits take 2 bytes an element.
  bool half = false;
  // A Llama's NKV < NH heads, on a backend that takes them: see ActivationLayout::grouped_attention.
  bool grouped_attention = false;
  // The layers' backward scratch in the logits' room when it fits (see
  // ActivationLayout::backward_scratch_in_logits); off, every buffer has a room of its own.
  bool share_logits = true;
  // The classifier and its loss a block of this many token rows at a time (train.classifier_rows;
  // see ActivationLayout::classifier_rows); 0, or at least B·T: every row at once.
  int classifier_rows = 0;
};
ActivationLayout LayoutActivations(const GPTConfig& config, int B, int T, Recompute recompute = Recompute::kNone);
// A shard's activations: attention, MLP and vocabulary widths are 1/tp, and its layers only.
ActivationLayout LayoutActivations(const GPTConfig& config, const ModelShard& shard, int B, int T,
                                   const LayoutOptions& options = {});

// The interleaved pipeline's activations: one layout a chunk (ChunkShard's), their stage regions
// overlaid (the region is the largest chunk's: one forward or backward runs at a time) and every
// slot as large as the largest chunk's micro-batch region (a slot holds a micro-batch of any
// chunk). With more than one chunk each slot ends in a mailbox (the residual stream's rows)
// for what its micro-batch's transfers carry, each in turn: the forward's output until it is
// sent, the gradient of that output from its arrival to the backward (which copies it into the
// chunk's gradient buffer), and the backward's input gradient until it is sent; the schedule
// may hold a transfer past the stage's next op (jobspec/pipeline.h), when the stage's own
// buffers are the next op's. One chunk: the shard's layout, floats(slots) as ActivationLayout's.
struct ChunkedActivations {
  std::vector<ActivationLayout> chunks;
  size_t shared = 0, kept = 0;  // the stage's region; a slot's (the mailbox included)
  size_t mailbox = 0;           // the mailbox's offset in a slot (0: none)
  size_t floats(int slots) const { return shared + kept * static_cast<size_t>(slots); }
};
ChunkedActivations LayoutChunks(const GPTConfig& config, const ModelShard& shard, int B, int T,
                                const LayoutOptions& options = {});

}  // namespace gantry::jobspec
