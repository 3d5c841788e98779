// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// Matmul through cuBLASLt with fp32 accumulation (CUBLAS_COMPUTE_32F): fp32 inputs without
// TF32 (the CPU twin, kernels/cpu/matmul.cc, is the reference), or bf16 / fp16 inputs
// (CUDA_R_16BF / CUDA_R_16F), whose products are exact in fp32. The output D is fp32 or of the
// inputs' 16-bit type, rounded once, after the bias is added in fp32. An fp32 D takes an fp32
// bias in cuBLASLt's epilogue and a 16-bit one from a kernel after. A 16-bit D with a bias
// takes cuBLASLt's bias epilogue where the context allows it (Context::bias_epilogue,
// BackendOptions::bias_epilogue, the default): on an H200 (cuBLAS 13) the epilogue adds the bias
// to the product already rounded to 16 bits and rounds again (docs/perf/gpu.md, "The first run on a
// GPU"), up to half an ulp of the product's size off where they cancel, as PyTorch's CUDA addmm
// does through the same call; the emulated cuBLASLt does the same. Otherwise (bias_epilogue
// false) its product goes to an fp32 scratch, some rows at a time, and a kernel adds the bias
// and rounds once (and applies the GELU of the fused op): the cpu's bits. A split-K
// reduction may not sum a 16-bit D's partial products in D's type.
// With Context::gelu_epilogue (BackendOptions::gelu_epilogue, off by default) three more of
// cuBLASLt's epilogues replace passes of their own: GELU_AUX_BIAS writes pre (aux) and
// out = gelu(pre) from the GEMM (MatmulBiasGeluForward); DGELU (DGELU_BGRAD with gelu_dbias)
// multiplies the dinp GEMM by gelu'(gelu_pre) (and sums its columns for the bias gradient of the
// layer before the GELU); BGRADA or BGRADB gives the bias gradient from the weight-gradient GEMM
// instead of the column-sum pass. They work on the fp32 accumulator and round each output once
// (a 16-bit pre, out, dinp and GELU bias gradient: one rounding where the cpu rounds twice; how
// a GPU rounds them has yet to be measured). A call that one cannot take (a leading dimension
// that is not a multiple of 8, types that differ, no algorithm) takes the path above. Row-major (N, C)
// matrices are column-major (C, N) ones to cuBLAS, so out (N,OC) = inp @ W is
// out^T = W^T @ inp^T in its terms.
#include <algorithm>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/ns.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"

namespace gantry::GANTRY_CUDA_NS {
namespace {

using kernels::CPtr;
using kernels::Precision;
using kernels::Ptr;

// d (n) of ED's type := gelu'(pre) * d, pre (n) of EP's type (a 16-bit d: its rounded value
// times gelu', rounded again).
template <typename ED, typename EP>
__global__ void GeluBackwardInPlaceKernel(typename ED::T* d, const typename EP::T* pre, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) d[i] = ED::St(GeluGrad(EP::Ld(pre[i])) * ED::Ld(d[i]));
}

// The same, 8 elements a thread (16-byte accesses for 16-bit types): n8 = n / 8, both pointers
// 16-byte aligned.
template <typename ED, typename EP>
__global__ void GeluBackwardInPlace8Kernel(typename ED::T* d, const typename EP::T* pre, int64_t n8) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n8) return;
  float x[8], g[8];
  Load8<EP>(pre + 8 * i, x);
  Load8<ED>(d + 8 * i, g);
  for (int k = 0; k < 8; ++k) g[k] = GeluGrad(x[k]) * g[k];
  Store8<ED>(d + 8 * i, g);
}

// out (rows, OC) fp32 += bias (OC) of E's type, widened.
template <typename E>
__global__ void AddBiasKernel(float* out, const typename E::T* bias, int64_t n, int OC) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] += E::Ld(bias[i % OC]);
}

// out (rows, OC) of E's type := acc (rows, OC) fp32 + bias (OC) of E's type, rounded once;
// gelu (optional) := gelu of that rounded value, rounded.
template <typename E>
__global__ void AddBiasRoundKernel(typename E::T* out, typename E::T* gelu, const float* acc,
                                   const typename E::T* bias, int64_t n, int OC) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const typename E::T v = E::St(acc[i] + E::Ld(bias[i % OC]));
  out[i] = v;
  if (gelu != nullptr) gelu[i] = E::St(Gelu(E::Ld(v)));
}

