#include "model/run_context.h"

namespace gantry::model {

ShardDims ShardDims::Of(const jobspec::GPTConfig& config, const jobspec::ModelShard& shard) {
  ShardDims d;
  d.C = config.n_embd;
  d.Ca = config.n_embd / shard.tp;
  d.NH = config.n_head / shard.tp;
  d.NKV = config.kv_heads() / shard.tp;
  d.hd = config.head_dim();
  d.Fm = config.ffn() / shard.tp;
  d.v0 = shard.vocab_begin(config.vocab_size);
  d.Vl = shard.vocab_end(config.vocab_size) - d.v0;
  d.lb = shard.layer_begin;
  d.le = shard.layer_end < 0 ? config.n_layer : shard.layer_end;
  return d;
}

void RunContext::AddOpTime(const char* name, double seconds) {
  for (auto& [n, t] : op_seconds_) {
    if (n == name) {
      t += seconds;
      return;
    }
  }
  op_seconds_.emplace_back(name, seconds);
}

}  // namespace gantry::model
