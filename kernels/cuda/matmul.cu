// Matmul through cuBLASLt in fp32 (no TF32: the CPU twin, kernels/cpu/matmul.cc, is the
// reference), bias added in the epilogue. Row-major (N, C) matrices are column-major (C, N)
// ones to cuBLAS, so out (N,OC) = inp @ W is out^T = W^T @ inp^T in its terms.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/ns.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"

namespace gantry::GANTRY_CUDA_NS {
namespace {

__global__ void GeluBackwardInPlaceKernel(float* d, const float* pre, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) d[i] *= GeluGrad(pre[i]);
}

struct Rows {  // dout's values, summed per column for dbias
  const float* x;
  int C;
  __device__ float2 operator()(int r, int c) const { return make_float2(x[static_cast<int64_t>(r) * C + c], 0.f); }
};

// The largest power of two up to 256 that divides p's address: the alignment cuBLASLt's
// heuristic may assume of that matrix (it assumes 256 unless told).
uint32_t Alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

// Releases cuBLASLt descriptors at scope exit.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// Column-major D (m, n) = op(A) @ op(B) + beta * D (+ bias (m) per row of D).
absl::Status Gemm(Context& ctx, bool ta, bool tb, int m, int n, int k, const float* A, int lda, const float* B,
                  int ldb, float* D, int ldd, float beta, const float* bias) {
  LtDescriptors l;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&l.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
  if (bias != nullptr) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&l.a, CUDA_R_32F, ta ? k : m, ta ? m : k, lda));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&l.b, CUDA_R_32F, tb ? n : k, tb ? k : n, ldb));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&l.d, CUDA_R_32F, m, n, ldd));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&l.pref));
  const size_t ws = ctx.lt_workspace_bytes();
  CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulPreferenceSetAttribute(l.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  // The pointers' own alignments (a weight or activation may start anywhere in a larger
  // buffer): an algorithm that needs more is not chosen.
  const uint32_t align_a = Alignment(A), align_b = Alignment(B), align_d = Alignment(D);
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(l.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                              &align_a, sizeof(align_a)));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(l.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                              &align_b, sizeof(align_b)));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(l.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                              &align_d, sizeof(align_d)));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(l.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                              &align_d, sizeof(align_d)));
  cublasLtMatmulHeuristicResult_t h;
  int found = 0;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulAlgoGetHeuristic(ctx.lt(), l.op, l.a, l.b, l.d, l.d, l.pref, 1, &h, &found));
  if (found == 0) {
    return absl::UnimplementedError(absl::StrCat("cuBLASLt has no fp32 algorithm for m ", m, " n ", n, " k ", k,
                                                 ta ? " A^T" : "", tb ? " B^T" : "", bias ? " with bias" : ""));
  }
  const float alpha = 1.f;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(ctx.lt(), l.op, &alpha, A, l.a, B, l.b, &beta, D, l.d, D, l.d, &h.algo,
                                        ctx.lt_workspace(), ws, ctx.stream()));
  return absl::OkStatus();
}

absl::Status CheckShape(const char* op, int N, int C, int OC) {
  if (N <= 0 || C <= 0 || OC <= 0) return absl::InvalidArgumentError(absl::StrCat(op, ": bad shape (", N, ", ", C, ", ", OC, ")"));
  return absl::OkStatus();
}

}  // namespace

absl::Status MatmulForward(Context& ctx, float* out, const float* inp, const float* weight, const float* bias, int N,
                           int C, int OC, kernels::WeightLayout layout) {
  if (auto s = CheckShape("MatmulForward", N, C, OC); !s.ok()) return s;
  // out^T (OC, N) = W' (OC, C) @ inp^T (C, N), W' = W stored (OC, C) [kInOut] or (C, OC)^T [kOutIn]
  const bool outin = layout == kernels::WeightLayout::kOutIn;
  return Gemm(ctx, outin, false, OC, N, C, weight, outin ? C : OC, inp, C, out, OC, 0.f, bias);
}

absl::Status MatmulBiasGeluForward(Context& ctx, float* pre, float* out, const float* inp, const float* weight,
                                   const float* bias, int N, int C, int OC) {
  if (auto s = MatmulForward(ctx, pre, inp, weight, bias, N, C, OC); !s.ok()) return s;
  return GeluForward(out, pre, static_cast<int64_t>(N) * OC, ctx.stream());
}

absl::Status MatmulBackward(Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, int N, int C, int OC, kernels::WeightLayout layout,
                            const float* gelu_pre) {
  if (auto s = CheckShape("MatmulBackward", N, C, OC); !s.ok()) return s;
  const bool outin = layout == kernels::WeightLayout::kOutIn;
  if (dinp != nullptr) {
    // dinp^T (C, N) = W'' (C, OC) @ dout^T (OC, N)
    if (auto s = Gemm(ctx, !outin, false, C, N, OC, weight, outin ? C : OC, dout, OC, dinp, C, 0.f, nullptr); !s.ok()) {
      return s;
    }
    if (gelu_pre != nullptr) {
      const int64_t n = static_cast<int64_t>(N) * C;
      GANTRY_LAUNCH(GeluBackwardInPlaceKernel, CeilDiv(n, 256), 256, 0, ctx.stream())(dinp, gelu_pre, n);
      CUDA_RETURN_IF_ERROR(cudaGetLastError());
    }
  }
  if (outin) {
    // dW (OC, C) row-major = (C, OC) column-major = inp^T (C, N) @ dout (N, OC)
    if (auto s = Gemm(ctx, false, true, C, OC, N, inp, C, dout, OC, dweight, C, 1.f, nullptr); !s.ok()) return s;
  } else {
    // dW (C, OC) row-major = (OC, C) column-major = dout^T (OC, N) @ inp (N, C)
    if (auto s = Gemm(ctx, false, true, OC, C, N, dout, OC, inp, C, dweight, OC, 1.f, nullptr); !s.ok()) return s;
  }
  if (dbias != nullptr) return ColumnSums(ctx, dbias, nullptr, Rows{dout, OC}, N, OC);
  return absl::OkStatus();
}

}  // namespace gantry::GANTRY_CUDA_NS
