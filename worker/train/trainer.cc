#include "worker/train/trainer.h"

#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "kernels/grad_norm.h"
#include "worker/model/hf_io.h"
#include "worker/train/checkpoint.h"

namespace gantry::train {

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const JobSpec& spec,
                                                         const TrainOptions& options) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->spec_ = spec;
  t->options_ = options;
  const int B = spec.train.micro_batch, T = spec.seq_len;
  const int world = options.comm ? options.comm->size() : 1;
  if (world != spec.parallel.dp) {
    return absl::InvalidArgumentError(absl::StrCat("parallel.dp is ", spec.parallel.dp, " but ", world,
                                                   " rank(s) run this job", world == 1 ? " (gantry-train runs one: submit it to a cluster)" : ""));
  }
  ASSIGN_OR_RETURN(data::TokenFile train,
                   data::TokenFile::Open(spec.data.train, spec.model.vocab_size));
  t->train_file_.emplace(std::move(train));
  ASSIGN_OR_RETURN(data::BatchLoader tl, data::BatchLoader::Create(&*t->train_file_, B, T,
                                                                   spec.train.seed,
                                                                   spec.data.shuffle));
  t->train_loader_.emplace(std::move(tl));
  if (!spec.data.val.empty()) {
    ASSIGN_OR_RETURN(data::TokenFile val,
                     data::TokenFile::Open(spec.data.val, spec.model.vocab_size));
    t->val_file_.emplace(std::move(val));
    ASSIGN_OR_RETURN(data::BatchLoader vl,
                     data::BatchLoader::Create(&*t->val_file_, B, T, 0, false));
    t->val_loader_.emplace(std::move(vl));
  }
  if (!options.init_from.empty()) {
    ASSIGN_OR_RETURN(model::GPTConfig c, model::ReadHFConfig(options.init_from));
    if (!(c == spec.model)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--init-from ", options.init_from, ": model (n_layer ", c.n_layer, ", n_head ",
          c.n_head, ", n_embd ", c.n_embd, ", vocab_size ", c.vocab_size, ", n_positions ",
          c.max_seq_len, ") differs from the job spec's (", spec.model.n_layer, ", ",
          spec.model.n_head, ", ", spec.model.n_embd, ", ", spec.model.vocab_size, ", ",
          spec.model.max_seq_len, ")"));
    }
  }
  t->model_ = std::make_unique<model::GPT>(spec.model);
  t->model_->InitRandom(spec.train.seed);
  if (!options.init_from.empty()) RETURN_IF_ERROR(model::LoadHFWeights(options.init_from, *t->model_));
  const size_t n_params = t->model_->num_params();
  size_t opt_begin = 0, opt_end = n_params;
  if (spec.parallel.zero_stage == 1 && world > 1) {
    // Shards of whole 64-byte lines, the last one shorter if need be.
    t->zero1_ = true;
    t->shard_ = ((n_params + world - 1) / world + 15) / 16 * 16;
    t->shard_begin_ = std::min(n_params, t->shard_ * static_cast<size_t>(options.comm->rank()));
    opt_begin = t->shard_begin_;
    opt_end = std::min(n_params, t->shard_begin_ + t->shard_);
    t->padded_.Assign(t->shard_ * world);
    t->grad_shard_.Assign(t->shard_);
    t->gathered_.Assign(t->shard_ * world);
  }
  t->opt_ = std::make_unique<AdamW>(
      t->model_->tensors(), n_params,
      AdamWConfig{spec.train.beta1, spec.train.beta2, spec.train.eps, spec.train.weight_decay}, opt_begin, opt_end);
  if (options.resume) {
    if (spec.checkpoint.dir.empty()) {
      return absl::InvalidArgumentError("--resume needs checkpoint.dir in the job spec");
    }
    auto latest = FindLatestCheckpoint(spec.checkpoint.dir);
    if (latest.ok()) {
      // The checkpoint holds the whole optimizer state; a ZeRO rank keeps its own range.
      FloatBuffer m(n_params), v(n_params);
      ASSIGN_OR_RETURN(CheckpointState st, LoadCheckpoint(*latest, *t->model_, m.data(), v.data()));
      std::copy(m.data() + opt_begin, m.data() + opt_end, t->opt_->m().data());
      std::copy(v.data() + opt_begin, v.data() + opt_end, t->opt_->v().data());
      if (st.seed != spec.train.seed) {
        return absl::FailedPreconditionError(absl::StrCat(*latest, ": written with seed ", st.seed,
                                                          ", the job spec has ", spec.train.seed));
      }
      t->start_step_ = st.step;
      std::fprintf(options.out, "resumed from %s (step %ld)\n", latest->c_str(),
                   static_cast<long>(st.step));
    } else if (!absl::IsNotFound(latest.status())) {
      return latest.status();
    }
  }
  t->inputs_.resize(static_cast<size_t>(B) * T);
  t->targets_.resize(static_cast<size_t>(B) * T);
  return t;
}

