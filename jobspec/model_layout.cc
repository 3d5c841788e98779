#include "jobspec/model_layout.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gantry::jobspec {

absl::Status GPTConfig::Validate() const {
  auto bad = [](absl::string_view field, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("model.", field, ": ", why));
  };
  if (n_layer < 1) return bad("n_layer", "must be >= 1");
  if (n_head < 1) return bad("n_head", "must be >= 1");
  if (n_embd < 1) return bad("n_embd", "must be >= 1");
  // Upper bounds, each past the largest models trained (GPT-3: 96 layers of 12288; Llama 3
  // 405B: 126 of 16384, MLP 53248): the sizes' products (4 n_embd, the MLP's and the
  // activations' widths) are taken in int, and the layouts are built layer by layer, so a
  // config from a file or a job spec must not reach past them.
  if (n_layer > (1 << 12)) return bad("n_layer", absl::StrCat(n_layer, " is more than 4096"));
  if (n_embd > (1 << 16)) return bad("n_embd", absl::StrCat(n_embd, " is more than 65536"));
  if (ffn_hidden > (1 << 18)) return bad("ffn_hidden", absl::StrCat(ffn_hidden, " is more than 262144"));
  if (max_seq_len > (1 << 24)) return bad("max_seq_len", absl::StrCat(max_seq_len, " is more than 16777216"));
  if (moe.num_experts > (1 << 12)) return bad("moe.num_experts", absl::StrCat(moe.num_experts, " is more than 4096"));
  if (n_embd % n_head != 0) {
    return bad("n_embd", absl::StrCat(n_embd, " is not divisible by n_head ", n_head));
  }
  // Token files hold uint16 or uint32 ids (version 2); 2^24 is past every tokenizer in use
  // (Llama 3's 128256) and keeps a rank's row indices well inside int.
  if (vocab_size < 2 || vocab_size > (1 << 24)) {
    return bad("vocab_size", absl::StrCat(vocab_size, " outside [2, 16777216]"));
  }
  if (max_seq_len < 1) return bad("max_seq_len", "must be >= 1");
  if (n_kv_head < 0) return bad("n_kv_head", "must be >= 1 (0: n_head)");
  if (moe.num_experts < 0) return bad("moe.num_experts", "must be >= 1 (0: no experts)");
  if (moe.num_experts > 0) {
    if (llama()) return bad("moe", "experts are built for arch gpt2 (a Mixtral-style Llama is not yet)");
    if (moe.top_k < 1 || moe.top_k > moe.num_experts) {
      return bad("moe.top_k", absl::StrCat(moe.top_k, " outside [1, num_experts ", moe.num_experts, "]"));
    }
    if (!(moe.capacity_factor >= 0) || !std::isfinite(moe.capacity_factor)) {
      return bad("moe.capacity_factor", absl::StrCat(moe.capacity_factor, ": must be >= 0 (0: no tokens dropped)"));
    }
    if (!(moe.aux_loss_coeff >= 0) || !(moe.z_loss_coeff >= 0)) {
      return bad("moe.aux_loss_coeff", "the loss coefficients must be >= 0");
    }
    if (moe.every_n_layers < 1 || moe.every_n_layers > n_layer) {
      return bad("moe.every_n_layers", absl::StrCat(moe.every_n_layers, " outside [1, n_layer ", n_layer, "]"));
    }
  }
  if (ffn_hidden < 0) return bad("ffn_hidden", "must be >= 1 (0: the family's default)");
  if (!llama()) {
    // GPT-2's blocks have none of these knobs: a stated value other than GPT-2's is an error.
    if (kv_heads() != n_head) return bad("n_kv_head", absl::StrCat(n_kv_head, ": GPT-2 has n_head key/value heads (grouped-query attention needs arch: llama)"));
    if (ffn() != 4 * n_embd) return bad("ffn_hidden", absl::StrCat(ffn_hidden, ": GPT-2's MLP is 4 * n_embd = ", 4 * n_embd, " wide"));
    if (norm_eps != 1e-5) return bad("norm_eps", absl::StrCat(norm_eps, ": GPT-2's LayerNorm takes 1e-5"));
    return absl::OkStatus();
  }
  if (n_head % kv_heads() != 0) {
    return bad("n_kv_head", absl::StrCat(kv_heads(), " does not divide n_head ", n_head,
                                         " (each key/value head serves a whole group of query heads)"));
  }
  if (head_dim() % 2 != 0) {
    return bad("n_embd", absl::StrCat("head_dim n_embd / n_head = ", head_dim(), " is odd (RoPE rotates pairs)"));
  }
  if (!(rope_theta > 1.0) || !std::isfinite(rope_theta)) return bad("rope_theta", absl::StrCat(rope_theta, ": must be > 1"));
  if (!(norm_eps > 0.0) || !(norm_eps < 1.0)) return bad("norm_eps", absl::StrCat(norm_eps, ": must be in (0, 1)"));
  return absl::OkStatus();
}

