// Where a model's tensors live and its ops run: one interface, three backends.
//   cpu            host memory, kernels/cpu (OpenBLAS, OpenMP).
//   cuda           device memory, kernels/cuda and cuBLAS(Lt), on a CUDA stream.
//   cuda-emulated  kernels/cuda's own launchers and device code compiled for the CPU
//                  emulator, over the emulated runtime and cuBLAS (kernels/emulated): the
//                  GPU's code path, run in CI without a GPU. Its "device" memory is host
//                  memory that the emulated runtime records.
// The model (model/gpt.h) is written once over this interface.
//
// Pointers passed to ops and copies are the backend's device pointers (from Allocate),
// except the `host` side of CopyToDevice/CopyToHost. Ops run in order, asynchronously on an
// accelerator; the first error is kept (as CUDA keeps a sticky error) and returned by
// Synchronize, which also waits for the work queued. Shapes follow kernels/*.h: row-major
// (rows, columns), B batch, T tokens, C channels, NH heads, V vocabulary rows.
//
// Element types (kernels/types.h). The ops' tensors are fp32 unless an argument is a typed
// pointer (Ptr, CPtr), which may also be a 16-bit tensor (bf16 or fp16) of a mixed-precision
// model. An op reads 16-bit values exactly, computes in fp32 (sums, softmax, statistics) and
// rounds what it writes into a 16-bit tensor to nearest, ties to even: the bits of the fp32 op
// on the same values followed by RoundTo, up to the order of fp32 sums. The 16-bit tensors of
// one call share one type, and a GEMM's inputs (inp, weight, bias; dout, inp, weight) are all
// fp32 or all 16-bit; a call that breaks this is an INVALID_ARGUMENT kept as the op's error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/attention_block.h"
#include "kernels/types.h"

namespace gantry::kernels {

enum class BackendKind { kCpu, kCuda, kCudaEmulated };
// "cpu", "cuda" or "cuda-emulated" (INVALID_ARGUMENT naming the others otherwise).
absl::StatusOr<BackendKind> ParseBackendKind(absl::string_view name);
inline const char* BackendKindName(BackendKind kind) {
  switch (kind) {
    case BackendKind::kCpu: return "cpu";
    case BackendKind::kCuda: return "cuda";
    case BackendKind::kCudaEmulated: return "cuda-emulated";
  }
  return "?";
}

// What a backend does beyond the ops that every backend runs, asked in one place
// (Backend::Supports, as ggml's supports_op): callers branch on the answer, never on the
// backend's kind, and a new difference between backends is a new enumerator here rather than
// a new virtual.
enum class Capability {
  // Host code may read and write device pointers directly (cpu only). cuda-emulated says no,
  // as cuda does, although its memory is the host's: code that runs on it takes the GPU's
  // paths (copies through CopyToHost/CopyToDevice), so CI runs them. Communicators take
  // device pointers on every backend (Gloo reaches cuda-emulated's memory as NCCL reaches a
  // GPU's).
  kHostAddressable,
  // AllocateHost's memory is page-locked (cuda's cudaHostAlloc).
  kPinnedHost,
  // What attention's forward keeps for its backward (`state`) is each query row's log-sum-exp
  // of its scaled scores (B,NH,T) (the fused kernels and cuDNN), not the (B,NH,T,T)
  // probabilities (the cpu's and the unfused kernels').
  kFusedAttention,
  // A grouped-query attention call of the given shape (AttentionShape) runs without repeating
  // the key/value heads, so that the model need not hold the repeated copy (a cuda backend's
  // cuDNN path, whose SDPA takes K and V with their own head count); see
  // GroupedAttentionForward.
  kGroupedAttention,
};
const char* CapabilityName(Capability c);
// The call a shape-dependent capability (kGroupedAttention) is asked for; the others ignore it.
struct AttentionShape {
  int B = 0;
  int T = 0;
  int NH = 0;
  int NKV = 0;
  int hd = 0;
  Precision p = Precision::kFp32;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  // Whether this backend has capability c (for kGroupedAttention: for a call of `shape`).
  virtual bool Supports(Capability c, const AttentionShape& shape = {}) const = 0;
  // "cpu", "cuda:0 (NVIDIA H100 80GB HBM3)", "cuda-emulated:1".
  virtual std::string Describe() const = 0;
  // Where a device library refused a call and the backend took another path (cuDNN without a
  // plan for an attention graph, cuBLASLt without an algorithm for an epilogue), a line saying
  // so: each said once (also on stderr when it happens), returned once, oldest first. The
  // trainer puts them in its step report. None on cpu.
  virtual std::vector<std::string> TakeNotices() { return {}; }