float Trainer::Evaluate(model::GPT& model, data::BatchLoader& loader, int B, int T, int batches) {
  std::vector<int32_t> in(static_cast<size_t>(B) * T), tg(static_cast<size_t>(B) * T);
  const int64_t n = std::min<int64_t>(batches, loader.num_windows());
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    loader.Fill(i, in.data(), tg.data());
    sum += model.Forward(in.data(), tg.data(), B, T);
  }
  return static_cast<float>(sum / static_cast<double>(n));
}

StepReport Trainer::Step(int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  const int B = spec_.train.micro_batch, T = spec_.seq_len;
  const int accum = spec_.grad_accum();
  const int dp = options_.comm ? options_.comm->size() : 1;
  const int rank = options_.comm ? options_.comm->rank() : 0;
  model_->ZeroGrad();
  double loss = 0.0;
  for (int micro = 0; micro < accum; ++micro) {
    // Rank r takes windows (step*accum + micro)*dp + r: together the ranks read what one
    // process with accum*dp micro-batches reads.
    train_loader_->Fill((step * accum + micro) * dp + rank, inputs_.data(), targets_.data());
    loss += model_->ForwardBackward(inputs_.data(), targets_.data(), B, T, 1.0f / accum);
  }
  loss /= accum;
  const int64_t n = static_cast<int64_t>(model_->num_params());
  // The gradient the optimizer steps with: the whole buffer, or (ZeRO 1) this rank's shard.
  float* grad = model_->grads();
  int64_t grad_n = n;
  double sum_sq = 0;
  if (zero1_) {
    // ZeRO stage 1: reduce-scatter the gradients (each rank gets the sum over ranks of its
    // shard); the global norm is the sum over shards of their squares.
    std::copy(model_->grads(), model_->grads() + n, padded_.data());
    std::fill(padded_.data() + n, padded_.data() + padded_.size(), 0.f);
    comm_status_ = options_.comm->ReduceScatterSum(padded_.data(), grad_shard_.data(), shard_);
    grad = grad_shard_.data();
    grad_n = static_cast<int64_t>(shard_);
    float sums[2] = {0.f, static_cast<float>(loss)};
    if (comm_status_.ok()) {
      kernels::scale_inplace(grad, grad_n, 1.0f / static_cast<float>(dp));
      sums[0] = static_cast<float>(kernels::sum_squares(grad, grad_n));
      comm_status_ = options_.comm->AllReduceSum(sums, 2);
    }
    if (!comm_status_.ok()) return StepReport{};
    sum_sq = sums[0];
    loss = sums[1] / static_cast<float>(dp);
  } else {
    if (dp > 1) {
      // ZeRO stage 0: sum the ranks' gradients, average; every rank takes the same step.
      comm_status_ = options_.comm->AllReduceSum(model_->grads(), static_cast<size_t>(n));
      float l = static_cast<float>(loss);
      if (comm_status_.ok()) comm_status_ = options_.comm->AllReduceSum(&l, 1);
      if (!comm_status_.ok()) return StepReport{};
      kernels::scale_inplace(model_->grads(), n, 1.0f / static_cast<float>(dp));
      loss = l / static_cast<float>(dp);
    }
    sum_sq = kernels::sum_squares(model_->grads(), n);
  }
  const double norm = std::sqrt(sum_sq);
  const float coef = kernels::clip_coefficient(norm, static_cast<float>(spec_.train.grad_clip));
  if (coef < 1.0f) kernels::scale_inplace(grad, grad_n, coef);
  const double lr = LearningRate(spec_.train, step);
  opt_->Step(model_->params(), grad, lr, static_cast<int>(step + 1));
  if (zero1_) {  // every rank updated its shard: gather the whole parameter buffer
    std::fill(grad_shard_.data(), grad_shard_.data() + shard_, 0.f);
    std::copy(model_->params() + opt_->begin(), model_->params() + opt_->end(), grad_shard_.data());
    comm_status_ = options_.comm->AllGather(grad_shard_.data(), gathered_.data(), shard_);
    if (!comm_status_.ok()) return StepReport{};
    std::copy(gathered_.data(), gathered_.data() + n, model_->params());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  StepReport r;
  r.step = step + 1;
  r.loss = static_cast<float>(loss);
  r.lr = lr;
  r.grad_norm = norm;
  r.seconds = secs;
  r.tokens_per_second = static_cast<double>(B) * T * accum * dp / secs;
  return r;
}

void Trainer::Print(const std::string& line) {
  if (options_.comm && options_.comm->rank() != 0) return;  // rank 0 speaks for the group
  if (bar_shown_) {
    std::fputs("\r\033[K", stderr);
    bar_shown_ = false;
  }
  std::fputs(line.c_str(), options_.out);
  std::fputc('\n', options_.out);
  std::fflush(options_.out);
}

void Trainer::DrawProgress(int64_t done, double elapsed) {
  if (!options_.progress) return;
  const int64_t total = spec_.train.steps - start_step_;
  const int64_t did = done - start_step_;
  const double frac = total > 0 ? static_cast<double>(did) / total : 1.0;
  const int width = 30;
  const int fill = static_cast<int>(frac * width);
  const double eta = did > 0 ? elapsed / did * (total - did) : 0.0;
  std::string bar(fill, '=');
  if (fill < width) bar += '>';
  bar.resize(width, ' ');
  std::fprintf(stderr, "\r\033[K[%s] %ld/%ld %3.0f%% ETA %dm%02ds", bar.c_str(),
               static_cast<long>(done), static_cast<long>(spec_.train.steps), frac * 100,
               static_cast<int>(eta) / 60, static_cast<int>(eta) % 60);
  std::fflush(stderr);
  bar_shown_ = true;
}

absl::Status Trainer::GatherOptimizerState(FloatBuffer* m, FloatBuffer* v) {
  const size_t n = model_->num_params();
  const int dp = options_.comm->size();
  for (auto [src, dst] : {std::pair{&opt_->m(), m}, std::pair{&opt_->v(), v}}) {
    std::fill(grad_shard_.data(), grad_shard_.data() + shard_, 0.f);
    std::copy(src->data(), src->data() + src->size(), grad_shard_.data());
    RETURN_IF_ERROR(options_.comm->AllGather(grad_shard_.data(), gathered_.data(), shard_));
    dst->Assign(n);
    std::copy(gathered_.data(), gathered_.data() + std::min(n, shard_ * dp), dst->data());
  }
  return absl::OkStatus();
}

absl::Status Trainer::Run() {
  const JobSpec& s = spec_;
  const int B = s.train.micro_batch, T = s.seq_len;
  Print(absl::StrFormat(
      "job %s: %zu parameters | %d layers, %d heads, %d embd, vocab %d | B %d x T %d x accum %d x dp %d "
      "= %d tokens/step | %ld steps",
      s.name, model_->num_params(), s.model.n_layer, s.model.n_head, s.model.n_embd,
      s.model.vocab_size, B, T, s.grad_accum(), s.parallel.dp, B * T * s.grad_accum() * s.parallel.dp,
      static_cast<long>(s.train.steps)));
  auto eval = [&](int64_t step) {
    if (!val_loader_) return;
    const float v = Evaluate(*model_, *val_loader_, B, T, s.eval.batches);
    val_losses_.push_back({step, v});
    if (options_.on_eval) options_.on_eval(step, v);
    Print(absl::StrFormat("val loss %.4f (step %ld)", v, static_cast<long>(step)));
  };
  if (start_step_ == 0) eval(0);
  const auto t_start = std::chrono::steady_clock::now();
  for (int64_t step = start_step_; step < s.train.steps; ++step) {
    StepReport r = Step(step);
    RETURN_IF_ERROR(comm_status_);
    reports_.push_back(r);
    if (!std::isfinite(r.loss)) {
      return absl::InternalError(absl::StrCat("loss is not finite at step ", r.step,
                                              " (lower train.lr or enable train.grad_clip)"));
    }
    if (options_.print_losses) {
      Print(absl::StrFormat("step %ld loss %.9g", static_cast<long>(r.step), r.loss));
    } else {
      Print(absl::StrFormat("step %5ld/%ld | loss %.6f | lr %.2e | norm %.4f | %7.1f ms | %.0f tok/s",
                            static_cast<long>(r.step), static_cast<long>(s.train.steps), r.loss,
                            r.lr, r.grad_norm, r.seconds * 1e3, r.tokens_per_second));
    }
    const bool last = r.step == s.train.steps;
    if ((s.eval.every > 0 && r.step % s.eval.every == 0) || last) {
      eval(r.step);
    }
    const bool writer = !options_.comm || options_.comm->rank() == 0;  // ranks hold the same model
    const bool ckpt = s.checkpoint.every > 0 && (r.step % s.checkpoint.every == 0 || last);
    FloatBuffer m, v;
    if (ckpt && zero1_) RETURN_IF_ERROR(GatherOptimizerState(&m, &v));  // collective: every rank
    if (writer && ckpt) {
      ASSIGN_OR_RETURN(std::string path, SaveCheckpoint(s.checkpoint.dir, *model_, zero1_ ? m.data() : opt_->m().data(),
                                                        zero1_ ? v.data() : opt_->v().data(), {r.step, s.train.seed}));
      Print(absl::StrCat("checkpoint ", path));
      if (options_.on_checkpoint) RETURN_IF_ERROR(options_.on_checkpoint(path, r.step));
    }
    DrawProgress(r.step, std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count());
    if (options_.on_step && !options_.on_step(r)) {
      return absl::CancelledError(absl::StrCat("stopped at step ", r.step));
    }
    if (options_.stop_after > 0 && r.step >= options_.stop_after && !last) {
      Print(absl::StrCat("stopped after step ", r.step, " (--stop-after)"));
      break;
    }
  }
  if (bar_shown_) {
    std::fputs("\r\033[K", stderr);
    bar_shown_ = false;
  }
  if (!options_.save_dir.empty() && (!options_.comm || options_.comm->rank() == 0)) {
    RETURN_IF_ERROR(model::SaveHFModel(options_.save_dir, *model_));
    Print(absl::StrCat("saved ", options_.save_dir));
  }
  return absl::OkStatus();
}

}  // namespace gantry::train