// The same, 8 values a thread (16-byte accesses): OC a multiple of 8, the pointers 16-byte
// aligned, n8 = n / 8. Each value as AddBiasRoundKernel computes it.
template <typename E>
__global__ void AddBiasRound8Kernel(typename E::T* out, typename E::T* gelu, const float* acc,
                                    const typename E::T* bias, int64_t n8, int OC) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n8) return;
  float a0[4], a1[4], b[8], v[8];
  LoadF4(acc + 8 * i, a0);
  LoadF4(acc + 8 * i + 4, a1);
  Load8<E>(bias + (8 * i) % OC, b);
  for (int k = 0; k < 8; ++k) v[k] = E::Ld(E::St((k < 4 ? a0[k] : a1[k - 4]) + b[k]));
  Store8<E>(out + 8 * i, v);
  if (gelu != nullptr) {
    for (int k = 0; k < 8; ++k) v[k] = Gelu(v[k]);
    Store8<E>(gelu + 8 * i, v);
  }
}

// d (rows, OC) of E's type := d + bias (OC) of E's type, in fp32, rounded to E's type: cuBLASLt's
// bias epilogue on a GPU (the product already stored, then the bias), where it has no algorithm.
template <typename E>
__global__ void AddBiasInPlaceKernel(typename E::T* d, const typename E::T* bias, int64_t n, int OC) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) d[i] = E::St(E::Ld(d[i]) + E::Ld(bias[i % OC]));
}

// acc (n) fp32 += d (n) of E's type, widened.
template <typename E>
__global__ void AddWidenedKernel(float* acc, const typename E::T* d, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) acc[i] += E::Ld(d[i]);
}

template <typename E>
struct Rows {  // dout's values (E's type), widened, summed per column for dbias
  const typename E::T* x;
  int C;
  __device__ float2 operator()(int r, int c) const {
    return make_float2(E::Ld(x[static_cast<int64_t>(r) * C + c]), 0.f);
  }
};

cudaDataType_t CudaType(Precision t) {
  return t == Precision::kBf16 ? CUDA_R_16BF : t == Precision::kFp16 ? CUDA_R_16F : CUDA_R_32F;
}

// The largest power of two up to 256 that divides p's address: the alignment cuBLASLt's
// heuristic may assume of that matrix (it assumes 256 unless told).
uint32_t Alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

// Releases cuBLASLt descriptors with the plan that holds them.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtDescriptors() = default;
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;
  ~LtDescriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// A GEMM's epilogue: cuBLASLt's kind, the bias (BIAS, GELU_AUX_BIAS) or the bias gradient it
// writes (the BGRAD kinds), of D's type, and GELU's input (aux: written by GELU_AUX_BIAS, read by
// the DGELU kinds), of D's type and layout.
struct Epilogue {
  cublasLtEpilogue_t kind = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  const void* aux = nullptr;
};
bool HasAux(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}

// What fixes a GEMM's descriptors and algorithm: transposes, sizes, leading dimensions, types,
// the epilogue, and the alignments the heuristic was told.
struct PlanKey {
  bool ta, tb;
  int epilogue;  // cublasLtEpilogue_t
  int m, n, k, lda, ldb, ldd;
  Precision ab, dt;
  uint32_t align_a, align_b, align_d, align_bias, align_aux;
  bool operator<(const PlanKey& o) const {
    return std::tie(ta, tb, epilogue, m, n, k, lda, ldb, ldd, ab, dt, align_a, align_b, align_d, align_bias,
                    align_aux) < std::tie(o.ta, o.tb, o.epilogue, o.m, o.n, o.k, o.lda, o.ldb, o.ldd, o.ab, o.dt,
                                          o.align_a, o.align_b, o.align_d, o.align_bias, o.align_aux);
  }
};
struct Plan {
  LtDescriptors l;
  cublasLtMatmulAlgo_t algo;
  // Context::gemm_autotune: the heuristic's other offers, timed at the first call that may
  // overwrite D (beta 0), then cleared; algo is the fastest of them.
  std::vector<cublasLtMatmulAlgo_t> untimed;
};
// How many of the heuristic's algorithms Context::gemm_autotune times per shape.
constexpr int kTunedAlgorithms = 4;

}  // namespace

