// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// One file over 700 lines on purpose: it is the one class that implements kernels::Backend on the
// cuda kinds, each op a short forward to its kernel (kernels/cuda/ops.h), plus the choice between
// cuDNN and the fused kernels that several ops share (attention, the ring's blocks). The kernels,
// the cuDNN graphs and the context live in their own files; splitting the overrides would scatter
// one interface's implementation.
#include "kernels/cuda/backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/attention_block_16bit.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"
#include "kernels/gqa.h"

namespace gantry::GANTRY_CUDA_NS {
namespace {

using kernels::BackendKind;
using kernels::WeightLayout;

#if defined(GANTRY_CUDA_EMULATED)
constexpr BackendKind kKind = BackendKind::kCudaEmulated;
#else
constexpr BackendKind kKind = BackendKind::kCuda;
#endif

class Cuda final : public kernels::Backend {
 public:
  Cuda(std::unique_ptr<Context> ctx, std::string name, const kernels::BackendOptions& options,
       std::unique_ptr<CudnnAttention> cudnn)
      : ctx_(std::move(ctx)),
        name_(std::move(name)),
        options_(options),
        fused_(options.attention != kernels::AttentionPath::kReference),
        cudnn_(std::move(cudnn)) {}
  ~Cuda() override {
    (void)Synchronize();
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    (void)ctx_->SetStream(nullptr);
    for (cudaStream_t s : streams_) cudaStreamDestroy(s);
    if (scratch_ != nullptr) cudaFree(scratch_);
  }

  BackendKind kind() const override { return kKind; }
  std::string Describe() const override { return name_; }