  // --- memory ---
  // bytes of device memory (64-byte aligned at least), or null with the error kept.
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* p) = 0;
  virtual void CopyToDevice(void* dst, const void* host, size_t bytes) = 0;
  virtual void CopyToHost(void* host, const void* src, size_t bytes) = 0;
  virtual void Copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void Zero(void* p, size_t bytes) = 0;
  // rows rows of width floats from src, rows src_stride floats apart, to dst, dst_stride apart
  // (cudaMemcpy2D's strided copy): e.g. the key/value columns of q|k|v rows packed into a block
  // of their own (context parallelism's ring) and back. The two must not overlap.
  virtual void CopyRows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t width,
                        int64_t rows) = 0;
  // Host memory for the host side of copies: on cuda page-locked (cudaHostAlloc), so that a
  // copy to or from it runs at the link's full speed and asynchronously, overlapping the
  // host's work; elsewhere plain 64-byte aligned host memory. Null with the error kept.
  virtual void* AllocateHost(size_t bytes);
  virtual void FreeHost(void* p);
  // (Page-locked where the backend Supports(Capability::kPinnedHost).)
  // As CopyToDevice / CopyToHost, issued on the current stream, but returning before the copy
  // is done where the backend can (cuda, with AllocateHost's memory on the host side): the
  // host memory must then stay unchanged (to the device) or unread (to the host) until the
  // stream reaches this point (an event recorded after it, SynchronizeEvent, or Synchronize).
  virtual void CopyToDeviceAsync(void* dst, const void* host, size_t bytes) { CopyToDevice(dst, host, bytes); }
  virtual void CopyToHostAsync(void* host, const void* src, size_t bytes) { CopyToHost(host, src, bytes); }

  // --- ordering ---
  // Waits for the work queued on every stream; returns the first error since the last call
  // (and clears it).
  virtual absl::Status Synchronize() = 0;
  // Streams and events. Copies, zeroing and ops are issued on the current stream (the
  // backend's own until SetStream) and run in issue order there; work on two streams may
  // overlap unless an event orders it. The cpu backend runs everything at issue, in order,
  // so its streams and events order trivially (its handles are still checked). Ops that use
  // the backend's scratch (the reductions: column sums, SumSquares; RoPE's table) must not run on two
  // streams at once. Handles are freed with the backend, or by Free*.
  struct StreamHandle;
  struct EventHandle;
  using Stream = StreamHandle*;
  using Event = EventHandle*;
  virtual Stream NewStream() = 0;
  virtual void FreeStream(Stream s) = 0;
  virtual Event NewEvent() = 0;
  virtual void FreeEvent(Event e) = 0;
  // Where the following work is issued; null: the backend's own stream.
  virtual void SetStream(Stream s) = 0;
  virtual Stream current_stream() const = 0;
  // Marks the point the current stream has reached.
  virtual void Record(Event e) = 0;
  // The current stream's later work waits until e's point is reached.
  virtual void Wait(Event e) = 0;
  // The host waits until e's point is reached.
  virtual absl::Status SynchronizeEvent(Event e) = 0;
  // The runtime's own stream (cudaStream_t) behind s (null: the backend's), for a
  // communicator that enqueues on it (NCCL); null on cpu.
  virtual void* native_stream(Stream s) const = 0;
  // Another backend on the same device, for a second host thread (each backend is driven by
  // one thread at a time): its own stream, handles and scratch; memory that either
  // allocates is valid on both. Work on the two is ordered by the host (Synchronize).
  virtual absl::StatusOr<std::unique_ptr<Backend>> NewPeer() const = 0;
  // Binds the calling thread to this backend's device (cuda: cudaSetDevice). A thread that
  // drives a backend it did not create calls it first.
  virtual absl::Status BindThread() = 0;

  // --- the model's ops ---
  // inp (B,T) token ids; wte rows [v_begin, v_end) of the vocabulary at wte (those of other
  // ranks embed nothing: vocabulary-parallel), wpe (maxT,C) or null (added by another rank)
  // → out (B,T,C).
  virtual void EncoderForward(float* out, const int32_t* inp, const float* wte, int v_begin, int v_end,
                              const float* wpe, int B, int T, int C) = 0;
  // dout (B,T,C) → dwte rows [v_begin, v_end) +=, dwpe (T,C) += (null: skipped).
  virtual void EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int v_begin,
                               int v_end, int B, int T, int C) = 0;
  // inp (N,C) → out (N,C) (fp32 or 16-bit), mean (N), rstd (N).
  virtual void LayerNormForward(Ptr out, float* mean, float* rstd, const float* inp, const float* weight,
                                const float* bias, int N, int C) = 0;
  // The residual add fused with the LayerNorm after it, one pass over the rows: a (N,C) + b
  // (N,C) → residual (N,C), then out, mean, rstd as LayerNormForward of residual, the same bits
  // as ResidualForward then LayerNormForward (residual may be a or b).
  virtual void ResidualLayerNormForward(float* residual, Ptr out, float* mean, float* rstd, const float* a,
                                        const float* b, const float* weight, const float* bias, int N, int C) = 0;
  // dout (N,C), fp32 or 16-bit → dinp (N,C) +=, dweight (C) +=, dbias (C) +=; where dinp16 is
  // given (16-bit), also dinp16 = dinp's new values rounded (the residual gradient's copy for
  // the GEMMs, as Convert would make it). A 16-bit dout gives its values' result in fp32 (on the
  // cpu the same bits; the cuda kinds' kernel for it may fuse a multiply-add otherwise). The cuda
  // kinds take dinp16 with a 16-bit dout of its type only: another pairing is an error naming both.
  virtual void LayerNormBackward(float* dinp, float* dweight, float* dbias, CPtr dout, const float* inp,
                                 const float* weight, const float* mean, const float* rstd, int N, int C,
                                 Ptr dinp16 = nullptr) = 0;
  // Llama-family blocks (kernels/rmsnorm.h, rope.h, swiglu.h and gqa.h state each op):
  // RMSNorm: inp (N,C) → out (N,C) (fp32 or 16-bit), rstd (N).
  virtual void RMSNormForward(Ptr out, float* rstd, const float* inp, const float* weight, int N, int C,
                              float eps) = 0;
  // The residual add fused with it, as ResidualLayerNormForward: residual (N,C) = a + b, then
  // RMSNormForward of residual, the same bits as the two ops.
  virtual void ResidualRMSNormForward(float* residual, Ptr out, float* rstd, const float* a, const float* b,
                                      const float* weight, int N, int C, float eps) = 0;
  // → dinp (N,C) +=, dweight (C) +=; dout and dinp16 as LayerNormBackward's.
  virtual void RMSNormBackward(float* dinp, float* dweight, CPtr dout, const float* inp,
                               const float* weight, const float* rstd, int N, int C, Ptr dinp16 = nullptr) = 0;
  // RoPE in place on qkv rows (B*T of (NH + 2 NKV) * hd; inv_freq (hd/2) on this backend), the
  // query and key heads rotated (inverse: the backward's transposed rotation).
  virtual void RopeApply(Ptr qkv, int B, int T, int NH, int NKV, int hd, const float* inv_freq, bool inverse) = 0;
  // The same at given positions (kernels/rope.h rope_apply_at): row r of each of B sequences of
  // L rows rotated at position positions[r] (L int32 on this backend), as context parallelism's
  // rows are; positions[r] = r gives RopeApply's bits.
  virtual void RopeApplyAt(Ptr qkv, int B, int L, const int32_t* positions, int NH, int NKV, int hd,
                           const float* inv_freq, bool inverse) = 0;
  // SwiGLU's gate: gu (N, 2F) = [g | u] → h (N,F) = silu(g) * u; backward: dh → dgu (N, 2F).
  virtual void SwigluForward(Ptr h, CPtr gu, int N, int F) = 0;
  virtual void SwigluBackward(Ptr dgu, CPtr dh, CPtr gu, int N, int F) = 0;
  // Grouped-query attention's repeat_kv: qkv rows ((NH + 2 NKV) hd) → (3 NH hd), and the
  // gradient back (the key/value heads' summed over the query heads that read them).
  virtual void GqaExpand(Ptr out, CPtr qkv, int64_t rows, int NH, int NKV, int hd) = 0;
  virtual void GqaReduce(Ptr dqkv, CPtr dqkv3, int64_t rows, int NH, int NKV, int hd) = 0;
  // Mixture-of-experts MLPs (kernels/moe.h states each op; fp32): the router's choice and
  // capacity, the dispatch of rows to the experts and the weighted combine, and their
  // backward. counts and stats as kernels/moe.h lays them out.
  virtual void MoeRoute(float* probs, float* lse, int32_t* choice, float* weight, int32_t* slot, int32_t* counts,
                        float* stats, const float* logits, int N, int E, int k, int capacity) = 0;
  virtual void MoeDispatch(float* X, const float* x, const int32_t* slot, int N, int k, int C) = 0;
  virtual void MoeCombine(float* y, const float* Y, const int32_t* slot, const float* weight, int N, int k, int C) = 0;
  virtual void MoeCombineBackward(float* dY, float* dweight, const float* dy, const float* Y, const int32_t* slot,
                                  const float* weight, int N, int k, int C) = 0;
  virtual void MoeDispatchBackward(float* dx, const float* dX, const int32_t* slot, int N, int k, int C) = 0;
  virtual void MoeRouterBackward(float* dlogits, const float* dweight, const float* probs, const float* lse,
                                 const int32_t* choice, const float* weight, const int32_t* counts, int N, int E,
                                 int k, float aux_scale, float z_scale) = 0;
  // inp (N,C), weight (C,OC) kInOut or (OC,C) kOutIn, bias (OC) or null → out (N,OC).
  // 16-bit inputs: each product is exact in fp32 and sums are fp32 (a 16-bit GEMM with fp32
  // accumulation: cuBLAS's CUBLAS_COMPUTE_32F, the CPU's bf16 dot-product instructions); out
  // may be fp32 (no rounding) or 16-bit. (A cuda backend with BackendOptions::bias_epilogue
  // rounds a 16-bit out with a bias twice: the product, then the sum.)
  virtual void MatmulForward(Ptr out, CPtr inp, CPtr weight, CPtr bias, int N, int C, int OC,
                             WeightLayout layout = WeightLayout::kInOut) = 0;
  // → pre (N,OC) = inp @ W + bias, out = gelu(pre). 16-bit: pre rounded, then gelu of the
  // rounded pre rounded (autocast's two roundings); all five tensors of one type.
  virtual void MatmulBiasGeluForward(Ptr pre, Ptr out, CPtr inp, CPtr weight, CPtr bias, int N, int C, int OC) = 0;
  // dout (N,OC) → dinp (N,C) overwritten (null: skipped; times gelu'(gelu_pre) when given),
  // dweight (fp32) +=, dbias (OC, fp32) += (null: skipped). 16-bit: dinp may be fp32 (the
  // fp32 sums) or 16-bit (rounded; with gelu_pre, rounded before and after the product with
  // gelu'(gelu_pre), as autocast rounds the GEMM's output and then GELU's gradient); this
  // call's weight and bias gradients are 16-bit tensors (autocast's): each rounded to the type
  // before it is added to the fp32 dweight and dbias. gelu_dbias (C, fp32; needs dinp and
  // gelu_pre; null: skipped): the bias gradient of the layer whose output was gelu_pre, +=
  // dinp's column sums as dbias takes dout's (16-bit dinp: the fp32 sums of its values, each
  // rounded to the type before it is added), so that the layer's own backward need not sum them.
  virtual void MatmulBackward(Ptr dinp, float* dweight, float* dbias, CPtr dout, CPtr inp, CPtr weight, int N, int C,
                              int OC, WeightLayout layout = WeightLayout::kInOut, CPtr gelu_pre = nullptr,
                              float* gelu_dbias = nullptr) = 0;
  // Causal self-attention. What forward keeps for backward (`state`) is the (B,NH,T,T)
  // probabilities, or where the backend Supports(Capability::kFusedAttention) (the fused
  // kernels and cuDNN) each query row's log-sum-exp of its scaled scores (B,NH,T).
  // qkv (B,T,3C) → out (B,T,C), state. p (mixed precision): the softmax's weights exp(s - max)
  // rounded to p's type before they weigh V, their sum unrounded (16-bit flash attention's
  // roundings, PyTorch's SDPA's); kFp32: none.
  // qkv and out both fp32 or both 16-bit.
  virtual void AttentionForward(Ptr out, float* state, CPtr qkv, int B, int T, int C, int NH,
                                Precision p = Precision::kFp32) = 0;
  // dout (B,T,C), qkv, out, state → dqkv (B,T,3C) overwritten. scratch: (B,NH,T,T) floats
  // of working memory (the backends that need more keep their own). dqkv, dout, qkv and out
  // all fp32 or all 16-bit. p: the forward's, so that both directions take one path (the cpu
  // backend's backward reads its probabilities and ignores it).
  virtual void AttentionBackward(Ptr dqkv, float* scratch, CPtr dout, CPtr qkv, CPtr out, const float* state, int B,
                                 int T, int C, int NH, Precision p = Precision::kFp32) = 0;
  // Grouped-query attention straight on the q|k|v projection's rows (Llama with NKV < NH):
  // qkv (B,T,(NH + 2 NKV)·hd), query head h reading key/value head h / (NH / NKV) as GqaExpand
  // repeats them → out (B,T,NH·hd), state as AttentionForward's (NH query heads); backward →
  // dqkv (B,T,(NH + 2 NKV)·hd) overwritten, each key/value head's gradient summed over the
  // query heads that read it. The result of GqaExpand, the attention op and GqaReduce (NKV = NH:
  // the attention op itself). Supports(Capability::kGroupedAttention, shape): whether this
  // backend runs such a call without repeating the heads, so that the model need not hold the
  // repeated copy (a cuda backend's cuDNN path, whose SDPA takes K and V with their own head
  // count). Elsewhere the
  // model repeats the heads in its activations and calls the attention op; the cpu backend
  // still runs these calls (repeating into host memory: the reference of the others), a cuda
  // backend refuses a grouped call (NKV < NH) it does not take (INVALID_ARGUMENT naming why).
  virtual void GroupedAttentionForward(Ptr out, float* state, CPtr qkv, int B, int T, int NH, int NKV, int hd,
                                       Precision p) = 0;
  virtual void GroupedAttentionBackward(Ptr dqkv, float* scratch, CPtr dout, CPtr qkv, CPtr out, const float* state,
                                        int B, int T, int NH, int NKV, int hd, Precision p) = 0;
  // Context parallelism's block attention (kernels/attention_block.h states each op; fp32; the
  // heads grouped as there, the tensors strided views of wider rows): a block of query rows
  // against a block of key/value rows, causal (the diagonal block) or not, merged by the
  // log-sum-exps into the running (out, lse) (a.first: overwritten, the rows' first block);
  // the backward's D = rowsum(dout·out); and the block's backward from the rows' final out, lse
  // and D, dq, dk and dv added to (a 16-bit path takes D from out and dout itself; the fp32 op
  // reads D). With a.values 16-bit a backend may compute the block in that type (cuda: cuDNN;
  // kernels/attention_block.h). model::RingAttention runs on these, on every backend.
  virtual void AttentionBlockForward(HeadRows<float> out, RowStats<float> lse, HeadRows<const float> q,
                                     HeadRows<const float> k, HeadRows<const float> v, const AttentionBlock& a) = 0;
  virtual void AttentionBlockDelta(RowStats<float> D, HeadRows<const float> dout, HeadRows<const float> out, int B,
                                   int NH, int hd, int L) = 0;
  virtual void AttentionBlockBackward(HeadRows<float> dq, HeadRows<float> dk, HeadRows<float> dv,
                                      HeadRows<const float> q, HeadRows<const float> k, HeadRows<const float> v,
                                      HeadRows<const float> dout, HeadRows<const float> out,
                                      RowStats<const float> lse, RowStats<const float> D, const AttentionBlock& a) = 0;
  // All fp32 or all 16-bit.
  virtual void GeluForward(Ptr out, CPtr inp, int64_t n) = 0;
  virtual void GeluBackward(Ptr dinp, CPtr inp, CPtr dout, int64_t n) = 0;
  virtual void ResidualForward(float* out, const float* a, const float* b, int64_t n) = 0;
  virtual void ResidualBackward(float* da, float* db, const float* dout, int64_t n) = 0;
  // logits (N,V) fp32 or 16-bit (softmax and loss in fp32 either way), targets (N) → losses (N).
  virtual void CrossEntropyForward(float* losses, CPtr logits, const int32_t* targets, int N, int V) = 0;
  // losses (N), and logits := (softmax - onehot) * dloss, in one pass per row.
  virtual void CrossEntropyFusedForwardBackward(float* losses, Ptr logits, const int32_t* targets, float dloss,
                                                int N, int V) = 0;
  // Vocabulary-parallel classifier (kernels/crossentropy.h): this rank's per-row (max, sum
  // of exp, target logit) of its V columns from v_begin → stats (N,3); then, from every
  // rank's stats (ranks, N, 3), the losses and the gradient of its columns.
  virtual void CrossEntropyShardStats(float* stats, CPtr logits, const int32_t* targets, int N, int V,
                                      int v_begin) = 0;
  virtual void CrossEntropyShardFinish(float* losses, Ptr logits, const float* all_stats, int ranks,
                                       const int32_t* targets, float dloss, int N, int V, int v_begin) = 0;
  // AdamW on params, grads, m, v (n), in place: AdamWSpans' one span.
  void AdamW(float* params, const float* grads, float* m, float* v, int64_t n, const AdamWParams& hp) {
    const AdamWSpan span{params, grads, m, v, n, hp.weight_decay, nullptr};
    AdamWSpans(&span, 1, hp);
  }
  // AdamW over count spans in one pass (a launch per 32 spans on a GPU), each with its own
  // weight decay, each span's working copy written from its updated parameters: the bits of
  // AdamW on each span, then Convert into its working copy.
  virtual void AdamWSpans(const AdamWSpan* spans, int count, const AdamWParams& hp) = 0;
  // The sum of g[i]^2 over n, read back to the host (it waits for the work queued).
  virtual double SumSquares(const float* g, int64_t n) = 0;
  // The same sum into *sum_sq (backend memory), queued: nothing waits. Then the gradients'
  // multiplier from it (kernels/grad_norm.h clip_multiplier: the clip to max_norm, 0 none, of
  // the norm unscaled by inv_scale) into *multiplier and that norm into *norm (backend
  // memory; AdamWParams::grad_scale reads the multiplier), queued. A step clips with no host
  // read before its update: the norm is read after (CopyToHostAsync).
  virtual void SumSquaresTo(double* sum_sq, const float* g, int64_t n) = 0;
  virtual void ClipMultiplier(float* multiplier, double* norm, const double* sum_sq, float max_norm,
                              float inv_scale) = 0;
  virtual void Scale(float* g, int64_t n, float s) = 0;
  // in (n) → out (n) of out's type: 16-bit values widened exactly, fp32 rounded to a 16-bit
  // type to nearest, ties to even (kernels/cast.h: Bf16Of, Fp16Of; NaN kept), fp32 copied;
  // 16-bit to the other 16-bit type through its fp32 value.
  virtual void Convert(Ptr out, CPtr in, int64_t n) = 0;
  void CastToBf16(uint16_t* out, const float* in, int64_t n) { Convert(Ptr(out, Precision::kBf16), in, n); }
  void CastFromBf16(float* out, const uint16_t* in, int64_t n) { Convert(out, CPtr(in, Precision::kBf16), n); }
  // in (n) → out (n): each value rounded to the nearest of precision p (kernels/cast.h:
  // RoundToBf16, RoundToFp16), kept as fp32; out == in allowed. A mixed-precision model's
  // 16-bit tensors are its fp32 values rounded where PyTorch autocast would cast.
  virtual void RoundTo(float* out, const float* in, int64_t n, Precision p) = 0;
};