struct MatmulPlans {
  std::map<PlanKey, std::unique_ptr<Plan>> plans;  // null: cuBLASLt has no algorithm (a fused epilogue's key)
};
void DeleteMatmulPlans(MatmulPlans* plans) { delete plans; }

namespace {

// Makes the plan of key: descriptors, and the heuristic's algorithm (found false: it has none).
absl::Status MakePlan(Context& ctx, const PlanKey& key, Plan& plan, bool& found_one) {
  LtDescriptors& l = plan.l;
  GPU_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&l.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opa = key.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = key.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  GPU_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  GPU_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
  const auto epi = static_cast<cublasLtEpilogue_t>(key.epilogue);
  if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
    GPU_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    // The heuristic may look at the epilogue's pointers: addresses of their alignments stand
    // for them (never read), and each call sets its own (Gemm).
    if (key.align_bias != 0) {
      const void* placeholder = reinterpret_cast<const void*>(uintptr_t{key.align_bias});
      GPU_RETURN_IF_ERROR(
          cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &placeholder, sizeof(placeholder)));
    }
    if (HasAux(epi)) {
      const void* placeholder = reinterpret_cast<const void*>(uintptr_t{key.align_aux});
      GPU_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                          &placeholder, sizeof(placeholder)));
      const int64_t aux_ld = key.ldd;  // GELU's input is laid out as D
      GPU_RETURN_IF_ERROR(
          cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
    }
  }
  const cudaDataType_t tab = CudaType(key.ab), td = CudaType(key.dt);
  GPU_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&l.a, tab, key.ta ? key.k : key.m, key.ta ? key.m : key.k, key.lda));
  GPU_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&l.b, tab, key.tb ? key.n : key.k, key.tb ? key.k : key.n, key.ldb));
  GPU_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&l.d, td, key.m, key.n, key.ldd));
  GPU_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&l.pref));
  const size_t ws = ctx.lt_workspace_bytes();
  GPU_RETURN_IF_ERROR(
      cublasLtMatmulPreferenceSetAttribute(l.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  if (key.dt != Precision::kFp32) {  // partial sums of a split K in fp32 (in the workspace), not in D's type
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    GPU_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(l.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                                &schemes, sizeof(schemes)));
  }
  // The pointers' own alignments (a weight or activation may start anywhere in a larger
  // buffer): an algorithm that needs more is not chosen.
  GPU_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(l.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                              &key.align_a, sizeof(key.align_a)));
  GPU_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(l.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                              &key.align_b, sizeof(key.align_b)));
  GPU_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(l.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                              &key.align_d, sizeof(key.align_d)));
  GPU_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(l.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                              &key.align_d, sizeof(key.align_d)));
  cublasLtMatmulHeuristicResult_t h[kTunedAlgorithms];
  int found = 0;
  const int asked = ctx.gemm_autotune() ? kTunedAlgorithms : 1;
  GPU_RETURN_IF_ERROR(cublasLtMatmulAlgoGetHeuristic(ctx.lt(), l.op, l.a, l.b, l.d, l.d, l.pref, asked, h, &found));
  found_one = found > 0;
  if (found_one) plan.algo = h[0].algo;
  for (int i = 1; i < found; ++i) {
    if (GpuOk(h[i].state)) plan.untimed.push_back(h[i].algo);
  }
  if (!plan.untimed.empty()) plan.untimed.insert(plan.untimed.begin(), h[0].algo);
  return absl::OkStatus();
}

const char* EpilogueName(int epilogue) {
  switch (epilogue) {
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: return "DGELU_BGRAD";
    case CUBLASLT_EPILOGUE_BGRADA: return "BGRADA";
    case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
    default: return "DEFAULT";
  }
}