  void* Allocate(size_t bytes) override {
    void* p = nullptr;
    if (Check(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc")) return p;
    return nullptr;
  }
  void Free(void* p) override {
    if (p != nullptr) (void)Check(cudaFree(p), "cudaFree");
  }
  void* AllocateHost(size_t bytes) override {
    void* p = nullptr;
    if (Check(cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault), "cudaHostAlloc")) return p;
    return nullptr;
  }
  void FreeHost(void* p) override {
    if (p != nullptr) (void)Check(cudaFreeHost(p), "cudaFreeHost");
  }
  void CopyToDeviceAsync(void* dst, const void* host, size_t bytes) override {
    if (bytes > 0) Check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, ctx_->stream()), "copy to device");
  }
  void CopyToHostAsync(void* host, const void* src, size_t bytes) override {
    if (bytes > 0) Check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, ctx_->stream()), "copy to host");
  }
  void CopyToDevice(void* dst, const void* host, size_t bytes) override {
    if (bytes > 0) Check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, ctx_->stream()), "copy to device");
    // The host buffer may change once this returns: the copy must have read it.
    if (bytes > 0) Check(cudaStreamSynchronize(ctx_->stream()), "copy to device");
  }
  void CopyToHost(void* host, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    Check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, ctx_->stream()), "copy to host");
    Check(cudaStreamSynchronize(ctx_->stream()), "copy to host");
  }
  void Copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0 && dst != src) {
      Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx_->stream()), "device copy");
    }
  }
  void Zero(void* p, size_t bytes) override {
    if (bytes > 0) Check(cudaMemsetAsync(p, 0, bytes, ctx_->stream()), "cudaMemsetAsync");
  }
  void CopyRows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t width,
                int64_t rows) override {
    Keep(GANTRY_CUDA_NS::CopyRows(*ctx_, dst, dst_stride, src, src_stride, width, rows));
  }
  absl::Status Synchronize() override {
    WaitForAllStreams();
    std::lock_guard<std::mutex> l(mu_);
    return std::exchange(error_, absl::OkStatus());
  }
  // Page-locked host memory; device memory the host may not touch, not on cuda-emulated either
  // (see kernels/backend.h: it runs the GPU's paths); the attention's state the log-sum-exp
  // unless the reference kernels were asked for; grouped heads where cuDNN takes the call.
  bool Supports(kernels::Capability c, const kernels::AttentionShape& shape) const override {
    switch (c) {
      case kernels::Capability::kHostAddressable: return false;
      case kernels::Capability::kPinnedHost: return true;
      case kernels::Capability::kFusedAttention: return fused_;
      case kernels::Capability::kGroupedAttention: return TakesGroupedAttention(shape);
    }
    return false;
  }
  absl::StatusOr<std::unique_ptr<kernels::Backend>> NewPeer() const override {
    return NewBackend(ctx_->device(), options_);
  }
  absl::Status BindThread() override {
    GPU_RETURN_IF_ERROR(cudaSetDevice(ctx_->device()));
    return absl::OkStatus();
  }
  // A backend is driven by one thread at a time (a rank's), as its context's current stream
  // and cuBLAS handle are.
  Stream NewStream() override {
    cudaStream_t s = nullptr;
    if (!Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags")) return nullptr;
    streams_.push_back(s);
    return reinterpret_cast<Stream>(s);
  }
  void FreeStream(Stream s) override {
    auto it = std::find(streams_.begin(), streams_.end(), Native(s));
    if (it == streams_.end()) {
      Keep(absl::InvalidArgumentError("FreeStream: not a live stream of this backend"));
      return;
    }
    if (ctx_->stream() == *it) Keep(ctx_->SetStream(nullptr));
    Check(cudaStreamSynchronize(*it), "cudaStreamSynchronize");
    Check(cudaStreamDestroy(*it), "cudaStreamDestroy");
    streams_.erase(it);
  }
  Event NewEvent() override {
    cudaEvent_t e = nullptr;
    if (!Check(cudaEventCreate(&e), "cudaEventCreate")) return nullptr;
    events_.push_back(e);
    return reinterpret_cast<Event>(e);
  }
  void FreeEvent(Event e) override {
    auto it = std::find(events_.begin(), events_.end(), reinterpret_cast<cudaEvent_t>(e));
    if (it == events_.end()) {
      Keep(absl::InvalidArgumentError("FreeEvent: not a live event of this backend"));
      return;
    }
    Check(cudaEventDestroy(*it), "cudaEventDestroy");
    events_.erase(it);
  }
  void SetStream(Stream s) override {
    if (s != nullptr && std::find(streams_.begin(), streams_.end(), Native(s)) == streams_.end()) {
      Keep(absl::InvalidArgumentError("SetStream: not a live stream of this backend"));
      return;
    }
    Keep(ctx_->SetStream(Native(s)));
  }
  Stream current_stream() const override {
    return ctx_->stream() == ctx_->own_stream() ? nullptr : reinterpret_cast<Stream>(ctx_->stream());
  }
  void Record(Event e) override {
    if (cudaEvent_t ev = Live(e, "Record")) Check(cudaEventRecord(ev, ctx_->stream()), "cudaEventRecord");
  }
  void Wait(Event e) override {
    if (cudaEvent_t ev = Live(e, "Wait")) Check(cudaStreamWaitEvent(ctx_->stream(), ev, 0), "cudaStreamWaitEvent");
  }
  absl::Status SynchronizeEvent(Event e) override {
    cudaEvent_t ev = Live(e, "SynchronizeEvent");
    if (ev != nullptr && Check(cudaEventSynchronize(ev), "cudaEventSynchronize")) return absl::OkStatus();
    std::lock_guard<std::mutex> l(mu_);
    return std::exchange(error_, absl::OkStatus());
  }
  void* native_stream(Stream s) const override {
    return s == nullptr ? static_cast<void*>(ctx_->own_stream()) : static_cast<void*>(Native(s));
  }

  void EncoderForward(float* out, const int32_t* inp, const float* wte, int v_begin, int v_end, const float* wpe,
                      int B, int T, int C) override {
    Keep(EncoderForwardShard(*ctx_, out, inp, wte, v_begin, v_end, wpe, B, T, C));
  }
  void EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int v_begin, int v_end, int B,
                       int T, int C) override {
    Keep(EncoderBackwardShard(*ctx_, dwte, dwpe, dout, inp, v_begin, v_end, B, T, C));
  }
  void LayerNormForward(kernels::Ptr out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int N, int C) override {
    Keep(GANTRY_CUDA_NS::LayerNormForward(*ctx_, out, mean, rstd, inp, weight, bias, N, C));
  }
  void ResidualLayerNormForward(float* residual, kernels::Ptr out, float* mean, float* rstd, const float* a,
                                const float* b, const float* weight, const float* bias, int N, int C) override {
    Keep(GANTRY_CUDA_NS::ResidualLayerNormForward(*ctx_, residual, out, mean, rstd, a, b, weight, bias, N, C));
  }
  void LayerNormBackward(float* dinp, float* dweight, float* dbias, kernels::CPtr dout, const float* inp,
                         const float* weight, const float* mean, const float* rstd, int N, int C,
                         kernels::Ptr dinp16) override {
    Keep(GANTRY_CUDA_NS::LayerNormBackward(*ctx_, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, dinp16));
  }
  void RMSNormForward(kernels::Ptr out, float* rstd, const float* inp, const float* weight, int N, int C,
                      float eps) override {
    Keep(GANTRY_CUDA_NS::RMSNormForward(*ctx_, out, rstd, inp, weight, N, C, eps));
  }
  void ResidualRMSNormForward(float* residual, kernels::Ptr out, float* rstd, const float* a, const float* b,
                              const float* weight, int N, int C, float eps) override {
    Keep(GANTRY_CUDA_NS::ResidualRMSNormForward(*ctx_, residual, out, rstd, a, b, weight, N, C, eps));
  }
  void RMSNormBackward(float* dinp, float* dweight, kernels::CPtr dout, const float* inp, const float* weight,
                       const float* rstd, int N, int C, kernels::Ptr dinp16) override {
    Keep(GANTRY_CUDA_NS::RMSNormBackward(*ctx_, dinp, dweight, dout, inp, weight, rstd, N, C, dinp16));
  }
  void RopeApply(kernels::Ptr qkv, int B, int T, int NH, int NKV, int hd, const float* inv_freq,
                 bool inverse) override {
    Keep(GANTRY_CUDA_NS::RopeApply(*ctx_, qkv, B, T, NH, NKV, hd, inv_freq, inverse));
  }
  void RopeApplyAt(kernels::Ptr qkv, int B, int L, const int32_t* positions, int NH, int NKV, int hd,
                   const float* inv_freq, bool inverse) override {
    Keep(GANTRY_CUDA_NS::RopeApplyAt(*ctx_, qkv, B, L, positions, NH, NKV, hd, inv_freq, inverse));
  }
  // Context parallelism's blocks: the warp-per-row kernels (attention_block.cu), fp32.
  // Context parallelism's blocks. fp32 values: the warp-per-row kernels (attention_block.cu).
  // 16-bit values (a.values): cuDNN's SDPA on packed 16-bit copies of the operands (exact:
  // their values are the type's), its output merged by the log-sum-exps and its gradients added
  // in fp32; the fp32 kernels where cuDNN does not take the block (BlockByCudnn).
  void AttentionBlockForward(kernels::HeadRows<float> out, kernels::RowStats<float> lse,
                             kernels::HeadRows<const float> q, kernels::HeadRows<const float> k,
                             kernels::HeadRows<const float> v, const kernels::AttentionBlock& a) override {
    if (a.values == kernels::Precision::kFp32 || !BlockByCudnn("AttentionBlockForward", false, a)) {
      Keep(GANTRY_CUDA_NS::AttentionBlockForward(*ctx_, out, lse, q, k, v, a));
      return;
    }
    const BlockScratch s = CarveBlockScratch(a, false);
    if (s.q.data == nullptr) return;
    const int C = a.NH * a.hd, KVh = a.NKV * a.hd;
    if (!Keep(NarrowRows(*ctx_, s.q, C, q, a.B, a.Lq, C)) || !Keep(NarrowRows(*ctx_, s.kv, 2 * KVh, k, a.B, a.Lk, KVh)) ||
        !Keep(NarrowRows(*ctx_, s.kv + KVh, 2 * KVh, v, a.B, a.Lk, KVh))) {
      return;
    }
    if (!Keep(cudnn_->BlockForward(ctx_->stream(), s.o, s.stats, s.q, s.kv, a.B, a.Lq, a.NH, a.NKV, a.hd, a.causal,
                                   BlockScale(a)))) {
      return;
    }
    Keep(MergeBlock(*ctx_, out, lse, s.o, s.stats, a.B, a.NH, a.hd, a.Lq, a.first));
  }
  void AttentionBlockDelta(kernels::RowStats<float> D, kernels::HeadRows<const float> dout,
                           kernels::HeadRows<const float> out, int B, int NH, int hd, int L) override {
    Keep(GANTRY_CUDA_NS::AttentionBlockDelta(*ctx_, D, dout, out, B, NH, hd, L));
  }
  // 16-bit: from the rows' merged output and log-sum-exps (cuDNN's sdpa_backward with the
  // global O, dO and stats works D out itself), so that the block's dq, dk and dv are its exact
  // share, each rounded to the type once before it is added.
  void AttentionBlockBackward(kernels::HeadRows<float> dq, kernels::HeadRows<float> dk, kernels::HeadRows<float> dv,
                              kernels::HeadRows<const float> q, kernels::HeadRows<const float> k,
                              kernels::HeadRows<const float> v, kernels::HeadRows<const float> dout,
                              kernels::HeadRows<const float> out, kernels::RowStats<const float> lse,
                              kernels::RowStats<const float> D, const kernels::AttentionBlock& a) override {
    if (a.values == kernels::Precision::kFp32 || !BlockByCudnn("AttentionBlockBackward", true, a)) {
      Keep(GANTRY_CUDA_NS::AttentionBlockBackward(*ctx_, dq, dk, dv, q, k, v, dout, lse, D, a));
      return;
    }
    const BlockScratch s = CarveBlockScratch(a, true);
    if (s.q.data == nullptr) return;
    const int C = a.NH * a.hd, KVh = a.NKV * a.hd, L = a.Lq;
    if (!Keep(NarrowRows(*ctx_, s.q, C, q, a.B, L, C)) || !Keep(NarrowRows(*ctx_, s.kv, 2 * KVh, k, a.B, L, KVh)) ||
        !Keep(NarrowRows(*ctx_, s.kv + KVh, 2 * KVh, v, a.B, L, KVh)) ||
        !Keep(NarrowRows(*ctx_, s.o, C, out, a.B, L, C)) || !Keep(NarrowRows(*ctx_, s.dout, C, dout, a.B, L, C)) ||
        // the rows' merged log-sum-exps, packed (B, NH, L)
        !Keep(GANTRY_CUDA_NS::CopyRows(*ctx_, s.stats, L, lse.data, lse.ld, L, static_cast<int64_t>(a.B) * a.NH))) {
      return;
    }
    if (!Keep(cudnn_->BlockBackward(ctx_->stream(), s.dq, s.dkv, s.q, s.kv, s.o, s.dout, s.stats, a.B, L, a.NH, a.NKV,
                                    a.hd, a.causal, BlockScale(a)))) {
      return;
    }
    Keep(AddRows(*ctx_, dq, s.dq, C, a.B, L, C)) && Keep(AddRows(*ctx_, dk, s.dkv, 2 * KVh, a.B, L, KVh)) &&
        Keep(AddRows(*ctx_, dv, s.dkv + KVh, 2 * KVh, a.B, L, KVh));
  }
  void SwigluForward(kernels::Ptr h, kernels::CPtr gu, int N, int F) override {
    Keep(GANTRY_CUDA_NS::SwigluForward(*ctx_, h, gu, N, F));
  }
  void SwigluBackward(kernels::Ptr dgu, kernels::CPtr dh, kernels::CPtr gu, int N, int F) override {
    Keep(GANTRY_CUDA_NS::SwigluBackward(*ctx_, dgu, dh, gu, N, F));
  }
  void GqaExpand(kernels::Ptr out, kernels::CPtr qkv, int64_t rows, int NH, int NKV, int hd) override {
    Keep(GANTRY_CUDA_NS::GqaExpand(*ctx_, out, qkv, rows, NH, NKV, hd));
  }
  void GqaReduce(kernels::Ptr dqkv, kernels::CPtr dqkv3, int64_t rows, int NH, int NKV, int hd) override {
    Keep(GANTRY_CUDA_NS::GqaReduce(*ctx_, dqkv, dqkv3, rows, NH, NKV, hd));
  }
  void MoeRoute(float* probs, float* lse, int32_t* choice, float* weight, int32_t* slot, int32_t* counts, float* stats,
                const float* logits, int N, int E, int k, int capacity) override {
    Keep(GANTRY_CUDA_NS::MoeRoute(*ctx_, probs, lse, choice, weight, slot, counts, stats, logits, N, E, k, capacity));
  }
  void MoeDispatch(float* X, const float* x, const int32_t* slot, int N, int k, int C) override {
    Keep(GANTRY_CUDA_NS::MoeDispatch(*ctx_, X, x, slot, N, k, C));
  }
  void MoeCombine(float* y, const float* Y, const int32_t* slot, const float* weight, int N, int k, int C) override {
    Keep(GANTRY_CUDA_NS::MoeCombine(*ctx_, y, Y, slot, weight, N, k, C));
  }
  void MoeCombineBackward(float* dY, float* dweight, const float* dy, const float* Y, const int32_t* slot,
                          const float* weight, int N, int k, int C) override {
    Keep(GANTRY_CUDA_NS::MoeCombineBackward(*ctx_, dY, dweight, dy, Y, slot, weight, N, k, C));
  }
  void MoeDispatchBackward(float* dx, const float* dX, const int32_t* slot, int N, int k, int C) override {
    Keep(GANTRY_CUDA_NS::MoeDispatchBackward(*ctx_, dx, dX, slot, N, k, C));
  }
  void MoeRouterBackward(float* dlogits, const float* dweight, const float* probs, const float* lse,
                         const int32_t* choice, const float* weight, const int32_t* counts, int N, int E, int k,
                         float aux_scale, float z_scale) override {
    Keep(GANTRY_CUDA_NS::MoeRouterBackward(*ctx_, dlogits, dweight, probs, lse, choice, weight, counts, N, E, k,
                                           aux_scale, z_scale));
  }
  void MatmulForward(kernels::Ptr out, kernels::CPtr inp, kernels::CPtr weight, kernels::CPtr bias, int N, int C,
                     int OC, WeightLayout layout) override {
    if (!Types("MatmulForward", {inp, weight, bias}, {out})) return;
    float* s = nullptr;
    const size_t room =
        ctx_->bias_epilogue() ? 0 : GANTRY_CUDA_NS::MatmulForwardScratch(N, OC, out.type, static_cast<bool>(bias));
    if (room > 0 && (s = Scratch(room)) == nullptr) return;
    Keep(GANTRY_CUDA_NS::MatmulForward(*ctx_, out, inp, weight, bias, N, C, OC, layout, s));
  }
  void MatmulBiasGeluForward(kernels::Ptr pre, kernels::Ptr out, kernels::CPtr inp, kernels::CPtr weight,
                             kernels::CPtr bias, int N, int C, int OC) override {
    if (!Types("MatmulBiasGeluForward", {pre, out, inp, weight, bias})) return;
    float* s = nullptr;
    const size_t room =
        ctx_->bias_epilogue() ? 0 : GANTRY_CUDA_NS::MatmulForwardScratch(N, OC, pre.type, static_cast<bool>(bias));
    if (room > 0 && (s = Scratch(room)) == nullptr) return;
    Keep(GANTRY_CUDA_NS::MatmulBiasGeluForward(*ctx_, pre, out, inp, weight, bias, N, C, OC, s));
  }
  void MatmulBackward(kernels::Ptr dinp, float* dweight, float* dbias, kernels::CPtr dout, kernels::CPtr inp,
                      kernels::CPtr weight, int N, int C, int OC, WeightLayout layout, kernels::CPtr gelu_pre,
                      float* gelu_dbias) override {
    if (!Types("MatmulBackward", {dout, inp, weight, gelu_pre}, {dinp})) return;
    void* scratch16 = nullptr;
    if (!dout.f32() && (scratch16 = Scratch(GANTRY_CUDA_NS::MatmulBackwardScratch16(C, OC))) == nullptr) return;
    Keep(GANTRY_CUDA_NS::MatmulBackward(*ctx_, dinp, dweight, dbias, dout, inp, weight, N, C, OC, layout, gelu_pre,
                                        scratch16, gelu_dbias));
  }
  void AttentionForward(kernels::Ptr out, float* state, kernels::CPtr qkv, int B, int T, int C, int NH,
                        kernels::Precision p) override {
    if (!Types("AttentionForward", {out, qkv})) return;
    const int bits = p == kernels::Precision::kBf16 ? 16 : p == kernels::Precision::kFp16 ? 10 : 0;
    if (!fused_) {
      if (float* s = Scratch(AttentionForwardScratch(B, T, C, NH))) {
        Keep(GANTRY_CUDA_NS::AttentionForward(*ctx_, out, state, s, qkv, B, T, C, NH, bits));
      }
      return;
    }
    bool take = false;
    if (!Keep(ByCudnn("AttentionForward", qkv, B, T, C, NH, NH, p, &take))) return;
    if (take && Refused(cudnn_->Forward(ctx_->stream(), out, state, qkv, B, T, C, NH, NH))) take = false;
    if (!take) Keep(FlashAttentionForward(*ctx_, out, state, qkv, B, T, C, NH, bits));
  }
  void AttentionBackward(kernels::Ptr dqkv, float*, kernels::CPtr dout, kernels::CPtr qkv, kernels::CPtr out,
                         const float* state, int B, int T, int C, int NH, kernels::Precision p) override {
    if (!Types("AttentionBackward", {dqkv, dout, qkv, out})) return;
    if (!fused_) {
      if (float* s = Scratch(AttentionBackwardScratch(B, T, C, NH))) {
        Keep(GANTRY_CUDA_NS::AttentionBackward(*ctx_, dqkv, s, dout, qkv, state, B, T, C, NH));
      }
      return;
    }
    bool take = false;
    if (!Keep(ByCudnn("AttentionBackward", qkv, B, T, C, NH, NH, p, &take))) return;
    if (take && Refused(cudnn_->Backward(ctx_->stream(), dqkv, dout, qkv, out, state, B, T, C, NH, NH))) take = false;
    if (take) return;
    // (the fused kernels' backward reads the statistics either forward wrote: the same lse)
    if (float* s = Scratch(FlashAttentionBackwardScratch(B, T, C, NH))) {
      Keep(FlashAttentionBackward(*ctx_, dqkv, s, dout, qkv, out, state, B, T, C, NH));
    }
  }
  // Grouped calls: cuDNN's SDPA with K and V of NKV heads where it takes them; NKV = NH: the
  // attention op (the same rows); else refused, naming why (the model repeats the heads itself).
  // cuDNN is asked for both graphs' plans here, when the model lays out its activations: one it
  // will not plan (grouped heads with the deterministic backward on some GPUs) makes the model
  // repeat the key/value heads instead (the first fallback; the second, the fused kernels, is
  // AttentionForward's and AttentionBackward's), said once.
  bool TakesGroupedAttention(const kernels::AttentionShape& shape) const {
    const auto [B, T, NH, NKV, hd, p] = shape;
    // (Takes reads the tensors' type, not their data.)
    if (!options_.grouped_attention || !fused_ || cudnn_ == nullptr ||
        !CudnnAttention::Takes(kernels::CPtr(nullptr, p), B, T, NH * hd, NH, NKV, p).ok()) {
      return false;
    }
    if (NKV == NH) return true;
    for (bool backward : {false, true}) {
      const absl::Status st = cudnn_->Supports(backward, p, B, T, NH, NKV, hd);
      if (st.ok()) continue;
      if (!absl::IsUnimplemented(st)) {
        ctx_->Notice(absl::StrCat("grouped:", st.message()),
                     absl::StrCat(name_, ": grouped-query attention through cuDNN failed (", st.message(),
                                  "); the key/value heads are repeated to the query heads instead"));
        return false;
      }
      ctx_->Notice(absl::StrCat("grouped:", B, ":", T, ":", NH, ":", NKV, ":", hd, ":", kernels::PrecisionName(p)),
                   absl::StrCat(name_, ": ", st.message(),
                                "; the key/value heads are repeated to the query heads around the attention "
                                "(GqaExpand, GqaReduce) instead"));
      return false;
    }
    return true;
  }
  std::vector<std::string> TakeNotices() override { return ctx_->TakeNotices(); }
  void GroupedAttentionForward(kernels::Ptr out, float* state, kernels::CPtr qkv, int B, int T, int NH, int NKV,
                               int hd, kernels::Precision p) override {
    if (!Types("GroupedAttentionForward", {out, qkv})) return;
    if (NKV == NH) return AttentionForward(out, state, qkv, B, T, NH * hd, NH, p);
    if (!Keep(Grouped("GroupedAttentionForward", qkv, B, T, NH, NKV, hd, p))) return;
    Keep(cudnn_->Forward(ctx_->stream(), out, state, qkv, B, T, NH * hd, NH, NKV));
  }
  void GroupedAttentionBackward(kernels::Ptr dqkv, float* scratch, kernels::CPtr dout, kernels::CPtr qkv,
                                kernels::CPtr out, const float* state, int B, int T, int NH, int NKV, int hd,
                                kernels::Precision p) override {
    if (!Types("GroupedAttentionBackward", {dqkv, dout, qkv, out})) return;
    if (NKV == NH) return AttentionBackward(dqkv, scratch, dout, qkv, out, state, B, T, NH * hd, NH, p);
    if (!Keep(Grouped("GroupedAttentionBackward", qkv, B, T, NH, NKV, hd, p))) return;
    Keep(cudnn_->Backward(ctx_->stream(), dqkv, dout, qkv, out, state, B, T, NH * hd, NH, NKV));
  }
  void GeluForward(kernels::Ptr out, kernels::CPtr inp, int64_t n) override {
    if (!Types("GeluForward", {out, inp})) return;
    Keep(GANTRY_CUDA_NS::GeluForward(out, inp, n, ctx_->stream()));
  }
  void GeluBackward(kernels::Ptr dinp, kernels::CPtr inp, kernels::CPtr dout, int64_t n) override {
    if (!Types("GeluBackward", {dinp, inp, dout})) return;
    Keep(GANTRY_CUDA_NS::GeluBackward(dinp, inp, dout, n, ctx_->stream()));
  }
  void ResidualForward(float* out, const float* a, const float* b, int64_t n) override {
    Keep(GANTRY_CUDA_NS::ResidualForward(out, a, b, n, ctx_->stream()));
  }
  void ResidualBackward(float* da, float* db, const float* dout, int64_t n) override {
    Keep(GANTRY_CUDA_NS::ResidualBackward(da, db, dout, n, ctx_->stream()));
  }
  void CrossEntropyForward(float* losses, kernels::CPtr logits, const int32_t* targets, int N, int V) override {
    Keep(GANTRY_CUDA_NS::CrossEntropyForward(*ctx_, losses, logits, targets, N, V));
  }
  void CrossEntropyFusedForwardBackward(float* losses, kernels::Ptr logits, const int32_t* targets, float dloss, int N,
                                        int V) override {
    Keep(GANTRY_CUDA_NS::CrossEntropyFusedForwardBackward(*ctx_, losses, logits, targets, dloss, N, V));
  }
  void CrossEntropyShardStats(float* stats, kernels::CPtr logits, const int32_t* targets, int N, int V,
                              int v_begin) override {
    Keep(GANTRY_CUDA_NS::CrossEntropyShardStats(*ctx_, stats, logits, targets, N, V, v_begin));
  }
  void CrossEntropyShardFinish(float* losses, kernels::Ptr logits, const float* all_stats, int ranks,
                               const int32_t* targets, float dloss, int N, int V, int v_begin) override {
    Keep(GANTRY_CUDA_NS::CrossEntropyShardFinish(*ctx_, losses, logits, all_stats, ranks, targets, dloss, N, V,
                                                 v_begin));
  }
  void AdamWSpans(const kernels::AdamWSpan* spans, int count, const kernels::AdamWParams& hp) override {
    Keep(GANTRY_CUDA_NS::AdamWSpans(spans, count, hp, ctx_->stream()));
  }
  double SumSquares(const float* g, int64_t n) override {
    double* d = static_cast<double*>(static_cast<void*>(Scratch(sizeof(double) / sizeof(float))));
    if (d == nullptr) return 0.0;
    Keep(GANTRY_CUDA_NS::SumSquares(*ctx_, d, g, n));
    double host = 0.0;
    CopyToHost(&host, d, sizeof(host));
    return host;
  }
  void SumSquaresTo(double* sum_sq, const float* g, int64_t n) override {
    Keep(GANTRY_CUDA_NS::SumSquares(*ctx_, sum_sq, g, n));
  }
  void ClipMultiplier(float* multiplier, double* norm, const double* sum_sq, float max_norm,
                      float inv_scale) override {
    Keep(GANTRY_CUDA_NS::ClipMultiplier(*ctx_, multiplier, norm, sum_sq, max_norm, inv_scale));
  }
  void Scale(float* g, int64_t n, float s) override { Keep(ScaleInplace(*ctx_, g, n, s)); }
  void Convert(kernels::Ptr out, kernels::CPtr in, int64_t n) override {
    Keep(GANTRY_CUDA_NS::Convert(out, in, n, ctx_->stream()));
  }
  void RoundTo(float* out, const float* in, int64_t n, kernels::Precision p) override {
    if (p == kernels::Precision::kFp32) {
      if (out != in) Copy(out, in, static_cast<size_t>(n) * sizeof(float));
      return;
    }
    Keep(GANTRY_CUDA_NS::RoundTo(out, in, n, p == kernels::Precision::kBf16 ? 16 : 10, ctx_->stream()));
  }

 private:
  // The element types the interface allows (kernels/backend.h: kernels::CheckTypes, the cpu
  // backend's rule and words); else the error is kept.
  bool Types(const char* op, std::initializer_list<kernels::CPtr> same, std::initializer_list<kernels::CPtr> out = {}) {
    return Keep(kernels::CheckTypes(op, same, out));
  }
  // Keeps the first error; true when s is OK.
  bool Keep(absl::Status s) {
    if (s.ok()) return true;
    std::lock_guard<std::mutex> l(mu_);
    if (error_.ok()) error_ = absl::Status(s.code(), absl::StrCat(name_, ": ", s.message()));
    return false;
  }
  bool Check(cudaError_t e, const char* what) {
    if (GpuOk(e)) return true;
    // The runtime also left the error as the thread's last one: taken, so that a later
    // launch's cudaGetLastError does not report it as its own (it is kept here).
    (void)cudaGetLastError();
    return Keep(absl::InternalError(absl::StrCat(what, " failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")")));
  }
  // Whether a fused-path attention call goes to cuDNN (*take) or to the fused kernels: cuDNN
  // where it is loaded and takes the call (16-bit tensors with weights of their type, its head
  // sizes). With kCudnn a 16-bit call it cannot take is an error naming why; fp32 calls take
  // the fused kernels on every path.
  absl::Status ByCudnn(const char* op, kernels::CPtr qkv, int B, int T, int C, int NH, int NKV, kernels::Precision p,
                       bool* take) const {
    *take = false;
    if (cudnn_ == nullptr || qkv.f32()) return absl::OkStatus();
    absl::Status st = CudnnAttention::Takes(qkv, B, T, C, NH, NKV, p);
    if (st.ok()) {
      *take = true;
      return st;
    }
    if (options_.attention != kernels::AttentionPath::kCudnn) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(op, " (attention path cudnn): ", st.message()));
  }
  // Whether a cuDNN call's status is its refusal to plan the graph (UNIMPLEMENTED) and the
  // fused kernels should run instead: with the attention path auto, said once per shape; with
  // cudnn it is the call's error. Any other error is kept. False when st is OK.
  bool Refused(const absl::Status& st) {
    if (st.ok()) return false;
    if (!absl::IsUnimplemented(st) || options_.attention == kernels::AttentionPath::kCudnn) {
      Keep(st);
      return false;
    }
    ctx_->Notice(std::string(st.message()),
                 absl::StrCat(name_, ": ", st.message(), "; that attention runs on Gantry's fused kernels instead"));
    return true;
  }
  // OK where cuDNN runs a grouped call (NKV < NH); else INVALID_ARGUMENT naming why: only cuDNN's
  // SDPA takes K and V with fewer heads than Q here (the fused and reference paths read
  // repeated heads: GqaExpand, the attention op, GqaReduce).
  absl::Status Grouped(const char* op, kernels::CPtr qkv, int B, int T, int NH, int NKV, int hd,
                       kernels::Precision p) const {
    RETURN_IF_ERROR(kernels::CheckGroups(op, NH, NKV, hd));
    std::string why;
    if (!options_.grouped_attention) {
      why = "BackendOptions::grouped_attention is off";
    } else if (!fused_ || cudnn_ == nullptr) {
      why = absl::StrCat("the attention path is ", kernels::AttentionPathName(options_.attention),
                         cudnn_ == nullptr ? " without cuDNN" : "");
    } else if (absl::Status st = CudnnAttention::Takes(qkv, B, T, NH * hd, NH, NKV, p); !st.ok()) {
      why = std::string(st.message());
    } else {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", NH, " query heads over ", NKV, " key/value heads run on cuDNN's attention only, and ", why,
        "; repeat the key/value heads (GqaExpand) and call the attention op"));
  }
  // Whether a 16-bit block goes to cuDNN: where it is loaded (attention path auto or cudnn)
  // and takes the block (a 16-bit p, as many query rows as key rows, its head sizes, a graph
  // it plans). Otherwise the fp32 kernels run it: said once per shape (Notice), and with the
  // attention path cudnn an error naming why instead. fp32 blocks are no question.
  bool BlockByCudnn(const char* op, bool backward, const kernels::AttentionBlock& a) {
    const kernels::Precision p = a.values;
    if (p == kernels::Precision::kFp32 || !fused_ || cudnn_ == nullptr) return false;
    absl::Status st = a.Lq == a.Lk ? cudnn_->SupportsBlock(backward, p, a.B, a.Lq, a.NH, a.NKV, a.hd, a.causal,
                                                           BlockScale(a))
                                   : absl::InvalidArgumentError(absl::StrCat(
                                         "cuDNN's ring blocks have as many query rows as key rows, not ", a.Lq,
                                         " and ", a.Lk));
    if (st.ok()) return true;
    if (options_.attention == kernels::AttentionPath::kCudnn) {
      Keep(absl::Status(st.code(), absl::StrCat(op, " (attention path cudnn): ", st.message())));
      return false;
    }
    if (!absl::IsUnimplemented(st) && !absl::IsInvalidArgument(st)) {
      Keep(st);
      return false;
    }
    ctx_->Notice(absl::StrCat("block:", st.message()),
                 absl::StrCat(name_, ": ", st.message(), "; context parallelism's ", a.causal ? "diagonal " : "",
                              "attention block", backward ? " backward" : "",
                              " runs on Gantry's fp32 block kernels instead"));
    return false;
  }
  static float BlockScale(const kernels::AttentionBlock& a) {
    return a.scale != 0.f ? a.scale : 1.0f / std::sqrt(static_cast<float>(a.hd));
  }
  // A 16-bit block's packed copies (kernels/cuda/attention_block_16bit.h) in the backend's
  // scratch, each 16-byte aligned: q, o, dout (B, L, NH·hd) and kv (B, L, 2·NKV·hd) of a.values, stats
  // (B, NH, L) fp32; the backward's also dq and dkv. q.data null where it could not be had.
  struct BlockScratch {
    kernels::Ptr q, kv, o, dout, dq, dkv;
    float* stats = nullptr;
  };
  BlockScratch CarveBlockScratch(const kernels::AttentionBlock& a, bool backward) {
    const kernels::Precision p = a.values;
    const int64_t rows = static_cast<int64_t>(a.B) * a.Lq;
    // sizes in floats, each rounded up to 16 bytes (4 floats); 16-bit values two a float
    auto room16 = [](int64_t n) { return (n + 7) / 8 * 4; };
    const int64_t qn = room16(rows * a.NH * a.hd), kvn = room16(rows * 2 * a.NKV * a.hd);
    const int64_t sn = (static_cast<int64_t>(a.B) * a.NH * a.Lq + 3) / 4 * 4;
    const int64_t total = qn + kvn + qn + sn + (backward ? qn + qn + kvn : 0);
    BlockScratch s;
    float* base = Scratch(static_cast<size_t>(total));
    if (base == nullptr) return s;
    float* at = base;
    auto take = [&](int64_t n) {
      float* r = at;
      at += n;
      return r;
    };
    s.q = kernels::Ptr(take(qn), p);
    s.kv = kernels::Ptr(take(kvn), p);
    s.o = kernels::Ptr(take(qn), p);
    s.stats = take(sn);
    if (backward) {
      s.dout = kernels::Ptr(take(qn), p);
      s.dq = kernels::Ptr(take(qn), p);
      s.dkv = kernels::Ptr(take(kvn), p);
    }
    return s;
  }
  // The ops' working memory beyond the model's: grown when an op needs more (the first
  // step's sizes are the largest of a run, so it grows at most once or twice).
  float* Scratch(size_t floats) {
    if (floats <= scratch_floats_) return scratch_;
    WaitForAllStreams();  // the old buffer may still be in use by queued work
    if (scratch_ != nullptr) cudaFree(scratch_);
    scratch_ = nullptr;
    scratch_floats_ = 0;
    void* p = nullptr;
    if (!Check(cudaMalloc(&p, floats * sizeof(float)), "cudaMalloc (scratch)")) return nullptr;
    scratch_ = static_cast<float*>(p);
    scratch_floats_ = floats;
    return scratch_;
  }

  static cudaStream_t Native(Stream s) { return reinterpret_cast<cudaStream_t>(s); }
  // e if it is a live event of this backend; else null, with the error kept.
  cudaEvent_t Live(Event e, const char* what) {
    auto ev = reinterpret_cast<cudaEvent_t>(e);
    if (std::find(events_.begin(), events_.end(), ev) != events_.end()) return ev;
    Keep(absl::InvalidArgumentError(absl::StrCat(what, ": not a live event of this backend")));
    return nullptr;
  }
  void WaitForAllStreams() {
    Keep(ctx_->Synchronize());
    for (cudaStream_t s : streams_) Check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }

  std::unique_ptr<Context> ctx_;
  std::vector<cudaStream_t> streams_;  // made by NewStream, live
  std::vector<cudaEvent_t> events_;    // made by NewEvent, live
  const std::string name_;
  const kernels::BackendOptions options_;
  const bool fused_;
  // cuDNN's attention (kAuto where it loaded, kCudnn); null: the fused kernels.
  const std::unique_ptr<CudnnAttention> cudnn_;
  float* scratch_ = nullptr;
  size_t scratch_floats_ = 0;
  std::mutex mu_;
  absl::Status error_;
};

}  // namespace