int MoeCapacity(const MoeConfig& m, int N) {
  if (!(m.capacity_factor > 0)) return N;
  const double slots = std::ceil(m.capacity_factor * static_cast<double>(N) * m.top_k / m.num_experts);
  return static_cast<int>(std::min<double>(slots, N));
}

const char* ArchName(Arch a) { return a == Arch::kLlama ? "llama" : "gpt2"; }

std::vector<ParamTensor> ParameterLayout(const GPTConfig& c) { return ParameterLayout(c, ModelShard{}); }

int EmbeddingTensors(const GPTConfig& c) { return c.llama() ? 1 : 2; }
int TensorsOfLayer(const GPTConfig& c, int l, const ModelShard& sh) {
  if (c.llama()) return 9;
  const int E = c.moe.num_experts;
  return c.moe_layer(l) ? 8 + 1 + 4 * (sh.expert_end(E) - sh.expert_begin(E)) : 12;
}
const char* ClassifierTensor(const GPTConfig& c) { return c.llama() ? "lm_head.weight" : "wte.weight"; }

std::vector<ParamTensor> ParameterLayout(const GPTConfig& c, const ModelShard& sh) {
  const int64_t C = c.n_embd, V = c.vocab_size, r = sh.tp_rank;
  const int64_t Ca = C / sh.tp, F = c.ffn() / sh.tp;  // attention (query heads) and MLP widths per rank
  const std::vector<int> held = HeldLayers(c, sh);
  std::vector<ParamTensor> t;
  using Runs = std::vector<std::pair<int64_t, int64_t>>;
  // Rows [r0, r1) and column runs (empty: all) of the whole tensor of shape gshape.
  auto add = [&](std::string name, std::vector<int64_t> gshape, int64_t r0, int64_t r1, Runs runs, bool replica) {
    ParamTensor p;
    p.name = std::move(name);
    p.global_shape = std::move(gshape);
    const int64_t gcols = p.global_cols();
    if (runs.empty()) runs = {{0, gcols}};
    Runs merged;  // adjacent runs as one (tp 1 holds q, k and v whole)
    for (const auto& run : runs) {
      if (!merged.empty() && merged.back().second == run.first) {
        merged.back().second = run.second;
      } else {
        merged.push_back(run);
      }
    }
    int64_t w = 0;
    for (const auto& [b, e] : merged) w += e - b;
    p.shape = p.global_shape.size() == 1 ? std::vector<int64_t>{w} : std::vector<int64_t>{r1 - r0, w};
    p.row_begin = r0;
    p.col_runs = std::move(merged);
    p.numel = static_cast<size_t>((r1 - r0) * w);
    p.decay = p.global_shape.size() >= 2;
    p.replica = replica;
    p.offset = t.empty() ? 0 : t.back().offset + t.back().numel;
    t.push_back(std::move(p));
  };
  const bool rep = r > 0;  // replicated tensors: tensor-parallel rank 0 speaks for them
  auto whole = [&](std::string name, std::vector<int64_t> gshape) {
    const int64_t rows = gshape.size() == 1 ? 1 : gshape[0];
    add(std::move(name), std::move(gshape), 0, rows, {}, rep);
  };
  const int64_t v0 = sh.vocab_begin(c.vocab_size), v1 = sh.vocab_end(c.vocab_size);
  if (c.llama()) {
    // Hugging Face's LlamaForCausalLM names; nn.Linear weights are (out, in). A rank holds its
    // query heads' rows of q_proj and its key/value heads' rows of k_proj and v_proj (adjacent:
    // one (OC, C) GEMM), its rows of gate_proj and up_proj (adjacent likewise), and the matching
    // columns of o_proj and down_proj.
    const int64_t kv = static_cast<int64_t>(c.kv_heads()) / sh.tp * c.head_dim();  // k or v rows per rank
    auto rows = [&](std::string name, int64_t grows, int64_t per_rank) {
      add(std::move(name), {grows, C}, r * per_rank, (r + 1) * per_rank, {}, false);
    };
    if (sh.first()) add("model.embed_tokens.weight", {V, C}, v0, v1, {}, false);
    for (int l : held) {
      const std::string h = absl::StrCat("model.layers.", l, ".");
      whole(h + "input_layernorm.weight", {C});
      rows(h + "self_attn.q_proj.weight", C, Ca);
      rows(h + "self_attn.k_proj.weight", kv * sh.tp, kv);
      rows(h + "self_attn.v_proj.weight", kv * sh.tp, kv);
      add(h + "self_attn.o_proj.weight", {C, C}, 0, C, {{r * Ca, (r + 1) * Ca}}, false);
      whole(h + "post_attention_layernorm.weight", {C});
      rows(h + "mlp.gate_proj.weight", F * sh.tp, F);
      rows(h + "mlp.up_proj.weight", F * sh.tp, F);
      add(h + "mlp.down_proj.weight", {C, F * sh.tp}, 0, C, {{r * F, (r + 1) * F}}, false);
    }
    if (sh.last()) {
      whole("model.norm.weight", {C});
      add("lm_head.weight", {V, C}, v0, v1, {}, false);
    }
    for (ParamTensor& p : t) {
      p.gemm = p.name == "lm_head.weight" || p.name.find("_proj.") != std::string::npos;
      p.gemm_joined = p.name.ends_with("k_proj.weight") || p.name.ends_with("v_proj.weight") ||
                      p.name.ends_with("up_proj.weight");
    }
    return t;
  }
  auto heads = [&](int64_t base) { return std::pair<int64_t, int64_t>{base + r * Ca, base + (r + 1) * Ca}; };
  const Runs qkv = {heads(0), heads(C), heads(2 * C)};
  const Runs mlp = {{r * F, (r + 1) * F}};
  if (sh.first()) {
    add("wte.weight", {V, C}, v0, v1, {}, false);
    whole("wpe.weight", {c.max_seq_len, C});
  }
  for (int l : held) {
    const std::string h = absl::StrCat("h.", l, ".");
    whole(h + "ln_1.weight", {C});
    whole(h + "ln_1.bias", {C});
    add(h + "attn.c_attn.weight", {C, 3 * C}, 0, C, qkv, false);
    add(h + "attn.c_attn.bias", {3 * C}, 0, 1, qkv, false);
    add(h + "attn.c_proj.weight", {C, C}, r * Ca, (r + 1) * Ca, {}, false);
    whole(h + "attn.c_proj.bias", {C});
    whole(h + "ln_2.weight", {C});
    whole(h + "ln_2.bias", {C});
    if (c.moe_layer(l)) {
      // The router (nn.Linear (E, C), replicated), then each expert: the dense MLP's tensors,
      // split over tensor-parallel ranks as the dense MLP's are.
      whole(h + "mlp.gate.weight", {c.moe.num_experts, C});
      for (int e = sh.expert_begin(c.moe.num_experts); e < sh.expert_end(c.moe.num_experts); ++e) {
        const std::string x = absl::StrCat(h, "mlp.experts.", e, ".");
        add(x + "c_fc.weight", {C, 4 * C}, 0, C, mlp, false);
        add(x + "c_fc.bias", {4 * C}, 0, 1, mlp, false);
        add(x + "c_proj.weight", {4 * C, C}, r * F, (r + 1) * F, {}, false);
        whole(x + "c_proj.bias", {C});
      }
      continue;
    }
    add(h + "mlp.c_fc.weight", {C, 4 * C}, 0, C, mlp, false);
    add(h + "mlp.c_fc.bias", {4 * C}, 0, 1, mlp, false);
    add(h + "mlp.c_proj.weight", {4 * C, C}, r * F, (r + 1) * F, {}, false);
    whole(h + "mlp.c_proj.bias", {C});
  }
  if (sh.last()) {
    whole("ln_f.weight", {C});
    whole("ln_f.bias", {C});
    if (!sh.first()) add("wte.weight", {V, C}, v0, v1, {}, true);  // the first stage speaks for wte
  }
  for (ParamTensor& p : t) {
    p.gemm = p.name == "wte.weight" || p.name.find(".attn.c_") != std::string::npos ||
             p.name.find(".mlp.c_") != std::string::npos || p.name.find(".mlp.experts.") != std::string::npos;
  }
  return t;
}