// The element-type rule of the ops (above): the non-null tensors of `same` share one type, and
// each non-null tensor of `out` is fp32 or of that type. INVALID_ARGUMENT naming op otherwise.
absl::Status CheckTypes(const char* op, std::initializer_list<CPtr> same, std::initializer_list<CPtr> out = {});

// The process's cpu backend (stateless; never freed).
Backend& CpuBackend();
// Devices of that kind this process sees: 1 for cpu, the emulated runtime's for cuda-emulated,
// the visible GPUs for cuda (0 in a build without the cuda backend).
int DeviceCount(BackendKind kind);
// A backend of `kind` on device ordinal `device` (cuda kinds). cuda: UNIMPLEMENTED in a
// build without CUDA, UNAVAILABLE without that device; cuda-emulated: always (the
// emulated runtime offers 8 devices).
// How a cuda backend runs causal attention (BackendOptions::attention).
//   kAuto       cuDNN's fused SDPA (tensor cores) for the 16-bit calls it takes, where the
//               cuDNN library loads; the fused fp32 kernels for the rest. The default.
//   kCudnn      as kAuto, but a 16-bit call cuDNN cannot take, or a machine without the
//               library, is an error that names why (no silent fallback).
//   kFused      the fused flash-style kernels (fp32 FMAs, O(T) memory a row) for every call:
//               the fp32 path and the GPU's exact reference for 16-bit calls.
//   kReference  cuBLAS batched GEMMs over stored (B,NH,T,T) probabilities.
// A 16-bit call is one whose qkv is bf16 or fp16 and whose softmax weights are rounded to
// that type (the mixed-precision model's calls); fp32 calls take the fused kernels on kAuto
// and kCudnn alike. The cpu backend ignores it.
enum class AttentionPath { kAuto, kCudnn, kFused, kReference };
// "auto", "cudnn", "fused" or "reference" (INVALID_ARGUMENT naming them otherwise).
absl::StatusOr<AttentionPath> ParseAttentionPath(absl::string_view name);
const char* AttentionPathName(AttentionPath path);
struct BackendOptions {
  AttentionPath attention = AttentionPath::kAuto;
  // cuda kinds: a 16-bit GEMM output with a bias (MatmulForward, MatmulBiasGeluForward) through
  // cuBLASLt's bias epilogue, which rounds the product to 16 bits and then the sum (as an H200
  // was measured to, and as PyTorch's CUDA addmm does through the same call), rather than through
  // an fp32 scratch rounded once (the cpu's bits, autocast's on the CPU). The default: faster
  // (GPT-2 124M on an H200: 0.90x of PyTorch rather than about 0.84x), and PyTorch's scheme on a
  // GPU (docs/perf/gpu.md, "The bias epilogue's loss, explained"; mixed_precision_test holds each
  // scheme to PyTorch computing it). false: one rounding.
  bool bias_epilogue = true;
  // cuda kinds: cuBLASLt's GELU and bias-gradient epilogues (kernels/cuda/matmul.cu): the fused
  // forward's GELU_AUX_BIAS (pre and gelu(pre) from the GEMM), the backward through the GELU's
  // DGELU / DGELU_BGRAD (MatmulBackward's gelu_pre and gelu_dbias) and BGRADA / BGRADB (dbias from
  // the weight-gradient GEMM), rather than kernels after the GEMM (the default). Each epilogue
  // rounds its 16-bit outputs once from the fp32 sums where the cpu rounds pre before its GELU and
  // dinp before the product with gelu'; calls an epilogue cannot take keep the default path. Off
  // until a GPU has measured both its speed and its rounding.
  bool gelu_epilogue = false;
  // cuda kinds: a Llama's grouped key/value heads (NKV < NH) read as they are by cuDNN's SDPA
  // (Capability::kGroupedAttention, where cuDNN takes the call), so that the model neither repeats them
  // (GqaExpand) nor sums their gradients back (GqaReduce). false: the model does both, around
  // the multi-head attention op (for comparison).
  bool grouped_attention = true;
  // cuda kinds: cuDNN's deterministic attention backward (true, the default: the same bits run
  // to run on one GPU) or its non-deterministic one (false; JobSpec's train.deterministic). A
  // candidate for speed (about 4 ms of GPT-2's step on an H200 by the profile), off until a GPU
  // has measured it.
  bool deterministic_attention = true;
  // cuda kinds: each GEMM shape's cuBLASLt algorithm chosen by timing the heuristic's first few
  // offers at its first call (the host waits for that once per shape), rather than taking its
  // first. A candidate for speed, off until a GPU has measured it.
  bool gemm_autotune = false;
};
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind, int device = 0,
                                                       const BackendOptions& options = {});

// An allocation of a backend's device memory, freed with it.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend* backend, size_t floats) { Assign(backend, floats); }
  ~DeviceBuffer() { Reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // floats of device memory, zeroed (queued on the backend's current stream) unless !zero.
  void Assign(Backend* backend, size_t floats, bool zero = true);
  // floats of the backend's host memory for transfers (Backend::AllocateHost), zeroed.
  void AssignHost(Backend* backend, size_t floats);
  void Reset();
  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Backend* backend_ = nullptr;
  float* data_ = nullptr;
  size_t size_ = 0;
  bool host_ = false;  // from AllocateHost
};

}  // namespace gantry::kernels
