// The cpu backend: host memory and kernels/cpu, run at once on the calling thread (the
// kernels themselves use OpenMP and OpenBLAS threads). Nothing here can fail but an
// allocation.
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/cast.h"
#include "kernels/backend.h"
#include "kernels/crossentropy.h"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/grad_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/gqa.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "kernels/moe.h"
#include "kernels/residual.h"

namespace gantry::kernels {
namespace {

class Cpu final : public Backend {
 public:
  BackendKind kind() const override { return BackendKind::kCpu; }
  std::string Describe() const override { return "cpu"; }

  // As common/buffer.h's FloatBuffer: 64-byte aligned, and large buffers on transparent
  // huge pages (the activations and parameters: fewer TLB misses in the GEMMs).
  void* Allocate(size_t bytes) override {
    constexpr size_t kHugePage = size_t{2} << 20;
    const size_t align = bytes >= kHugePage ? kHugePage : 64;
    const size_t rounded = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
    void* p = nullptr;
    if (posix_memalign(&p, align, rounded) != 0) {
      Keep(absl::ResourceExhaustedError(absl::StrCat("cpu: cannot allocate ", bytes, " bytes")));
      return nullptr;
    }
    if (align == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);  // advisory: failure is harmless
    return p;
  }
  void Free(void* p) override { std::free(p); }
  void CopyToDevice(void* dst, const void* host, size_t bytes) override { Copy(dst, host, bytes); }
  void CopyToHost(void* host, const void* src, size_t bytes) override { Copy(host, src, bytes); }
  void Copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
  }
  void Zero(void* p, size_t bytes) override {
    if (bytes > 0) std::memset(p, 0, bytes);
  }
  void CopyRows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t width,
                int64_t rows) override {
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(dst + r * dst_stride, src + r * src_stride, static_cast<size_t>(width) * sizeof(float));
    }
  }
  absl::Status Synchronize() override {
    std::lock_guard<std::mutex> l(mu_);
    return std::exchange(error_, absl::OkStatus());
  }
  // Host memory, the attention's probabilities kept, grouped heads repeated by the model (the
  // cpu still runs grouped calls, repeating into host memory: the reference of the others).
  bool Supports(Capability c, const AttentionShape&) const override { return c == Capability::kHostAddressable; }
  absl::StatusOr<std::unique_ptr<Backend>> NewPeer() const override { return std::unique_ptr<Backend>(new Cpu()); }
  absl::Status BindThread() override { return absl::OkStatus(); }
  // Everything runs at issue: a stream or event is only a handle, checked where it is used.
  Stream NewStream() override { return reinterpret_cast<Stream>(NewHandle(streams_)); }
  void FreeStream(Stream s) override {
    if (Current() == s) Current() = nullptr;
    FreeHandle(streams_, s, "FreeStream");
  }
  Event NewEvent() override { return reinterpret_cast<Event>(NewHandle(events_)); }
  void FreeEvent(Event e) override { FreeHandle(events_, e, "FreeEvent"); }
  void SetStream(Stream s) override {
    if (s == nullptr || Known(streams_, s, "SetStream")) Current() = s;
  }
  Stream current_stream() const override { return Current(); }
  void Record(Event e) override { (void)Known(events_, e, "Record"); }
  void Wait(Event e) override { (void)Known(events_, e, "Wait"); }
  absl::Status SynchronizeEvent(Event e) override {
    if (Known(events_, e, "SynchronizeEvent")) return absl::OkStatus();
    return Synchronize();  // the error Known kept
  }
  void* native_stream(Stream) const override { return nullptr; }

  void EncoderForward(float* out, const int32_t* inp, const float* wte, int v_begin, int v_end, const float* wpe,
                      int B, int T, int C) override {
    encoder_forward_shard(out, inp, wte, v_begin, v_end, wpe, B, T, C);
  }
  void EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int v_begin, int v_end, int B,
                       int T, int C) override {
    encoder_backward_shard(dwte, dwpe, dout, inp, v_begin, v_end, B, T, C);
  }
  void LayerNormForward(Ptr out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                        int N, int C) override {
    layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void ResidualLayerNormForward(float* residual, Ptr out, float* mean, float* rstd, const float* a, const float* b,
                                const float* weight, const float* bias, int N, int C) override {
    residual_layernorm_forward(residual, out, mean, rstd, a, b, weight, bias, N, C);
  }
  void LayerNormBackward(float* dinp, float* dweight, float* dbias, CPtr dout, const float* inp,
                         const float* weight, const float* mean, const float* rstd, int N, int C,
                         Ptr dinp16) override {
    layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, dinp16);
  }
  void RMSNormForward(Ptr out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) override {
    rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
  }
  void ResidualRMSNormForward(float* residual, Ptr out, float* rstd, const float* a, const float* b,
                              const float* weight, int N, int C, float eps) override {
    residual_rmsnorm_forward(residual, out, rstd, a, b, weight, N, C, eps);
  }
  void RMSNormBackward(float* dinp, float* dweight, CPtr dout, const float* inp, const float* weight,
                       const float* rstd, int N, int C, Ptr dinp16) override {
    rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, dinp16);
  }
  void RopeApply(Ptr qkv, int B, int T, int NH, int NKV, int hd, const float* inv_freq, bool inverse) override {
    rope_apply(qkv, B, T, NH, NKV, hd, inv_freq, inverse);
  }
  void RopeApplyAt(Ptr qkv, int B, int L, const int32_t* positions, int NH, int NKV, int hd, const float* inv_freq,
                   bool inverse) override {
    rope_apply_at(qkv, B, L, positions, NH, NKV, hd, inv_freq, inverse);
  }
  void AttentionBlockForward(HeadRows<float> out, RowStats<float> lse, HeadRows<const float> q,
                             HeadRows<const float> k, HeadRows<const float> v, const AttentionBlock& a) override {
    attention_block_forward(out, lse, q, k, v, a);
  }
  void AttentionBlockDelta(RowStats<float> D, HeadRows<const float> dout, HeadRows<const float> out, int B, int NH,
                           int hd, int L) override {
    attention_block_delta(D, dout, out, B, NH, hd, L);
  }
  void AttentionBlockBackward(HeadRows<float> dq, HeadRows<float> dk, HeadRows<float> dv, HeadRows<const float> q,
                              HeadRows<const float> k, HeadRows<const float> v, HeadRows<const float> dout,
                              HeadRows<const float> /*out: D holds what it gives*/, RowStats<const float> lse,
                              RowStats<const float> D, const AttentionBlock& a) override {
    attention_block_backward(dq, dk, dv, q, k, v, dout, lse, D, a);  // fp32 whatever a.values says
  }
  void SwigluForward(Ptr h, CPtr gu, int N, int F) override {
    if (Types("SwigluForward", {h, gu})) swiglu_forward(h, gu, N, F);
  }
  void SwigluBackward(Ptr dgu, CPtr dh, CPtr gu, int N, int F) override {
    if (Types("SwigluBackward", {dgu, dh, gu})) swiglu_backward(dgu, dh, gu, N, F);
  }
  void GqaExpand(Ptr out, CPtr qkv, int64_t rows, int NH, int NKV, int hd) override {
    if (!Types("GqaExpand", {out, qkv})) return;
    if (absl::Status s = CheckGroups("GqaExpand", NH, NKV, hd); !s.ok()) return Keep(std::move(s));
    gqa_expand(out, qkv, rows, NH, NKV, hd);
  }
  void GqaReduce(Ptr dqkv, CPtr dqkv3, int64_t rows, int NH, int NKV, int hd) override {
    if (!Types("GqaReduce", {dqkv, dqkv3})) return;
    if (absl::Status s = CheckGroups("GqaReduce", NH, NKV, hd); !s.ok()) return Keep(std::move(s));
    gqa_reduce(dqkv, dqkv3, rows, NH, NKV, hd);
  }
  void MoeRoute(float* probs, float* lse, int32_t* choice, float* weight, int32_t* slot, int32_t* counts, float* stats,
                const float* logits, int N, int E, int k, int capacity) override {
    if (k < 1 || k > E || capacity < 1) {
      return Keep(absl::InvalidArgumentError(absl::StrCat("MoeRoute: top ", k, " of ", E, " experts, capacity ", capacity)));
    }
    moe_route(probs, lse, choice, weight, slot, counts, stats, logits, N, E, k, capacity);
  }
  void MoeDispatch(float* X, const float* x, const int32_t* slot, int N, int k, int C) override {
    moe_dispatch(X, x, slot, N, k, C);
  }
  void MoeCombine(float* y, const float* Y, const int32_t* slot, const float* weight, int N, int k, int C) override {
    moe_combine(y, Y, slot, weight, N, k, C);
  }
  void MoeCombineBackward(float* dY, float* dweight, const float* dy, const float* Y, const int32_t* slot,
                          const float* weight, int N, int k, int C) override {
    moe_combine_backward(dY, dweight, dy, Y, slot, weight, N, k, C);
  }
  void MoeDispatchBackward(float* dx, const float* dX, const int32_t* slot, int N, int k, int C) override {
    moe_dispatch_backward(dx, dX, slot, N, k, C);
  }
  void MoeRouterBackward(float* dlogits, const float* dweight, const float* probs, const float* lse,
                         const int32_t* choice, const float* weight, const int32_t* counts, int N, int E, int k,
                         float aux_scale, float z_scale) override {
    moe_router_backward(dlogits, dweight, probs, lse, choice, weight, counts, N, E, k, aux_scale, z_scale);
  }
  void MatmulForward(Ptr out, CPtr inp, CPtr weight, CPtr bias, int N, int C, int OC,
                     WeightLayout layout) override {
    if (!Types("MatmulForward", {inp, weight, bias}, {out})) return;
    matmul_forward(out, inp, weight, bias, N, C, OC, layout);
  }
  void MatmulBiasGeluForward(Ptr pre, Ptr out, CPtr inp, CPtr weight, CPtr bias, int N, int C, int OC) override {
    if (!Types("MatmulBiasGeluForward", {pre, out, inp, weight, bias})) return;
    matmul_bias_gelu_forward(pre, out, inp, weight, bias, N, C, OC);
  }
  void MatmulBackward(Ptr dinp, float* dweight, float* dbias, CPtr dout, CPtr inp, CPtr weight, int N, int C, int OC,
                      WeightLayout layout, CPtr gelu_pre, float* gelu_dbias) override {
    if (!Types("MatmulBackward", {dout, inp, weight, gelu_pre}, {dinp})) return;
    if (gelu_dbias != nullptr && (!dinp || !gelu_pre)) {
      Keep(absl::InvalidArgumentError("MatmulBackward: gelu_dbias needs dinp and gelu_pre"));
      return;
    }
    matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, layout, gelu_pre, gelu_dbias);
  }
  void AttentionForward(Ptr out, float* state, CPtr qkv, int B, int T, int C, int NH, Precision p) override {
    if (!Types("AttentionForward", {out, qkv})) return;
    attention_forward(out, state, qkv, B, T, C, NH, p);
  }
  void AttentionBackward(Ptr dqkv, float* scratch, CPtr dout, CPtr qkv, CPtr out, const float* state, int B, int T,
                         int C, int NH, Precision) override {
    if (!Types("AttentionBackward", {dqkv, dout, qkv, out})) return;
    attention_backward(dqkv, scratch, dout, qkv, state, B, T, C, NH);
  }
  // The model's sequence on the cpu (it takes the repeated heads: no kGroupedAttention), the
  // repeated rows and their gradient in host memory.
  void GroupedAttentionForward(Ptr out, float* state, CPtr qkv, int B, int T, int NH, int NKV, int hd,
                               Precision p) override {
    if (!Types("GroupedAttentionForward", {out, qkv})) return;
    if (absl::Status s = CheckGroups("GroupedAttentionForward", NH, NKV, hd); !s.ok()) return Keep(std::move(s));
    const int64_t rows = int64_t{B} * T;
    std::vector<float> qkv3(static_cast<size_t>(rows) * 3 * NH * hd);  // room for either type
    gqa_expand(Ptr(qkv3.data(), qkv.type), qkv, rows, NH, NKV, hd);
    attention_forward(out, state, CPtr(qkv3.data(), qkv.type), B, T, NH * hd, NH, p);
  }
  void GroupedAttentionBackward(Ptr dqkv, float* scratch, CPtr dout, CPtr qkv, CPtr out, const float* state, int B,
                                int T, int NH, int NKV, int hd, Precision) override {
    if (!Types("GroupedAttentionBackward", {dqkv, dout, qkv, out})) return;
    if (absl::Status s = CheckGroups("GroupedAttentionBackward", NH, NKV, hd); !s.ok()) return Keep(std::move(s));
    const int64_t rows = int64_t{B} * T;
    const size_t n3 = static_cast<size_t>(rows) * 3 * NH * hd;
    std::vector<float> qkv3(n3), dqkv3(n3);
    gqa_expand(Ptr(qkv3.data(), qkv.type), qkv, rows, NH, NKV, hd);
    attention_backward(Ptr(dqkv3.data(), dqkv.type), scratch, dout, CPtr(qkv3.data(), qkv.type), state, B, T, NH * hd,
                       NH);
    gqa_reduce(dqkv, CPtr(dqkv3.data(), dqkv.type), rows, NH, NKV, hd);
  }
  void GeluForward(Ptr out, CPtr inp, int64_t n) override {
    if (Types("GeluForward", {out, inp})) gelu_forward(out, inp, n);
  }
  void GeluBackward(Ptr dinp, CPtr inp, CPtr dout, int64_t n) override {
    if (Types("GeluBackward", {dinp, inp, dout})) gelu_backward(dinp, inp, dout, n);
  }
  void ResidualForward(float* out, const float* a, const float* b, int64_t n) override {
    residual_forward(out, a, b, n);
  }
  void ResidualBackward(float* da, float* db, const float* dout, int64_t n) override {
    residual_backward(da, db, dout, n);
  }
  void CrossEntropyForward(float* losses, CPtr logits, const int32_t* targets, int N, int V) override {
    crossentropy_forward(losses, logits, targets, N, V);
  }
  void CrossEntropyFusedForwardBackward(float* losses, Ptr logits, const int32_t* targets, float dloss, int N,
                                        int V) override {
    crossentropy_fused_forward_backward(losses, logits, targets, dloss, N, V);
  }
  void CrossEntropyShardStats(float* stats, CPtr logits, const int32_t* targets, int N, int V, int v_begin) override {
    crossentropy_shard_stats(stats, logits, targets, N, V, v_begin);
  }
  void CrossEntropyShardFinish(float* losses, Ptr logits, const float* all_stats, int ranks, const int32_t* targets,
                               float dloss, int N, int V, int v_begin) override {
    crossentropy_shard_finish(losses, logits, all_stats, ranks, targets, dloss, N, V, v_begin);
  }
  void AdamWSpans(const AdamWSpan* spans, int count, const AdamWParams& hp) override {
    for (int i = 0; i < count; ++i) {
      const AdamWSpan& s = spans[i];
      AdamWParams own = hp;
      own.weight_decay = s.weight_decay;
      adamw_update(s.params, s.grads, s.m, s.v, s.n, own);
      if (s.working) convert(s.working, s.params, s.n);
    }
  }
  double SumSquares(const float* g, int64_t n) override { return sum_squares(g, n); }
  void SumSquaresTo(double* sum_sq, const float* g, int64_t n) override { *sum_sq = sum_squares(g, n); }
  void ClipMultiplier(float* multiplier, double* norm, const double* sum_sq, float max_norm,
                      float inv_scale) override {
    *multiplier = clip_multiplier(*sum_sq, max_norm, inv_scale, norm);
  }
  void Scale(float* g, int64_t n, float s) override { scale_inplace(g, n, s); }
  void Convert(Ptr out, CPtr in, int64_t n) override { convert(out, in, n); }
  void RoundTo(float* out, const float* in, int64_t n, Precision p) override { round_to(out, in, n, p); }

 private:
  // The element types the interface allows (kernels/backend.h): the tensors given (non-null)
  // of one type, or a GEMM's inputs all fp32 or all of one 16-bit type. Else the error is kept.
  bool Types(const char* op, std::initializer_list<CPtr> same, std::initializer_list<CPtr> out = {}) {
    absl::Status s = CheckTypes(op, same, out);
    if (s.ok()) return true;
    Keep(std::move(s));
    return false;
  }
  void Keep(absl::Status s) {
    std::lock_guard<std::mutex> l(mu_);
    if (error_.ok()) error_ = std::move(s);
  }
  // The handles: ids from a counter, never dereferenced, known until freed (mu_).
  using Handles = std::set<uintptr_t>;
  void* NewHandle(Handles& hs) {
    std::lock_guard<std::mutex> l(mu_);
    hs.insert(++last_handle_);
    return reinterpret_cast<void*>(last_handle_);
  }
  // Whether h is live in hs; freed from it with `erase`. Else the error, naming the call.
  bool Known(Handles& hs, const void* h, const char* what, bool erase = false) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (auto it = hs.find(reinterpret_cast<uintptr_t>(h)); it != hs.end()) {
        if (erase) hs.erase(it);
        return true;
      }
    }
    Keep(absl::InvalidArgumentError(
        absl::StrCat("cpu: ", what, ": not a live ", &hs == &streams_ ? "stream" : "event", " of this backend")));
    return false;
  }
  void FreeHandle(Handles& hs, const void* h, const char* what) { (void)Known(hs, h, what, /*erase=*/true); }
  // The current stream is the calling thread's: one cpu backend serves every thread.
  static Stream& Current() {
    static thread_local Stream current = nullptr;
    return current;
  }
  std::mutex mu_;  // one cpu backend serves every thread (ranks in one process)
  absl::Status error_;
  Handles streams_, events_;
  uintptr_t last_handle_ = 0;
};

}  // namespace

Backend& CpuBackend() {
  static Cpu* cpu = new Cpu();
  return *cpu;
}

}  // namespace gantry::kernels
