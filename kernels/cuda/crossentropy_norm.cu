// The fused classifier (softmax + cross-entropy + its gradient) and the gradient norm on the
// GPU, the twins of kernels/cpu/crossentropy.cc and kernels/cpu/grad_norm.cc.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"

namespace gantry::cuda {
namespace {

constexpr int kRowThreads = 1024;

// One block per row: the max, the sum of exponentials, the loss; with grad, the row is
// overwritten by (softmax - onehot) * dloss.
template <bool kGrad>
__global__ void CrossEntropyKernel(float* losses, float* logits, const int32_t* targets, float dloss, int V) {
  float* x = logits + static_cast<int64_t>(blockIdx.x) * V;
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, x[i]);
  mx = BlockMax(mx);
  float s = 0.f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(x[i] - mx);
  s = BlockSum(s);
  const int target = targets[blockIdx.x];
  const float xt = x[target];
  __syncthreads();  // every thread has read x[target] before the row is overwritten
  if (threadIdx.x == 0) losses[blockIdx.x] = logf(s) + mx - xt;
  if (!kGrad) return;
  const float inv = 1.f / s;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    x[i] = (expf(x[i] - mx) * inv - (i == target ? 1.f : 0.f)) * dloss;
  }
}

__global__ void SumSquaresPartialKernel(float* partial, const float* g, int64_t n) {
  float s = 0.f;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    s += g[i] * g[i];
  }
  s = BlockSum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void SumSquaresFinishKernel(double* result, const float* partial, int blocks) {
  if (threadIdx.x != 0) return;
  double s = 0.0;
  for (int b = 0; b < blocks; ++b) s += partial[b];
  *result = s;
}

absl::Status CheckRows(const char* op, int N, int V) {
  if (N <= 0 || V <= 0) return absl::InvalidArgumentError(absl::StrCat(op, ": bad shape (", N, ", ", V, ")"));
  return absl::OkStatus();
}

}  // namespace

absl::Status CrossEntropyForward(Context& ctx, float* losses, const float* logits, const int32_t* targets, int N,
                                 int V) {
  if (auto s = CheckRows("CrossEntropyForward", N, V); !s.ok()) return s;
  // The forward-only kernel never writes the row.
  CrossEntropyKernel<false><<<N, kRowThreads, 0, ctx.stream()>>>(losses, const_cast<float*>(logits), targets, 0.f, V);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status CrossEntropyFusedForwardBackward(Context& ctx, float* losses, float* logits, const int32_t* targets,
                                              float dloss, int N, int V) {
  if (auto s = CheckRows("CrossEntropyFusedForwardBackward", N, V); !s.ok()) return s;
  CrossEntropyKernel<true><<<N, kRowThreads, 0, ctx.stream()>>>(losses, logits, targets, dloss, V);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status SumSquares(Context& ctx, double* result, const float* g, int64_t N) {
  if (N < 0) return absl::InvalidArgumentError("SumSquares: negative length");
  const int blocks = static_cast<int>(std::min<int64_t>(1024, std::max<int64_t>(1, (N + 1023) / 1024)));
  SumSquaresPartialKernel<<<blocks, 1024, 0, ctx.stream()>>>(ctx.scratch(), g, N);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  SumSquaresFinishKernel<<<1, 32, 0, ctx.stream()>>>(result, ctx.scratch(), blocks);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace gantry::cuda