std::vector<size_t> UnitBoundaries(const GPTConfig& c) {
  const std::vector<ParamTensor> t = ParameterLayout(c);
  size_t i = static_cast<size_t>(EmbeddingTensors(c));
  std::vector<size_t> b = {0};
  b.push_back(t[i].offset);  // after the embedding
  for (int l = 0; l < c.n_layer; ++l) b.push_back(t[i += static_cast<size_t>(TensorsOfLayer(c, l))].offset);
  b.push_back(t.back().offset + t.back().numel);  // the head
  return b;
}

namespace {
// Forward flops per token: a layer's four projections and attention's two products (at
// n_positions), the classifier's product; the embedding is a lookup.
struct StageCosts {
  double layer, head, embed;
  explicit StageCosts(const GPTConfig& c) {
    const double C = c.n_embd, F = c.ffn(), qkv = C * (c.n_head + 2.0 * c.kv_heads()) * c.head_dim();
    const double mlp = (c.llama() ? 3 : 2) * C * F;  // Llama: gate, up and down
    layer = 2 * (qkv + C * C + mlp) + 4 * C * c.max_seq_len, head = 2 * C * c.vocab_size + 10 * C, embed = 2 * C;
  }
};
}  // namespace

std::vector<int> BalanceChunks(const GPTConfig& c, int pp, int vp) {
  std::vector<int> b = BalanceStages(c, pp * vp);
  if (vp <= 1) return b;
  const StageCosts k(c);
  const int n = pp * vp;
  // (the costliest stage's chunks together, the costliest chunk)
  auto score = [&](const std::vector<int>& x) {
    std::vector<double> stage(static_cast<size_t>(pp), 0);
    double chunk = 0;
    for (int v = 0; v < n; ++v) {
      const double cost = (x[static_cast<size_t>(v) + 1] - x[static_cast<size_t>(v)]) * k.layer + (v == 0 ? k.embed : 0) +
                          (v == n - 1 ? k.head : 0);
      stage[static_cast<size_t>(v % pp)] += cost;
      chunk = std::max(chunk, cost);
    }
    return std::pair<double, double>{*std::max_element(stage.begin(), stage.end()), chunk};
  };
  // Move one cut a layer at a time while that lowers the score (each chunk keeps a layer).
  for (bool moved = true; moved;) {
    moved = false;
    for (int i = 1; i < n && !moved; ++i) {
      for (int d : {-1, 1}) {
        std::vector<int> x = b;
        x[static_cast<size_t>(i)] += d;
        if (x[static_cast<size_t>(i)] <= x[static_cast<size_t>(i) - 1] || x[static_cast<size_t>(i)] >= x[static_cast<size_t>(i) + 1]) continue;
        if (score(x) < score(b)) {
          b = x;
          moved = true;
          break;
        }
      }
    }
  }
  return b;
}