// The plan of key (descriptors made and the heuristic asked once per context and key). An
// epilogue's key (the bias's or a fused one's) that cuBLASLt refuses or has no algorithm for is
// remembered as null, and said once per epilogue (Context::Notice): the caller takes its path
// without the epilogue. A plain GEMM's refusal is an error.
absl::StatusOr<Plan*> PlanOf(Context& ctx, const PlanKey& key) {
  MatmulPlans*& plans = ctx.matmul_plans();
  if (plans == nullptr) plans = new MatmulPlans;
  if (auto it = plans->plans.find(key); it != plans->plans.end()) return it->second.get();
  auto plan = std::make_unique<Plan>();
  bool found = false;
  const absl::Status made = MakePlan(ctx, key, *plan, found);
  if (key.epilogue != CUBLASLT_EPILOGUE_DEFAULT && (!made.ok() || !found)) {
    plan = nullptr;
    const char* name = EpilogueName(key.epilogue);
    ctx.Notice(absl::StrCat("cublaslt-epilogue:", name),
               absl::StrCat("cuBLASLt has no algorithm for its ", name, " epilogue (first at m ", key.m, " n ", key.n,
                            " k ", key.k, ", ", kernels::PrecisionName(key.ab), " inputs, a ",
                            kernels::PrecisionName(key.dt), " output",
                            made.ok() ? "" : absl::StrCat(": ", made.message()),
                            "); those GEMMs run without it, and Gantry's kernels do its work"));
  } else if (!made.ok()) {
    return made;
  } else if (!found) {
    return absl::UnimplementedError(absl::StrCat("cuBLASLt has no algorithm for ", kernels::PrecisionName(key.ab),
                                                 " inputs and a ", kernels::PrecisionName(key.dt), " output, m ",
                                                 key.m, " n ", key.n, " k ", key.k, key.ta ? " A^T" : "",
                                                 key.tb ? " B^T" : "", key.epilogue != CUBLASLT_EPILOGUE_DEFAULT ? " with bias" : ""));
  }
  return plans->plans.emplace(key, std::move(plan)).first->second.get();
}

// Context::gemm_autotune: each of the plan's untimed algorithms run on these operands (D, the
// aux and the bias gradient overwritten: the caller's GEMM then writes them again), once to
// warm up and three times timed by events on the stream, and the fastest kept as plan.algo.
// The host waits for the timings: once per shape, at its first call.
// The descriptor's epilogue pointers are the call's (TryGemm sets them first).
absl::Status TimeAlgorithms(Context& ctx, Plan& plan, const void* A, const void* B, void* D) {
  cudaEvent_t start = nullptr, stop = nullptr;
  GPU_RETURN_IF_ERROR(cudaEventCreate(&start));
  absl::Status st = [&]() -> absl::Status {
    GPU_RETURN_IF_ERROR(cudaEventCreate(&stop));
    const float alpha = 1.f, beta = 0.f;
    float best = 0.f;
    for (size_t i = 0; i < plan.untimed.size(); ++i) {
      const cublasLtMatmulAlgo_t& algo = plan.untimed[i];
      auto run = [&]() -> absl::Status {
        GPU_RETURN_IF_ERROR(cublasLtMatmul(ctx.lt(), plan.l.op, &alpha, A, plan.l.a, B, plan.l.b, &beta, D, plan.l.d,
                                              D, plan.l.d, &algo, ctx.lt_workspace(), ctx.lt_workspace_bytes(),
                                              ctx.stream()));
        return absl::OkStatus();
      };
      if (!run().ok()) continue;  // an offer that fails on these operands is not chosen
      GPU_RETURN_IF_ERROR(cudaEventRecord(start, ctx.stream()));
      for (int r = 0; r < 3; ++r) RETURN_IF_ERROR(run());
      GPU_RETURN_IF_ERROR(cudaEventRecord(stop, ctx.stream()));
      GPU_RETURN_IF_ERROR(cudaEventSynchronize(stop));
      float ms = 0.f;
      GPU_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start, stop));
      if (i == 0 || ms < best) best = ms, plan.algo = algo;
    }
    return absl::OkStatus();
  }();
  cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  return st;
}

