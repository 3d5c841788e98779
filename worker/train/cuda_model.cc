#include "worker/train/cuda_model.h"

#include <chrono>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/grad_norm.h"

namespace gantry::train {
namespace {

using kernels::WeightLayout;
namespace cu = cuda;

class CudaModel final : public DeviceModel {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceModel>> Create(int device, const model::GPTConfig& config, int B,
                                                             int T, const DeviceOptions& options) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || device >= count) {
      return absl::UnavailableError(absl::StrCat("device cuda:", device, ": ", count, " CUDA device(s) visible"));
    }
    std::unique_ptr<CudaModel> m(new CudaModel(config, B, T));
    m->fused_attention_ = options.fused_attention;
    ASSIGN_OR_RETURN(m->ctx_, cu::Context::Create(device));
    cudaDeviceProp prop{};
    CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
    m->device_name_ = absl::StrCat("cuda:", device, " (", prop.name, ")");
    RETURN_IF_ERROR(m->Allocate());
    return std::unique_ptr<DeviceModel>(std::move(m));
  }
  ~CudaModel() override {
    ctx_.reset();  // drains the stream
    if (arena_) cudaFree(arena_);
  }

  std::string Describe() const override {
    return absl::StrFormat("%s, arena %.2f GB", device_name_, static_cast<double>(arena_bytes_) / 1e9);
  }
  size_t arena_bytes() const override { return arena_bytes_; }