std::vector<int> BalanceStages(const GPTConfig& c, int pp) {
  const StageCosts k(c);
  const double layer = k.layer, head = k.head, embed = k.embed;
  const int L = c.n_layer;
  auto cost = [&](int s, int a, int b) {  // stage s holding layers [a, b)
    return (b - a) * layer + (s == 0 ? embed : 0) + (s == pp - 1 ? head : 0);
  };
  // best[s][i]: the least max cost of stages 0..s holding layers [0, i); from[s][i] its cut.
  const double inf = 1e300;
  std::vector<std::vector<double>> best(pp, std::vector<double>(L + 1, inf));
  std::vector<std::vector<int>> from(pp, std::vector<int>(L + 1, 0));
  for (int i = 1; i <= L; ++i) best[0][i] = cost(0, 0, i);
  for (int s = 1; s < pp; ++s) {
    for (int i = s + 1; i <= L; ++i) {
      for (int j = s; j < i; ++j) {
        const double m = std::max(best[s - 1][j], cost(s, j, i));
        if (m < best[s][i]) {
          best[s][i] = m;
          from[s][i] = j;
        }
      }
    }
  }
  std::vector<int> bounds(pp + 1, L);
  for (int s = pp - 1; s > 0; --s) bounds[s] = from[s][bounds[s + 1]];
  bounds[0] = 0;
  return bounds;
}