// Column-major D (m, n) = op(A) @ op(B) + beta * D, then the epilogue e, A and B of type ab, D
// (and the epilogue's bias and aux) of type dt: fp32 accumulation, D rounded once at the end (a
// 16-bit D with a bias: see the top of this file). The plan of its shape and epilogue is made
// once (PlanOf). Returns false, having done nothing, where a fused epilogue has no plan.
absl::StatusOr<bool> TryGemm(Context& ctx, bool ta, bool tb, int m, int n, int k, const void* A, int lda,
                             const void* B, int ldb, Precision ab, void* D, int ldd, Precision dt, float beta,
                             const Epilogue& e) {
  const PlanKey key{ta,
                    tb,
                    static_cast<int>(e.kind),
                    m,
                    n,
                    k,
                    lda,
                    ldb,
                    ldd,
                    ab,
                    dt,
                    Alignment(A),
                    Alignment(B),
                    Alignment(D),
                    e.bias != nullptr ? Alignment(e.bias) : 0,
                    e.aux != nullptr ? Alignment(e.aux) : 0};
  ASSIGN_OR_RETURN(Plan * plan, PlanOf(ctx, key));
  if (plan == nullptr) return false;
  if (e.bias != nullptr) {
    GPU_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(plan->l.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &e.bias, sizeof(e.bias)));
  }
  if (e.aux != nullptr) {
    GPU_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(plan->l.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e.aux, sizeof(e.aux)));
  }
  if (!plan->untimed.empty()) {
    if (beta == 0.f) RETURN_IF_ERROR(TimeAlgorithms(ctx, *plan, A, B, D));  // else the heuristic's first stays
    plan->untimed.clear();
  }
  const float alpha = 1.f;
  GPU_RETURN_IF_ERROR(cublasLtMatmul(ctx.lt(), plan->l.op, &alpha, A, plan->l.a, B, plan->l.b, &beta, D, plan->l.d,
                                        D, plan->l.d, &plan->algo, ctx.lt_workspace(), ctx.lt_workspace_bytes(),
                                        ctx.stream()));
  return true;
}