  absl::Status Upload(const float* params, const float* m, const float* v) override {
    const size_t bytes = n_ * sizeof(float);
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(params_, params, bytes, cudaMemcpyHostToDevice, ctx_->stream()));
    for (auto [dst, src] : {std::pair{m_, m}, std::pair{v_, v}}) {
      if (src) {
        CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx_->stream()));
      } else {
        CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst, 0, bytes, ctx_->stream()));
      }
    }
    return ctx_->Synchronize();
  }
  absl::Status Download(float* params, float* m, float* v) override {
    const size_t bytes = n_ * sizeof(float);
    for (auto [dst, src] : {std::pair{params, params_}, std::pair{m, m_}, std::pair{v, v_}}) {
      if (dst) CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx_->stream()));
    }
    return ctx_->Synchronize();
  }
  absl::Status ZeroGrad() override {
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(grads_, 0, n_ * sizeof(float), ctx_->stream()));
    return absl::OkStatus();
  }

  absl::StatusOr<float> ForwardBackward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                        float dloss_scale) override {
    RETURN_IF_ERROR(Forward(inputs, targets, B, T));
    const int BT = B * T;
    const float dloss = dloss_scale / static_cast<float>(BT);  // the mean over tokens, / grad_accum
    RETURN_IF_ERROR(Op("classifier softmax+xent", [&] {
      return cu::CrossEntropyFusedForwardBackward(*ctx_, A(off_.losses), A(off_.logits), tokens_ + BT, dloss, BT,
                                                  config_.vocab_size);
    }));
    ASSIGN_OR_RETURN(float loss, MeanLoss(BT));
    RETURN_IF_ERROR(Backward(B, T));
    return loss;
  }

  absl::StatusOr<float> Evaluate(const int32_t* inputs, const int32_t* targets, int B, int T) override {
    RETURN_IF_ERROR(Forward(inputs, targets, B, T));
    const int BT = B * T;
    RETURN_IF_ERROR(Op("classifier xent fwd", [&] {
      return cu::CrossEntropyForward(*ctx_, A(off_.losses), A(off_.logits), tokens_ + BT, BT, config_.vocab_size);
    }));
    return MeanLoss(BT);
  }

  absl::StatusOr<double> Update(const AdamWConfig& c, double lr, int step, double grad_clip) override {
    RETURN_IF_ERROR(cu::SumSquares(*ctx_, norm_, grads_, static_cast<int64_t>(n_)));
    double sum_sq = 0;
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&sum_sq, norm_, sizeof(double), cudaMemcpyDeviceToHost, ctx_->stream()));
    RETURN_IF_ERROR(ctx_->Synchronize());
    const double norm = std::sqrt(sum_sq);
    const float coef = kernels::clip_coefficient(norm, static_cast<float>(grad_clip));
    if (coef < 1.0f) RETURN_IF_ERROR(cu::ScaleInplace(*ctx_, grads_, static_cast<int64_t>(n_), coef));
    for (const model::ParamTensor& t : tensors_) {
      const kernels::AdamWParams hp = c.Params(lr, step, t.decay);
      RETURN_IF_ERROR(Op("adamw", [&] {
        return cu::AdamWUpdate(params_ + t.offset, grads_ + t.offset, m_ + t.offset, v_ + t.offset,
                               static_cast<int64_t>(t.numel), hp, ctx_->stream());
      }));
    }
    return norm;
  }

  void set_profiling(bool on) override { profiling_ = on; }
  std::vector<std::pair<std::string, double>> TakeOpSeconds() override { return std::move(op_seconds_); }

 private:
  struct LayerParams {
    float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
  };

  CudaModel(const model::GPTConfig& config, int B, int T)
      : config_(config), tensors_(model::ParameterLayout(config)), max_B_(B), max_T_(T) {
    n_ = tensors_.back().offset + tensors_.back().numel;
  }

  // One allocation: parameters, gradients, m, v (fp32), the activations of a (max_B,
  // max_T) step, attention's scratch, the token ids and the norm.
  absl::Status Allocate() {
    const model::ActivationLayout act = model::LayoutActivations(config_, model::ModelShard{}, max_B_, max_T_,
                                                                 model::Recompute::kNone, fused_attention_);
    const int C = config_.n_embd, NH = config_.n_head;
    act_floats_ = act.total;
    attn_fwd_floats_ = fused_attention_ ? 0 : cu::AttentionForwardScratch(max_B_, max_T_, C, NH);
    attn_bwd_floats_ = fused_attention_ ? cu::FlashAttentionBackwardScratch(max_B_, max_T_, C, NH)
                                        : cu::AttentionBackwardScratch(max_B_, max_T_, C, NH);
    const size_t tokens = 2 * static_cast<size_t>(max_B_) * max_T_;
    auto align = [](size_t b) { return (b + 255) & ~size_t{255}; };
    const size_t floats[] = {n_, n_, n_, n_, act_floats_, attn_fwd_floats_, attn_bwd_floats_};
    size_t bytes = 0;
    for (size_t f : floats) bytes += align(f * sizeof(float));
    bytes += align(tokens * sizeof(int32_t)) + align(sizeof(double));
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%s: the arena for B %d x T %d needs %.2f GB, %.2f GB of %.2f GB are free (lower train.micro_batch)",
          device_name_, max_B_, max_T_, bytes / 1e9, free_b / 1e9, total_b / 1e9));
    }
    arena_ = p;
    arena_bytes_ = bytes;
    char* at = static_cast<char*>(p);
    auto take = [&](size_t b) {
      char* r = at;
      at += align(b);
      return r;
    };
    params_ = reinterpret_cast<float*>(take(n_ * 4));
    grads_ = reinterpret_cast<float*>(take(n_ * 4));
    m_ = reinterpret_cast<float*>(take(n_ * 4));
    v_ = reinterpret_cast<float*>(take(n_ * 4));
    act_ = reinterpret_cast<float*>(take(act_floats_ * 4));
    attn_fwd_ = reinterpret_cast<float*>(take(attn_fwd_floats_ * 4));
    attn_bwd_ = reinterpret_cast<float*>(take(attn_bwd_floats_ * 4));
    tokens_ = reinterpret_cast<int32_t*>(take(tokens * 4));
    norm_ = reinterpret_cast<double*>(take(sizeof(double)));
    return absl::OkStatus();
  }

  LayerParams Layer(float* base, int l) const {
    const size_t i = 2 + static_cast<size_t>(l) * 12;  // 12 tensors per layer, after wte and wpe
    auto p = [&](size_t j) { return base + tensors_[i + j].offset; };
    return {p(0), p(1), p(2), p(3), p(4), p(5), p(6), p(7), p(8), p(9), p(10), p(11)};
  }
  float* A(size_t off) { return act_ + off; }
  float* LayerAct(int l, size_t off) { return act_ + off_.layer0 + l * off_.layer_stride + off; }

  // Runs one op; when profiling, its device time goes to the op's name.
  template <typename F>
  absl::Status Op(const char* name, F&& f) {
    if (!profiling_) return f();
    RETURN_IF_ERROR(ctx_->Synchronize());
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(f());
    RETURN_IF_ERROR(ctx_->Synchronize());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (auto& [n, secs] : op_seconds_) {
      if (n == name) {
        secs += s;
        return absl::OkStatus();
      }
    }
    op_seconds_.emplace_back(name, s);
    return absl::OkStatus();
  }

  absl::Status Forward(const int32_t* inputs, const int32_t* targets, int B, int T) {
    if (B < 1 || T < 1 || B > max_B_ || T > max_T_ || T > config_.max_seq_len) {
      return absl::InvalidArgumentError(absl::StrCat("micro-batch (", B, ", ", T, ") outside the arena's (", max_B_,
                                                     ", ", max_T_, ")"));
    }
    off_ = model::LayoutActivations(config_, B, T);
    const int C = config_.n_embd, V = config_.vocab_size, NH = config_.n_head, L = config_.n_layer, BT = B * T;
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(tokens_, inputs, BT * sizeof(int32_t), cudaMemcpyHostToDevice, ctx_->stream()));
    if (targets) {
      CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(tokens_ + BT, targets, BT * sizeof(int32_t), cudaMemcpyHostToDevice, ctx_->stream()));
    }
    const float* wte = params_ + tensors_[0].offset;
    const float* wpe = params_ + tensors_[1].offset;
    RETURN_IF_ERROR(Op("encoder fwd", [&] { return cu::EncoderForward(*ctx_, A(off_.encoded), tokens_, wte, wpe, B, T, C); }));
    const float* residual = A(off_.encoded);
    for (int l = 0; l < L; ++l) {
      const LayerParams w = Layer(params_, l);
      RETURN_IF_ERROR(Op("layernorm fwd", [&] {
        return cu::LayerNormForward(*ctx_, LayerAct(l, off_.ln1), LayerAct(l, off_.ln1_mean), LayerAct(l, off_.ln1_rstd),
                                    residual, w.ln1w, w.ln1b, BT, C);
      }));
      RETURN_IF_ERROR(Op("matmul fwd", [&] {
        return cu::MatmulForward(*ctx_, LayerAct(l, off_.qkv), LayerAct(l, off_.ln1), w.qkvw, w.qkvb, BT, C, 3 * C);
      }));
      RETURN_IF_ERROR(Op("attention fwd", [&] {
        if (fused_attention_) {  // att holds the rows' log-sum-exp
          return cu::FlashAttentionForward(*ctx_, LayerAct(l, off_.atty), LayerAct(l, off_.att), LayerAct(l, off_.qkv),
                                           B, T, C, NH);
        }
        return cu::AttentionForward(*ctx_, LayerAct(l, off_.atty), LayerAct(l, off_.att), attn_fwd_,
                                    LayerAct(l, off_.qkv), B, T, C, NH);
      }));
      RETURN_IF_ERROR(Op("matmul fwd", [&] {
        return cu::MatmulForward(*ctx_, LayerAct(l, off_.attproj), LayerAct(l, off_.atty), w.projw, w.projb, BT, C, C);
      }));
      RETURN_IF_ERROR(Op("residual fwd", [&] {
        return cu::ResidualForward(LayerAct(l, off_.res2), residual, LayerAct(l, off_.attproj),
                                   static_cast<int64_t>(BT) * C, ctx_->stream());
      }));
      RETURN_IF_ERROR(Op("layernorm fwd", [&] {
        return cu::LayerNormForward(*ctx_, LayerAct(l, off_.ln2), LayerAct(l, off_.ln2_mean), LayerAct(l, off_.ln2_rstd),
                                    LayerAct(l, off_.res2), w.ln2w, w.ln2b, BT, C);
      }));
      RETURN_IF_ERROR(Op("matmul+gelu fwd", [&] {
        return cu::MatmulBiasGeluForward(*ctx_, LayerAct(l, off_.fch), LayerAct(l, off_.fch_gelu), LayerAct(l, off_.ln2),
                                         w.fcw, w.fcb, BT, C, 4 * C);
      }));
      RETURN_IF_ERROR(Op("matmul fwd", [&] {
        return cu::MatmulForward(*ctx_, LayerAct(l, off_.fcproj), LayerAct(l, off_.fch_gelu), w.fcprojw, w.fcprojb, BT,
                                 4 * C, C);
      }));
      RETURN_IF_ERROR(Op("residual fwd", [&] {
        return cu::ResidualForward(LayerAct(l, off_.res3), LayerAct(l, off_.res2), LayerAct(l, off_.fcproj),
                                   static_cast<int64_t>(BT) * C, ctx_->stream());
      }));
      residual = LayerAct(l, off_.res3);
    }
    const float* lnf = params_ + tensors_[tensors_.size() - 2].offset;  // ln_f weight, then bias
    RETURN_IF_ERROR(Op("layernorm fwd", [&] {
      return cu::LayerNormForward(*ctx_, A(off_.lnf), A(off_.lnf_mean), A(off_.lnf_rstd), residual, lnf, lnf + C, BT, C);
    }));
    return Op("classifier matmul fwd", [&] {
      return cu::MatmulForward(*ctx_, A(off_.logits), A(off_.lnf), wte, nullptr, BT, C, V, WeightLayout::kOutIn);
    });
  }

  absl::Status Backward(int B, int T) {
    const int C = config_.n_embd, V = config_.vocab_size, NH = config_.n_head, L = config_.n_layer, BT = B * T;
    float* dres = A(off_.dres);
    float* dln = A(off_.dln);
    float* dwte = grads_ + tensors_[0].offset;
    const float* wte = params_ + tensors_[0].offset;
    RETURN_IF_ERROR(Op("classifier matmul bwd", [&] {
      return cu::MatmulBackward(*ctx_, A(off_.dlnf), dwte, nullptr, A(off_.logits), A(off_.lnf), wte, BT, C, V,
                                WeightLayout::kOutIn);
    }));
    const float* last = L > 0 ? LayerAct(L - 1, off_.res3) : A(off_.encoded);
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dres, 0, static_cast<size_t>(BT) * C * sizeof(float), ctx_->stream()));
    const size_t lnf_at = tensors_[tensors_.size() - 2].offset;
    RETURN_IF_ERROR(Op("layernorm bwd", [&] {
      return cu::LayerNormBackward(*ctx_, dres, grads_ + lnf_at, grads_ + lnf_at + C, A(off_.dlnf), last,
                                   params_ + lnf_at, A(off_.lnf_mean), A(off_.lnf_rstd), BT, C);
    }));
    for (int l = L - 1; l >= 0; --l) {
      const LayerParams w = Layer(params_, l);
      const LayerParams g = Layer(grads_, l);
      const float* residual = l > 0 ? LayerAct(l - 1, off_.res3) : A(off_.encoded);
      RETURN_IF_ERROR(Op("matmul+gelu bwd", [&] {
        return cu::MatmulBackward(*ctx_, A(off_.dfch), g.fcprojw, g.fcprojb, dres, LayerAct(l, off_.fch_gelu), w.fcprojw,
                                  BT, 4 * C, C, WeightLayout::kInOut, LayerAct(l, off_.fch));
      }));
      RETURN_IF_ERROR(Op("matmul bwd", [&] {
        return cu::MatmulBackward(*ctx_, dln, g.fcw, g.fcb, A(off_.dfch), LayerAct(l, off_.ln2), w.fcw, BT, C, 4 * C);
      }));
      RETURN_IF_ERROR(Op("layernorm bwd", [&] {
        return cu::LayerNormBackward(*ctx_, dres, g.ln2w, g.ln2b, dln, LayerAct(l, off_.res2), w.ln2w,
                                     LayerAct(l, off_.ln2_mean), LayerAct(l, off_.ln2_rstd), BT, C);
      }));
      RETURN_IF_ERROR(Op("matmul bwd", [&] {
        return cu::MatmulBackward(*ctx_, A(off_.datty), g.projw, g.projb, dres, LayerAct(l, off_.atty), w.projw, BT, C, C);
      }));
      RETURN_IF_ERROR(Op("attention bwd", [&] {
        if (fused_attention_) {
          return cu::FlashAttentionBackward(*ctx_, A(off_.dqkv), attn_bwd_, A(off_.datty), LayerAct(l, off_.qkv),
                                            LayerAct(l, off_.atty), LayerAct(l, off_.att), B, T, C, NH);
        }
        return cu::AttentionBackward(*ctx_, A(off_.dqkv), attn_bwd_, A(off_.datty), LayerAct(l, off_.qkv),
                                     LayerAct(l, off_.att), B, T, C, NH);
      }));
      RETURN_IF_ERROR(Op("matmul bwd", [&] {
        return cu::MatmulBackward(*ctx_, dln, g.qkvw, g.qkvb, A(off_.dqkv), LayerAct(l, off_.ln1), w.qkvw, BT, C, 3 * C);
      }));
      // The key bias's gradient is exactly zero (model::GPT::RunBackward says why).
      CUDA_RETURN_IF_ERROR(cudaMemsetAsync(g.qkvb + C, 0, C * sizeof(float), ctx_->stream()));
      RETURN_IF_ERROR(Op("layernorm bwd", [&] {
        return cu::LayerNormBackward(*ctx_, dres, g.ln1w, g.ln1b, dln, residual, w.ln1w, LayerAct(l, off_.ln1_mean),
                                     LayerAct(l, off_.ln1_rstd), BT, C);
      }));
    }
    return Op("encoder bwd", [&] {
      return cu::EncoderBackward(*ctx_, dwte, grads_ + tensors_[1].offset, dres, tokens_, B, T, C);
    });
  }

  // The mean of the per-token losses, summed in fp64 on the host (as model::GPT does).
  absl::StatusOr<float> MeanLoss(int BT) {
    host_losses_.resize(static_cast<size_t>(BT));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_losses_.data(), A(off_.losses), BT * sizeof(float),
                                         cudaMemcpyDeviceToHost, ctx_->stream()));
    RETURN_IF_ERROR(ctx_->Synchronize());
    double s = 0;
    for (float x : host_losses_) s += x;
    return static_cast<float>(s / BT);
  }

  model::GPTConfig config_;
  std::vector<model::ParamTensor> tensors_;
  const int max_B_, max_T_;
  size_t n_ = 0;
  std::unique_ptr<cu::Context> ctx_;
  std::string device_name_;
  void* arena_ = nullptr;
  size_t arena_bytes_ = 0, act_floats_ = 0, attn_fwd_floats_ = 0, attn_bwd_floats_ = 0;
  float *params_ = nullptr, *grads_ = nullptr, *m_ = nullptr, *v_ = nullptr, *act_ = nullptr;
  float *attn_fwd_ = nullptr, *attn_bwd_ = nullptr;
  int32_t* tokens_ = nullptr;  // inputs, then targets
  double* norm_ = nullptr;
  model::ActivationLayout off_{};
  std::vector<float> host_losses_;
  bool profiling_ = false;
  bool fused_attention_ = true;
  std::vector<std::pair<std::string, double>> op_seconds_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceModel>> CreateCudaModel(int device, const model::GPTConfig& config, int B, int T,
                                                             const DeviceOptions& options) {
  return CudaModel::Create(device, config, B, T, options);
}

}  // namespace gantry::train