absl::Status CheckStageLayers(const std::vector<int>& stage_layers, int pp, int n_layer) {
  if (static_cast<int>(stage_layers.size()) != pp) {
    return absl::InvalidArgumentError(
        absl::StrCat("gives ", stage_layers.size(), " stages' layers for pp ", pp, " stages"));
  }
  int64_t sum = 0;
  for (size_t s = 0; s < stage_layers.size(); ++s) {
    if (stage_layers[s] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("gives stage ", s, " ", stage_layers[s], " layers (one at least)"));
    }
    sum += stage_layers[s];
  }
  if (sum != n_layer) {
    return absl::InvalidArgumentError(absl::StrCat("gives ", sum, " layers in all, the model has ", n_layer));
  }
  return absl::OkStatus();
}

std::vector<int> StageBounds(const GPTConfig& config, int pp, const std::vector<int>& stage_layers) {
  if (stage_layers.empty()) return BalanceStages(config, pp);
  std::vector<int> bounds = {0};
  for (int n : stage_layers) bounds.push_back(bounds.back() + n);
  return bounds;
}

ModelShard ShardOf(const GPTConfig& config, int tp, int tp_rank, int pp, int stage,
                   const std::vector<int>& stage_layers, int vp) {
  const std::vector<int> bounds =
      vp > 1 && stage_layers.empty() ? BalanceChunks(config, pp, vp) : StageBounds(config, pp * vp, stage_layers);
  ModelShard sh;
  sh.tp = tp;
  sh.tp_rank = tp_rank;
  sh.pp = pp;
  sh.stage = stage;
  if (vp <= 1) {
    sh.layer_begin = bounds[static_cast<size_t>(stage)];
    sh.layer_end = bounds[static_cast<size_t>(stage) + 1];
    return sh;
  }
  for (int c = 0; c < vp; ++c) {
    const size_t v = static_cast<size_t>(c * pp + stage);
    sh.chunks.push_back({bounds[v], bounds[v + 1]});
  }
  sh.layer_begin = sh.chunks.front().first;
  sh.layer_end = sh.chunks.back().second;
  return sh;
}

std::vector<int> HeldLayers(const GPTConfig& config, const ModelShard& shard) {
  std::vector<int> held;
  for (int c = 0; c < shard.num_chunks(); ++c) {
    const ModelShard one = ChunkShard(config, shard, c);
    for (int l = one.layer_begin; l < one.layer_end; ++l) held.push_back(l);
  }
  return held;
}

ModelShard ChunkShard(const GPTConfig& config, const ModelShard& shard, int c) {
  ModelShard one = shard;
  if (shard.layer_end < 0) one.layer_end = config.n_layer;
  if (shard.chunks.empty()) return one;
  one.chunks.clear();
  one.layer_begin = shard.chunks[static_cast<size_t>(c)].first;
  one.layer_end = shard.chunks[static_cast<size_t>(c)].second;
  one.pp = shard.pp * shard.num_chunks();
  one.stage = c * shard.pp + shard.stage;
  return one;
}

ChunkedActivations LayoutChunks(const GPTConfig& config, const ModelShard& shard, int B, int T,
                                const LayoutOptions& options) {
  ChunkedActivations a;
  for (int c = 0; c < shard.num_chunks(); ++c) {
    a.chunks.push_back(LayoutActivations(config, ChunkShard(config, shard, c), B, T, options));
    a.shared = std::max(a.shared, a.chunks.back().shared);
    a.kept = std::max(a.kept, a.chunks.back().kept);
  }
  if (shard.num_chunks() > 1) {
    a.mailbox = a.kept;
    a.kept += (static_cast<size_t>(shard.residual_rows(static_cast<int64_t>(B) * T)) * config.n_embd + 15) & ~size_t{15};
  }
  return a;
}

ActivationLayout LayoutActivations(const GPTConfig& config, int B, int T, Recompute recompute) {
  LayoutOptions options;
  options.recompute = recompute;
  return LayoutActivations(config, ModelShard{}, B, T, options);
}