// The same without a fused epilogue (none, or the bias): always runs. Where cuBLASLt has no
// algorithm for the bias epilogue, the plain product then AddBiasInPlaceKernel: the bias added
// to D as stored (a 16-bit D rounded twice), as the epilogue computes (the top of this file).
absl::Status Gemm(Context& ctx, bool ta, bool tb, int m, int n, int k, const void* A, int lda, const void* B, int ldb,
                  Precision ab, void* D, int ldd, Precision dt, float beta, const void* bias) {
  const Epilogue e{bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, nullptr};
  ASSIGN_OR_RETURN(const bool ran, TryGemm(ctx, ta, tb, m, n, k, A, lda, B, ldb, ab, D, ldd, dt, beta, e));
  if (ran) return absl::OkStatus();
  ASSIGN_OR_RETURN(const bool plain, TryGemm(ctx, ta, tb, m, n, k, A, lda, B, ldb, ab, D, ldd, dt, beta, Epilogue{}));
  if (!plain) return absl::InternalError("Gemm: the plain GEMM has no plan");  // (PlanOf errs first)
  if (ldd != m) return absl::InvalidArgumentError("Gemm: the bias's fallback needs D packed (ldd == m)");
  return WithType(dt, [&](auto e) -> absl::Status {
    using E = decltype(e);
    const int64_t total = static_cast<int64_t>(m) * n;
    GANTRY_LAUNCH(AddBiasInPlaceKernel<E>, CeilDiv(total, 256), 256, 0, ctx.stream())(
        static_cast<typename E::T*>(D), static_cast<const typename E::T*>(bias), total, m);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

absl::Status CheckShape(const char* op, int N, int C, int OC) {
  if (N <= 0 || C <= 0 || OC <= 0) return absl::InvalidArgumentError(absl::StrCat(op, ": bad shape (", N, ", ", C, ", ", OC, ")"));
  return absl::OkStatus();
}

// The rows of a 16-bit output with a bias that one pass through the fp32 scratch takes.
int ScratchRows(int N, int OC) {
  constexpr int64_t kChunkFloats = int64_t{64} << 20;  // 256 MB: GPT-2's qkv in 3 GEMMs, its fc in 4
  return static_cast<int>(std::min<int64_t>(N, std::max<int64_t>(1, kChunkFloats / OC)));
}

// A 16-bit out (and gelu_out, when given) with a bias: the product in fp32 into scratch32,
// ScratchRows rows at a time, then the bias added and each value rounded once.
absl::Status ForwardThroughScratch(Context& ctx, Ptr out, Ptr gelu_out, CPtr inp, CPtr weight, CPtr bias, int N,
                                   int C, int OC, bool outin, float* scratch32) {
  if (scratch32 == nullptr) {
    return absl::InvalidArgumentError("MatmulForward: a 16-bit output with a bias needs scratch32");
  }
  const int rows = ScratchRows(N, OC);
  for (int r0 = 0; r0 < N; r0 += rows) {
    const int nr = std::min(rows, N - r0);
    RETURN_IF_ERROR(Gemm(ctx, outin, false, OC, nr, C, weight.data, outin ? C : OC, (inp + int64_t{r0} * C).data, C,
                         inp.type, scratch32, OC, Precision::kFp32, 0.f, nullptr));
    RETURN_IF_ERROR(WithType(out.type, [&](auto e) -> absl::Status {
      using E = decltype(e);
      const int64_t n = static_cast<int64_t>(nr) * OC, at = int64_t{r0} * OC;
      typename E::T* o = Of<E>(out + at);
      typename E::T* g = gelu_out ? Of<E>(gelu_out + at) : nullptr;
      if (OC % 8 == 0 && Aligned16({o, g, scratch32, bias.data})) {
        GANTRY_LAUNCH(AddBiasRound8Kernel<E>, CeilDiv(n / 8, 256), 256, 0, ctx.stream())(o, g, scratch32,
                                                                                        Of<E>(bias), n / 8, OC);
      } else {
        GANTRY_LAUNCH(AddBiasRoundKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(o, g, scratch32, Of<E>(bias),
                                                                                   n, OC);
      }
      GPU_RETURN_IF_ERROR(cudaGetLastError());
      return absl::OkStatus();
    }));
  }
  return absl::OkStatus();
}

// acc (n) fp32 += x (n) of x's type, widened.
absl::Status AddWidened(Context& ctx, float* acc, CPtr x, int64_t n) {
  return WithType(x.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(AddWidenedKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(acc, Of<E>(x), n);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

// sums (cols) += the column sums of x (rows, cols), of x's type widened, each sum rounded to a
// 16-bit x's type before it is added.
absl::Status AddColumnSums(Context& ctx, float* sums, CPtr x, int rows, int cols) {
  const int bits = x.type == Precision::kBf16 ? 16 : x.type == Precision::kFp16 ? 10 : 0;
  return WithType(x.type, [&](auto e) {
    using E = decltype(e);
    return ColumnSums(ctx, sums, nullptr, Rows<E>{Of<E>(x), cols}, rows, cols, bits);
  });
}

// Room for a fused epilogue's bias gradient (n values of D's type) in the context's scratch,
// which the column sums also use (the ops that use it run in order on one stream).
void* BiasGradScratch(Context& ctx, int n) {
  return static_cast<size_t>(n) <= Context::kScratchFloats ? ctx.scratch() : nullptr;
}

}  // namespace

size_t MatmulForwardScratch(int N, int OC, Precision out, bool bias) {
  if (out == Precision::kFp32 || !bias || N <= 0 || OC <= 0) return 0;
  return static_cast<size_t>(ScratchRows(N, OC)) * OC;
}

absl::Status MatmulForward(Context& ctx, Ptr out, CPtr inp, CPtr weight, CPtr bias, int N, int C, int OC,
                           kernels::WeightLayout layout, float* scratch32) {
  // inp (N,C) @ W + bias → out (N,OC)
  RETURN_IF_ERROR(CheckShape("MatmulForward", N, C, OC));
  const Precision t = inp.type;
  RETURN_IF_ERROR(CheckType("MatmulForward", t, {weight, bias}));
  RETURN_IF_ERROR(CheckOutType("MatmulForward", t, out));
  // out^T (OC, N) = W' (OC, C) @ inp^T (C, N), W' = W stored (OC, C) [kInOut] or (C, OC)^T [kOutIn]
  const bool outin = layout == kernels::WeightLayout::kOutIn;
  const int64_t n = static_cast<int64_t>(N) * OC;
  // A 16-bit out with a bias: one rounding through the fp32 scratch, unless the context takes
  // cuBLASLt's bias epilogue (two roundings; Context::bias_epilogue).
  if (bias && !out.f32() && !ctx.bias_epilogue()) {
    return ForwardThroughScratch(ctx, out, nullptr, inp, weight, bias, N, C, OC, outin, scratch32);
  }
  // The epilogue's bias is of D's type: a 16-bit bias of an fp32 output is added after.
  const bool bias_after = bias && bias.type != out.type;
  RETURN_IF_ERROR(Gemm(ctx, outin, false, OC, N, C, weight.data, outin ? C : OC, inp.data, C, t, out.data, OC,
                       out.type, 0.f, bias_after ? nullptr : bias.data));
  if (!bias_after) return absl::OkStatus();
  return WithType(t, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(AddBiasKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(out.as_f32(), Of<E>(bias), n, OC);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

absl::Status MatmulBiasGeluForward(Context& ctx, Ptr pre, Ptr out, CPtr inp, CPtr weight, CPtr bias, int N, int C,
                                   int OC, float* scratch32) {
  // inp (N,C) @ W (C,OC) + bias → pre (N,OC), gelu(pre) → out (N,OC): the GELU of the stored
  // (16-bit: rounded) pre, rounded, as autocast rounds the linear's output and then GELU's.
  RETURN_IF_ERROR(CheckType("MatmulBiasGeluForward", inp.type, {pre, out, weight, bias}));
  if (ctx.gelu_epilogue() && bias && OC % 8 == 0) {  // cuBLASLt's GELU_AUX_BIAS: out^T = gelu(W^T inp^T + bias), pre^T aux
    RETURN_IF_ERROR(CheckShape("MatmulBiasGeluForward", N, C, OC));
    ASSIGN_OR_RETURN(const bool fused,
                     TryGemm(ctx, false, false, OC, N, C, weight.data, OC, inp.data, C, inp.type, out.data, OC,
                             out.type, 0.f, Epilogue{CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias.data, pre.data}));
    if (fused) return absl::OkStatus();
  }
  if (bias && !pre.f32() && !ctx.bias_epilogue()) {  // the GELU in the kernel that adds the bias
    RETURN_IF_ERROR(CheckShape("MatmulBiasGeluForward", N, C, OC));
    return ForwardThroughScratch(ctx, pre, out, inp, weight, bias, N, C, OC, false, scratch32);
  }
  RETURN_IF_ERROR(MatmulForward(ctx, pre, inp, weight, bias, N, C, OC, kernels::WeightLayout::kInOut, scratch32));
  return GeluForward(out, pre, static_cast<int64_t>(N) * OC, ctx.stream());
}

size_t MatmulBackwardScratch16(int C, int OC) { return (static_cast<size_t>(C) * OC + 1) / 2; }

// dinp^T (C, N) = W'' (C, OC) @ dout^T (OC, N) times gelu'(gelu_pre^T) in cuBLASLt's DGELU
// epilogue, and with gelu_dbias its column sums (DGELU_BGRAD, into a scratch of dinp's type,
// then added): false where the epilogue cannot run (nothing done).
absl::StatusOr<bool> DinpThroughGeluEpilogue(Context& ctx, Ptr dinp, float* gelu_dbias, CPtr dout, CPtr weight,
                                             int N, int C, int OC, bool outin, CPtr gelu_pre) {
  if (!ctx.gelu_epilogue() || C % 8 != 0 || gelu_pre.type != dinp.type) return false;
  void* bgrad = nullptr;
  if (gelu_dbias != nullptr && (bgrad = BiasGradScratch(ctx, C)) == nullptr) return false;
  const Epilogue e{gelu_dbias ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU, bgrad, gelu_pre.data};
  ASSIGN_OR_RETURN(const bool fused, TryGemm(ctx, !outin, false, C, N, OC, weight.data, outin ? C : OC, dout.data, OC,
                                             dout.type, dinp.data, C, dinp.type, 0.f, e));
  if (fused && gelu_dbias != nullptr) RETURN_IF_ERROR(AddWidened(ctx, gelu_dbias, CPtr(bgrad, dinp.type), C));
  return fused;
}

absl::Status MatmulBackward(Context& ctx, Ptr dinp, float* dweight, float* dbias, CPtr dout, CPtr inp, CPtr weight,
                            int N, int C, int OC, kernels::WeightLayout layout, CPtr gelu_pre, void* scratch16,
                            float* gelu_dbias) {
  // dout (N,OC) → dinp (N,C), dweight +=, dbias (OC) +=; gelu_dbias (C) += dinp's column sums
  RETURN_IF_ERROR(CheckShape("MatmulBackward", N, C, OC));
  const Precision t = dout.type;
  RETURN_IF_ERROR(CheckType("MatmulBackward", t, {inp, weight, gelu_pre}));
  RETURN_IF_ERROR(CheckOutType("MatmulBackward", t, dinp));
  if (gelu_dbias != nullptr && (!dinp || !gelu_pre)) {
    return absl::InvalidArgumentError("MatmulBackward: gelu_dbias needs dinp and gelu_pre");
  }
  const bool outin = layout == kernels::WeightLayout::kOutIn;
  bool fused = false;
  if (dinp && gelu_pre) {
    ASSIGN_OR_RETURN(fused, DinpThroughGeluEpilogue(ctx, dinp, gelu_dbias, dout, weight, N, C, OC, outin, gelu_pre));
  }
  if (dinp && !fused) {
    // dinp^T (C, N) = W'' (C, OC) @ dout^T (OC, N)
    RETURN_IF_ERROR(Gemm(ctx, !outin, false, C, N, OC, weight.data, outin ? C : OC, dout.data, OC, t, dinp.data, C,
                         dinp.type, 0.f, nullptr));
    if (gelu_pre) {
      RETURN_IF_ERROR(WithType(dinp.type, [&](auto ed) {
        return WithType(gelu_pre.type, [&](auto ep) -> absl::Status {
          using ED = decltype(ed);
          using EP = decltype(ep);
          const int64_t n = static_cast<int64_t>(N) * C;
          if (n % 8 == 0 && Aligned16({dinp.data, gelu_pre.data})) {
            auto* kernel8 = GeluBackwardInPlace8Kernel<ED, EP>;
            GANTRY_LAUNCH(kernel8, CeilDiv(n / 8, 256), 256, 0, ctx.stream())(Of<ED>(dinp), Of<EP>(gelu_pre), n / 8);
            GPU_RETURN_IF_ERROR(cudaGetLastError());
            return absl::OkStatus();
          }
          auto* kernel = GeluBackwardInPlaceKernel<ED, EP>;
          GANTRY_LAUNCH(kernel, CeilDiv(n, 256), 256, 0, ctx.stream())(Of<ED>(dinp), Of<EP>(gelu_pre), n);
          GPU_RETURN_IF_ERROR(cudaGetLastError());
          return absl::OkStatus();
        });
      }));
    }
    if (gelu_dbias != nullptr) RETURN_IF_ERROR(AddColumnSums(ctx, gelu_dbias, dinp, N, C));
  }
  // fp32: dW += straight from cuBLASLt (beta 1). 16-bit: this call's dW rounded into scratch16
  // (beta 0), then widened and added.
  const bool half = t != Precision::kFp32;
  if (half && scratch16 == nullptr) return absl::InvalidArgumentError("MatmulBackward: 16-bit inputs need scratch16");
  void* dw = half ? scratch16 : dweight;
  // With the fused epilogues, dbias's sums from the GEMM (dout's rows reduced over N: BGRADA
  // where dout is A, BGRADB where it is B) into a scratch of t, then added.
  void* bgrad = dbias != nullptr && ctx.gelu_epilogue() ? BiasGradScratch(ctx, OC) : nullptr;
  Epilogue e;
  if (bgrad != nullptr) e = Epilogue{outin ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_BGRADA, bgrad, nullptr};
  bool bias_fused = false;
  if (outin) {
    // dW (OC, C) row-major = (C, OC) column-major = inp^T (C, N) @ dout (N, OC)
    if (bgrad != nullptr) {
      ASSIGN_OR_RETURN(bias_fused, TryGemm(ctx, false, true, C, OC, N, inp.data, C, dout.data, OC, t, dw, C, t,
                                           half ? 0.f : 1.f, e));
    }
    if (!bias_fused) {
      RETURN_IF_ERROR(Gemm(ctx, false, true, C, OC, N, inp.data, C, dout.data, OC, t, dw, C, t, half ? 0.f : 1.f, nullptr));
    }
  } else {
    // dW (C, OC) row-major = (OC, C) column-major = dout^T (OC, N) @ inp (N, C)
    if (bgrad != nullptr) {
      ASSIGN_OR_RETURN(bias_fused, TryGemm(ctx, false, true, OC, C, N, dout.data, OC, inp.data, C, t, dw, OC, t,
                                           half ? 0.f : 1.f, e));
    }
    if (!bias_fused) {
      RETURN_IF_ERROR(Gemm(ctx, false, true, OC, C, N, dout.data, OC, inp.data, C, t, dw, OC, t, half ? 0.f : 1.f, nullptr));
    }
  }
  if (half) RETURN_IF_ERROR(AddWidened(ctx, dweight, CPtr(dw, t), static_cast<int64_t>(OC) * C));
  if (dbias == nullptr) return absl::OkStatus();
  if (bias_fused) return AddWidened(ctx, dbias, CPtr(bgrad, t), OC);
  return AddColumnSums(ctx, dbias, dout, N, OC);
}

}  // namespace gantry::GANTRY_CUDA_NS