int DeviceCount() {
  int count = 0;
  if (!GpuOk(cudaGetDeviceCount(&count))) {  // a probe: no device is an answer, not an error
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

absl::StatusOr<std::unique_ptr<kernels::Backend>> NewBackend(int device, const kernels::BackendOptions& options) {
  int count = 0;
  if (!GpuOk(cudaGetDeviceCount(&count)) || device < 0 || device >= count) {
    return absl::UnavailableError(absl::StrCat(kernels::BackendKindName(kKind), ":", device, ": ", count,
                                               " device(s) visible"));
  }
  auto ctx = Context::Create(device);
  if (!ctx.ok()) return ctx.status();
  (*ctx)->set_bias_epilogue(options.bias_epilogue);
  (*ctx)->set_gelu_epilogue(options.gelu_epilogue);
  (*ctx)->set_gemm_autotune(options.gemm_autotune);
  cudaDeviceProp prop{};
  GPU_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  std::string name = absl::StrCat(kernels::BackendKindName(kKind), ":", device);
#if !defined(GANTRY_CUDA_EMULATED)
  absl::StrAppend(&name, " (", prop.name, ")");
#endif
  // cuDNN's attention: required with kCudnn; with kAuto where it loads (a process that
  // cannot load it says so once, on stderr, and runs the fused kernels).
  std::unique_ptr<CudnnAttention> cudnn;
  if (options.attention == kernels::AttentionPath::kAuto || options.attention == kernels::AttentionPath::kCudnn) {
    auto made = CudnnAttention::Create(options.deterministic_attention);
    if (made.ok()) {
      cudnn = std::move(*made);
    } else if (options.attention == kernels::AttentionPath::kCudnn) {
      return made.status();
    } else {
      static std::once_flag said;
      std::call_once(said, [&] {
        std::fprintf(stderr, "%s: %s; 16-bit attention runs on the fused kernels\n", name.c_str(),
                     std::string(made.status().message()).c_str());
      });
    }
  }
  return std::unique_ptr<kernels::Backend>(new Cuda(std::move(*ctx), std::move(name), options, std::move(cudnn)));
}

}  // namespace gantry::GANTRY_CUDA_NS