ActivationLayout LayoutActivations(const GPTConfig& config, const ModelShard& shard, int B, int T,
                                   const LayoutOptions& options) {
  const Recompute recompute = options.recompute;
  const bool fused_attention = options.fused_attention, half = options.half;
  const bool grouped_attention = options.grouped_attention, share_logits = options.share_logits;
  const size_t BT = static_cast<size_t>(B) * T;
  const size_t C = config.n_embd;
  const bool sp = shard.sequence_parallel && shard.tp > 1;
  const size_t R = static_cast<size_t>(shard.residual_rows(static_cast<int64_t>(BT)));  // rows of the residual stream
  const size_t Ca = C / shard.tp, NH = config.n_head / shard.tp, F = config.ffn() / shard.tp;
  const bool llama = config.llama();
  const size_t NKV = config.kv_heads() / shard.tp, hd = config.head_dim();
  // Llama: the GEMM's packed q|k|v rows apart from qkv where key/value heads repeat (unless the
  // backend's attention reads the packed rows: then qkv and dqkv are those rows); SwiGLU's input
  // is [gate | up].
  const bool grouped = llama && NKV != NH && grouped_attention;
  const size_t qkvr = llama && NKV != NH && !grouped ? BT * (NH + 2 * NKV) * hd : 0;
  const size_t qkv_w = grouped ? (NH + 2 * NKV) * hd : 3 * Ca;
  // A MoE layer's experts take up to moe_rows rows of the MLP's width (dense: B·T).
  const size_t E = static_cast<size_t>(config.moe.num_experts), K = static_cast<size_t>(config.moe.top_k);
  const bool moe = E > 0;
  const size_t moe_rows =
      moe ? std::min(BT * K, E * static_cast<size_t>(MoeCapacity(config.moe, static_cast<int>(BT)))) : 0;
  // Expert parallelism: the rows the experts held here may receive from the ep peers.
  const size_t ep = static_cast<size_t>(moe ? shard.ep : 1), Eh = E / ep;
  const size_t expert_rows =
      ep == 1 ? moe_rows
              : ep * std::min(BT * std::min(K, Eh), Eh * static_cast<size_t>(MoeCapacity(config.moe, static_cast<int>(BT))));
  const size_t xr = ep > 1 ? expert_rows : 0;  // the EP buffers' rows
  const size_t mlp_rows = std::max(BT, expert_rows);
  const size_t fc = llama ? 2 * F : F;
  const size_t V = shard.vocab_end(config.vocab_size) - shard.vocab_begin(config.vocab_size);
  const size_t L = (shard.layer_end < 0 ? config.n_layer : shard.layer_end) - shard.layer_begin;
  const bool last = shard.last();
  // The classifier's rows at a time: a block of them, or all.
  const size_t crows = last && options.classifier_rows > 0 && static_cast<size_t>(options.classifier_rows) < BT
                           ? static_cast<size_t>(options.classifier_rows)
                           : 0;
  size_t cur = 0;
  auto take = [&](size_t n) {
    const size_t o = cur;
    cur += (n + 15) & ~size_t{15};  // 64-byte aligned sub-buffers
    return o;
  };
  // A tensor autocast keeps in 16 bits: n elements in n/2 floats' room when half.
  auto take16 = [&](size_t n) { return take(half ? (n + 1) / 2 : n); };
  ActivationLayout o{};
  o.half = half;
  o.grouped_attention = grouped;
  o.sequence_parallel = sp;
  o.recompute = recompute;
  o.classifier_rows = static_cast<int>(crows);
  o.moe_rows = static_cast<int>(moe_rows);
  o.moe_expert_rows = static_cast<int>(expert_rows);
  const size_t mean_r = llama ? 0 : R;  // RMSNorm keeps no mean
  // A layer's block, offsets relative to the block (its output is apart: `outputs`).
  o.ln1 = take16(R * C);
  o.ln1_mean = take(mean_r);
  o.ln1_rstd = take(R);
  o.qkv = take16(BT * qkv_w);
  o.atty = take16(BT * Ca);
  o.res2 = take(R * C);
  o.ln2 = take16(R * C);
  o.ln2_mean = take(mean_r);
  o.ln2_rstd = take(R);
  o.fch = take16(mlp_rows * fc);
  o.fch_gelu = take16(mlp_rows * F);
  o.moe_probs = take(BT * E);
  o.moe_lse = take(moe ? BT : 0);
  o.moe_choice = take(moe ? BT * K : 0);
  o.moe_weight = take(moe ? BT * K : 0);
  o.moe_slot = take(moe ? BT * K : 0);
  o.moe_counts = take(moe ? 2 * E + 1 : 0);
  o.moe_stats = take(moe ? 2 : 0);
  o.moe_x = take(moe_rows * C);
  o.moe_y = take(moe_rows * C);
  o.moe_xr = take(xr * C);
  o.moe_rcounts = take(ep > 1 ? 2 * E : 0);
  const size_t without_att = cur;
  const size_t att_floats = static_cast<size_t>(B) * NH * T * (fused_attention ? 1 : T);
  o.att = take(att_floats);  // last: kSelective leaves it out
  const size_t whole = cur;
  // The layers' backward scratch: in the logits' room when it fits, as the logits are dead
  // once the classifier's backward has read them (they hold dlogits by then). dlnf is written
  // while they are read, dln is where ReadLogits widens them, and moe_yr is forward scratch:
  // those have rooms of their own. A stage without logits has nothing to share.
  auto place_backward_scratch = [&] {
    o.dres = take(R * C);
    o.dres16 = take(half ? (BT * C + 1) / 2 : 0);
    o.dqkv = take16(BT * qkv_w);
    o.datty = take16(BT * Ca);
    o.datt = take(fused_attention ? 0 : att_floats);
    o.dfch = take16(mlp_rows * fc);
    o.moe_dy = take(moe_rows * C);
    o.moe_dw = take(moe ? BT * K : 0);
    o.moe_dlogits = take(BT * E);
    o.moe_dx = take(moe_rows * C);
    o.moe_dyr = take(xr * C);
    o.moe_dxr = take(xr * C);
    o.dswi = take16(llama ? BT * F : 0);
  };
  cur = 0;
  place_backward_scratch();
  const size_t backward_scratch = cur;
  cur = 0;
  take16(last ? BT * V : 0);
  // In blocks, the logits' room holds one block and lies in the stage's region; the scratch
  // shares it however large either is (the block is dead before the layers' backward).
  o.backward_scratch_in_logits = share_logits && last && (crows > 0 || backward_scratch <= cur);
  // The stage's region: what one forward or one backward uses and leaves behind.
  cur = 0;
  o.proj = take(BT * C);
  o.dln = take(BT * C);
  o.dlnf = take(last && crows == 0 ? BT * C : 0);  // the final norm's: the last stage's only
  o.moe_yr = take(xr * C);
  o.qkvr = take16(qkvr);
  o.gathered = take16(sp ? BT * C : 0);
  o.proj_rows = take(sp ? R * C : 0);
  o.dres_all = take(sp ? BT * C : 0);
  o.dln_rows = take(sp ? R * C : 0);
  o.dnorm = take(sp ? 2 * C : 0);
  // A stage that sends its output holds it until it is sent; its backward does not read it.
  o.output_shared = !last;
  o.output = take(last ? 0 : R * C);
  o.scratch = recompute == Recompute::kFull ? take(whole)
              : recompute == Recompute::kSelective ? take(whole - without_att)
                                                   : cur;
  if (crows > 0) {  // one block's logits, the scratch over them when it may share their room
    o.logits = take16(crows * V);
    if (o.backward_scratch_in_logits) {
      const size_t after_block = cur;
      cur = o.logits;
      place_backward_scratch();
      cur = std::max(cur, after_block);
    }
  }
  if (!o.backward_scratch_in_logits) place_backward_scratch();
  o.shared = cur;
  // One micro-batch's region: what its backward reads.
  o.encoded = take(R * C);  // the stage's input
  o.output_stride = (R * C + 15) & ~size_t{15};
  o.outputs = cur;
  cur += (last ? L : L - 1) * o.output_stride;
  o.layer_stride = recompute == Recompute::kFull ? 0 : recompute == Recompute::kSelective ? without_att : whole;
  o.layer0 = cur;
  cur += L * o.layer_stride;
  // The final norm's and the classifier's (the last stage's only).
  o.lnf = take16(last ? BT * C : 0);
  o.lnf_mean = take(last ? mean_r : 0);
  o.lnf_rstd = take(last ? R : 0);
  if (crows > 0) o.dlnf = take(BT * C);  // the forward's classifier writes it, the backward reads it
  if (crows == 0) o.logits = take16(last ? BT * V : 0);
  const size_t after_logits = cur;
  if (o.backward_scratch_in_logits && crows == 0) {
    cur = o.logits;
    place_backward_scratch();
    cur = after_logits;
  }
  o.losses = take(last ? BT : 0);
  o.kept = cur - o.shared;
  o.total = cur;
  return o;
}

}  // namespace gantry::jobspec
