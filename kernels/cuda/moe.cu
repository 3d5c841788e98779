// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// The mixture-of-experts ops on the GPU, the twins of kernels/cpu/moe.cc (kernels/moe.h states
// each op). fp32 and deterministic: no atomics, every sum in a fixed order.
//
// What equals the CPU's bits: the routing's integers (choice, slot, counts), and, in the
// emulated build, the router's floats: a token's softmax, top k, weights and backward are its
// lane group's, the row's max and sums taken by every lane value by value in the CPU's order,
// the rest elementwise (on a GPU expf and logf are within 2 ulp of glibc's, and nvcc contracts
// a * b + c into an fma). The copies and the sums in rank order (dispatch, combine, dispatch
// backward) are the CPU's too; the combine backward's dot product over C is a block's
// fixed-order sum; the losses' double sums are in another fixed order than the CPU's, so they
// round to the same float or one ulp apart.
//
// Capacity. An expert keeps its first `capacity` assignments in priority order (position
// q = j N + n is assignment (n, j)): an assignment's rank among those choosing its expert is a
// per-expert prefix count, done in chunks of kChunk positions: each chunk's count per expert
// (MoeChunkKernel), an exclusive scan of those over the chunks per expert (MoeScanKernel),
// then each chunk again, from its base, giving the slots (MoeChunkKernel once more). The
// chunks' counts live in the context's scratch, with the losses' double partial sums.
//
// On an H200: route 62 us for N 8192, E 8, k 2; 111 us for 16384, 64, 2; 1.8 ms for 250000,
// 128, 4. The row ops move their rows at 2-3 TB/s.
#include "kernels/cuda/ns.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/moe.h"

namespace gantry::GANTRY_CUDA_NS {
namespace {

constexpr int kTokenThreads = 256;  // the router kernels' block: a group of lanes a token
constexpr int kChunk = 256;         // priority positions a chunk, and MoeChunkKernel's block
constexpr int kScanThreads = 1024;  // MoeScanKernel's block
constexpr int kSumThreads = 256;    // MoeSumsKernel's block, and MoeFinishKernel's

// The router kernels' lanes a token: E rounded up to a power of two, at most a warp.
int TokenLanes(int E) {
  int L = 1;
  while (L < E && L < 32) L *= 2;
  return L;
}

// A token's group of L lanes (a power of two, at most 32: within one warp) in a block of the
// router kernels: its token, this thread's lane in it, and the group's lanes as a warp mask.
struct TokenGroup {
  int n, lane, first;
  unsigned mask;
};
__device__ inline TokenGroup GroupOf(int L) {
  const int lane = threadIdx.x % L, first = threadIdx.x - lane;
  const unsigned mask = L == 32 ? 0xffffffffu : ((1u << L) - 1) << (first % 32);
  return {static_cast<int>(blockIdx.x * (blockDim.x / L) + threadIdx.x / L), lane, first, mask};
}

// (p, e) comes before (q, f) in the routing's order: the larger probability first, the lower
// index among equals (and any before nothing, f < 0). A total order on a row's (probability,
// expert) pairs: a row's probabilities are all numbers or all NaN (a NaN makes the sum NaN),
// and on an all-NaN row it is the index order, as the CPU's scan takes them.
__device__ inline bool Before(float p, int e, float q, int f) {
  if (f < 0) return e >= 0;
  if (e < 0) return false;
  return p > q || (!(q > p) && e < f);
}

// A group of L lanes per token n (TokenGroup; blockDim kTokenThreads): probs[n] =
// softmax(logits[n]) (in place allowed), lse[n], the top k (the CPU's choice: rank j the first in
// Before's order of those after rank j - 1's), their renormalised weights. The row's max and
// sum are the CPU's, in its order: every lane takes the row's values one by one (broadcast
// loads), so that the probabilities, and with them the choices, are the CPU's bits; elementwise
// work is by lanes. Each rank: each lane's first of its own experts, then the group's first of
// the lanes' (through shared memory: a shuffle's barriers cost the emulator more than the loop).
__global__ void MoeSoftmaxTopKKernel(float* probs, float* lse, int32_t* choice, float* weight, const float* logits, int N,
                                     int E, int k, int L) {
  __shared__ float cand_p[kTokenThreads];
  __shared__ int cand_e[kTokenThreads];
  const TokenGroup g = GroupOf(L);
  const int n = g.n, lane = g.lane;
  if (n >= N) return;  // the whole group
  const float* l = logits + static_cast<int64_t>(n) * E;
  float* p = probs + static_cast<int64_t>(n) * E;
  float mx = l[0];
  for (int e = 1; e < E; ++e) mx = mx < l[e] ? l[e] : mx;  // std::max's choice, NaN included
  __syncwarp(g.mask);  // every lane has read the logits before they become probabilities
  for (int e = lane; e < E; e += L) p[e] = expf(l[e] - mx);
  __syncwarp(g.mask);
  float sum = 0.f;
  for (int e = 0; e < E; ++e) sum += p[e];
  __syncwarp(g.mask);  // every lane has read the exponentials before they are scaled
  if (lane == 0) lse[n] = mx + logf(sum);
  const float inv = 1.f / sum;
  for (int e = lane; e < E; e += L) p[e] *= inv;
  int32_t* c = choice + static_cast<int64_t>(n) * k;
  const int lanes = E < L ? E : L;  // the lanes holding experts
  float chosen = 0.f, prev_p = 0.f;
  int prev_e = -1;
  for (int j = 0; j < k; ++j) {
    float bp = 0.f;
    int be = -1;
    for (int e = lane; e < E; e += L) {  // this lane's own probabilities
      if (j > 0 && !Before(prev_p, prev_e, p[e], e)) continue;  // taken: at or before rank j - 1
      if (be < 0 || p[e] > bp) {
        bp = p[e];
        be = e;
      }
    }
    cand_p[threadIdx.x] = bp;
    cand_e[threadIdx.x] = be;
    __syncwarp(g.mask);
    for (int i = 0; i < lanes; ++i) {
      if (Before(cand_p[g.first + i], cand_e[g.first + i], bp, be)) {
        bp = cand_p[g.first + i];
        be = cand_e[g.first + i];
      }
    }
    __syncwarp(g.mask);  // every lane has read the candidates before the next rank's
    if (lane == 0) c[j] = be;
    chosen += bp;
    prev_p = bp;
    prev_e = be;
  }
  __syncwarp(g.mask);  // the choices and every probability written
  for (int j = lane; j < k; j += L) weight[static_cast<int64_t>(n) * k + j] = p[c[j]] / chosen;
}

// Block (b, g) of an (E + 1, G) grid: partial[b G + g] = the sum over the rows n of its slices
// (kSumThreads rows from g kSumThreads, every G kSumThreads) of probs[n, b] for b < E, of
// lse[n]² for b = E (double: each thread's rows in order, then a fixed tree over the block).
// Blocks next to each other read the same rows' other columns: the L2 keeps them.
__global__ void MoeSumsKernel(double* partial, const float* probs, const float* lse, int N, int E) {
  __shared__ double part[kSumThreads];
  const int b = blockIdx.x, g = blockIdx.y, G = gridDim.y, t = threadIdx.x;
  double s = 0;
  for (int64_t n = static_cast<int64_t>(g) * kSumThreads + t; n < N; n += static_cast<int64_t>(G) * kSumThreads) {
    s += b < E ? static_cast<double>(probs[n * E + b]) : static_cast<double>(lse[n]) * lse[n];
  }
  part[t] = s;
  __syncthreads();
  for (int h = kSumThreads / 2; h > 0; h >>= 1) {
    if (t < h) part[t] += part[t + h];
    __syncthreads();
  }
  if (t == 0) partial[static_cast<int64_t>(b) * G + g] = part[0];
}

// The assignment at priority position q: token q mod N's rank-(q / N) choice.
__device__ inline int64_t AtPosition(int64_t q, int N, int k) { return (q % N) * k + q / N; }

// Block b takes chunk b, positions [b kChunk, (b + 1) kChunk) ∩ [0, N k); thread e (and
// e + kChunk, ...) expert e's assignments there, in order. slot null: count[b, e] := how many
// chose e. Otherwise count[b, e] holds those before the chunk (MoeScanKernel's), and each of
// e's assignments gets its slot: offset[e] + its rank, or -1 from rank `capacity` on.
__global__ void MoeChunkKernel(int32_t* count, int32_t* slot, const int32_t* choice, const int32_t* offset, int N,
                               int E, int k, int capacity) {
  __shared__ int32_t ids[kChunk];
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kChunk, left = static_cast<int64_t>(N) * k - begin;
  const int len = left < kChunk ? static_cast<int>(left) : kChunk;
  if (static_cast<int>(threadIdx.x) < len) ids[threadIdx.x] = choice[AtPosition(begin + threadIdx.x, N, k)];
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += kChunk) {
    int32_t* c = count + static_cast<int64_t>(blockIdx.x) * E + e;
    int32_t rank = slot == nullptr ? 0 : *c;
    for (int i = 0; i < len; ++i) {
      if (ids[i] != e) continue;
      if (slot != nullptr) slot[AtPosition(begin + i, N, k)] = rank < capacity ? offset[e] + rank : -1;
      ++rank;
    }
    if (slot == nullptr) *c = rank;
  }
}

// Block e: count[., e] over the chunks becomes its exclusive prefix sum (e's assignments in
// the chunks before), and routed[e] the total. Each thread a run of chunks; the runs' totals
// scanned in shared memory.
__global__ void MoeScanKernel(int32_t* count, int32_t* routed, int chunks, int E) {
  __shared__ int32_t part[kScanThreads];
  const int e = blockIdx.x, t = threadIdx.x;
  const int per = (chunks + kScanThreads - 1) / kScanThreads;
  const int lo = t * per < chunks ? t * per : chunks, hi = lo + per < chunks ? lo + per : chunks;
  int32_t own = 0;
  for (int c = lo; c < hi; ++c) own += count[static_cast<int64_t>(c) * E + e];
  part[t] = own;
  __syncthreads();
  for (int off = 1; off < kScanThreads; off <<= 1) {  // inclusive scan (Hillis-Steele)
    const int32_t v = t >= off ? part[t - off] : 0;
    __syncthreads();
    part[t] += v;
    __syncthreads();
  }
  int32_t run = part[t] - own;
  for (int c = lo; c < hi; ++c) {
    int32_t* at = count + static_cast<int64_t>(c) * E + e;
    const int32_t here = *at;
    *at = run;
    run += here;
  }
  if (t == kScanThreads - 1) routed[e] = part[t];
}

// One block: each sum's G partials added in order (into partial[b G]), then, by one thread, the
// offsets from routed (counts = routed, offset) and the losses, as the CPU's last loops.
__global__ void MoeFinishKernel(int32_t* counts, float* stats, double* partial, int G, int N, int E, int k,
                                int capacity) {
  for (int b = threadIdx.x; b <= E; b += blockDim.x) {
    double s = partial[static_cast<int64_t>(b) * G];
    for (int g = 1; g < G; ++g) s += partial[static_cast<int64_t>(b) * G + g];
    partial[static_cast<int64_t>(b) * G] = s;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  const int32_t* routed = counts;
  int32_t* offset = counts + E;
  offset[0] = 0;
  double aux = 0;
  for (int e = 0; e < E; ++e) {
    offset[e + 1] = offset[e] + (routed[e] < capacity ? routed[e] : capacity);
    aux += static_cast<double>(routed[e]) / (static_cast<double>(k) * N) * (partial[static_cast<int64_t>(e) * G] / N);
  }
  stats[0] = static_cast<float>(E * aux);
  stats[1] = static_cast<float>(partial[static_cast<int64_t>(E) * G] / N);
}

// The row ops: block n takes token n's row, its threads the columns.

// X[slot[n, j]] = x[n] for each kept j.
__global__ void MoeDispatchKernel(float* X, const float* x, const int32_t* slot, int k, int C) {
  const int64_t n = blockIdx.x;
  for (int j = 0; j < k; ++j) {
    const int32_t s = slot[n * k + j];
    if (s < 0) continue;
    for (int c = threadIdx.x; c < C; c += blockDim.x) X[static_cast<int64_t>(s) * C + c] = x[n * C + c];
  }
}

// y[n] = Σ_j weight[n, j] Y[slot[n, j]] over the kept j, in rank order.
__global__ void MoeCombineKernel(float* y, const float* Y, const int32_t* slot, const float* weight, int k, int C) {
  const int64_t n = blockIdx.x;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < k; ++j) {
      const int32_t s = slot[n * k + j];
      if (s >= 0) acc += weight[n * k + j] * Y[static_cast<int64_t>(s) * C + c];
    }
    y[n * C + c] = acc;
  }
}

// dY[slot[n, j]] = weight[n, j] dy[n]; dweight[n, j] = dy[n] · Y[slot[n, j]] (a block sum), 0
// where dropped. blockDim a multiple of 32 (BlockSum's).
__global__ void MoeCombineBackwardKernel(float* dY, float* dweight, const float* dy, const float* Y,
                                         const int32_t* slot, const float* weight, int k, int C) {
  const int64_t n = blockIdx.x;
  const float* d = dy + n * C;
  for (int j = 0; j < k; ++j) {
    const int64_t a = n * k + j;
    const int32_t s = slot[a];  // the same in every thread: the branch is the block's
    if (s < 0) {
      if (threadIdx.x == 0) dweight[a] = 0.f;
      continue;
    }
    const float w = weight[a];
    float* out = dY + static_cast<int64_t>(s) * C;
    const float* in = Y + static_cast<int64_t>(s) * C;
    float dot = 0.f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      out[c] = w * d[c];
      dot += d[c] * in[c];
    }
    dot = BlockSum(dot);
    if (threadIdx.x == 0) dweight[a] = dot;
  }
}

// dx[n] += Σ_j dX[slot[n, j]] over the kept j, in rank order.
__global__ void MoeDispatchBackwardKernel(float* dx, const float* dX, const int32_t* slot, int k, int C) {
  const int64_t n = blockIdx.x;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = dx[n * C + c];
    for (int j = 0; j < k; ++j) {
      const int32_t s = slot[n * k + j];
      if (s >= 0) acc += dX[static_cast<int64_t>(s) * C + c];
    }
    dx[n * C + c] = acc;
  }
}

// A group of L lanes per token n (as MoeSoftmaxTopKKernel's): dlogits[n] through the
// renormalisation, the load-balancing loss, the softmax and the z-loss: kernels/cpu/moe.cc's
// operations in its order (each sum by every lane, value by value).
__global__ void MoeRouterBackwardKernel(float* dlogits, const float* dweight, const float* probs, const float* lse,
                                        const int32_t* choice, const float* weight, const int32_t* routed, int N,
                                        int E, int k, int L, float aux_scale, float z_scale) {
  const TokenGroup g = GroupOf(L);
  const int n = g.n, lane = g.lane;
  if (n >= N) return;  // the whole group
  const float* p = probs + static_cast<int64_t>(n) * E;
  const int32_t* c = choice + static_cast<int64_t>(n) * k;
  const float* w = weight + static_cast<int64_t>(n) * k;
  const float* dw = dweight + static_cast<int64_t>(n) * k;
  float* dl = dlogits + static_cast<int64_t>(n) * E;
  float S = 0.f, wdw = 0.f;
  for (int j = 0; j < k; ++j) {
    S += p[c[j]];
    wdw += dw[j] * w[j];
  }
  for (int e = lane; e < E; e += L) {
    dl[e] = aux_scale * E * (static_cast<float>(routed[e]) / (static_cast<float>(k) * N)) / N;
  }
  __syncwarp(g.mask);
  if (lane == 0) {
    for (int j = 0; j < k; ++j) dl[c[j]] += (dw[j] - wdw) / S;
  }
  __syncwarp(g.mask);
  float dot = 0.f;
  for (int e = 0; e < E; ++e) dot += p[e] * dl[e];
  __syncwarp(g.mask);  // every lane has read dl before it is overwritten
  const float zl = z_scale * 2.f * lse[n] / N;
  for (int e = lane; e < E; e += L) dl[e] = p[e] * (dl[e] - dot) + zl * p[e];
}

// The row kernels' block: C's columns in warps, at most 256 threads.
int RowThreads(int C) { return C >= 256 ? 256 : static_cast<int>(CeilDiv(C, 32)) * 32; }

// A row op: its dimensions checked (N tokens, k choices, C columns; N k within an int), then
// kernel(args...) with one block per token.
template <typename... Params, typename... Args>
absl::Status LaunchRows(Context& ctx, const char* op, void (*kernel)(Params...), int N, int k, int C, Args... args) {
  RETURN_IF_ERROR(CheckDims(op, {N, k, C, static_cast<int64_t>(N) * k}));
  GANTRY_LAUNCH(kernel, N, RowThreads(C), 0, ctx.stream())(args...);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

absl::Status MoeRoute(Context& ctx, float* probs, float* lse, int32_t* choice, float* weight, int32_t* slot,
                      int32_t* counts, float* stats, const float* logits, int N, int E, int k, int capacity) {
  RETURN_IF_ERROR(CheckDims("MoeRoute", {N, E, k, capacity, static_cast<int64_t>(N) * k, static_cast<int64_t>(N) * E}));
  if (k > E) {
    return absl::InvalidArgumentError(absl::StrCat("MoeRoute: top ", k, " of ", E, " experts, capacity ", capacity));
  }
  // The scratch: the losses' (E + 1, G) double partial sums, then the chunks' (chunks, E) counts.
  const int G = static_cast<int>(std::min<int64_t>(CeilDiv(N, kSumThreads * 16), 128));
  const int chunks = static_cast<int>(CeilDiv(static_cast<int64_t>(N) * k, kChunk));
  const size_t sum_floats = 2 * (static_cast<size_t>(E) + 1) * G, need = sum_floats + static_cast<size_t>(chunks) * E;
  if (need > Context::kScratchFloats) {
    return absl::InvalidArgumentError(absl::StrCat("MoeRoute: ", N, " tokens x ", k, " choices over ", E,
                                                   " experts need ", need, " floats of scratch, more than ",
                                                   Context::kScratchFloats));
  }
  double* partial = reinterpret_cast<double*>(ctx.scratch());
  int32_t* chunk_counts = reinterpret_cast<int32_t*>(ctx.scratch() + sum_floats);
  const int L = TokenLanes(E);
  GANTRY_LAUNCH(MoeSoftmaxTopKKernel, CeilDiv(N, kTokenThreads / L), kTokenThreads, 0, ctx.stream())(
      probs, lse, choice, weight, logits, N, E, k, L);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  GANTRY_LAUNCH(MoeSumsKernel, dim3(E + 1, G), kSumThreads, 0, ctx.stream())(partial, probs, lse, N, E);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  GANTRY_LAUNCH(MoeChunkKernel, chunks, kChunk, 0, ctx.stream())(chunk_counts, nullptr, choice, nullptr, N, E, k,
                                                                 capacity);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  GANTRY_LAUNCH(MoeScanKernel, E, kScanThreads, 0, ctx.stream())(chunk_counts, counts, chunks, E);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  GANTRY_LAUNCH(MoeFinishKernel, 1, kSumThreads, 0, ctx.stream())(counts, stats, partial, G, N, E, k, capacity);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  GANTRY_LAUNCH(MoeChunkKernel, chunks, kChunk, 0, ctx.stream())(chunk_counts, slot, choice, counts + E, N, E, k,
                                                                 capacity);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status MoeDispatch(Context& ctx, float* X, const float* x, const int32_t* slot, int N, int k, int C) {
  return LaunchRows(ctx, "MoeDispatch", MoeDispatchKernel, N, k, C, X, x, slot, k, C);
}

absl::Status MoeCombine(Context& ctx, float* y, const float* Y, const int32_t* slot, const float* weight, int N, int k,
                        int C) {
  return LaunchRows(ctx, "MoeCombine", MoeCombineKernel, N, k, C, y, Y, slot, weight, k, C);
}

absl::Status MoeCombineBackward(Context& ctx, float* dY, float* dweight, const float* dy, const float* Y,
                                const int32_t* slot, const float* weight, int N, int k, int C) {
  return LaunchRows(ctx, "MoeCombineBackward", MoeCombineBackwardKernel, N, k, C, dY, dweight, dy, Y, slot, weight, k,
                    C);
}

absl::Status MoeDispatchBackward(Context& ctx, float* dx, const float* dX, const int32_t* slot, int N, int k, int C) {
  return LaunchRows(ctx, "MoeDispatchBackward", MoeDispatchBackwardKernel, N, k, C, dx, dX, slot, k, C);
}

absl::Status MoeRouterBackward(Context& ctx, float* dlogits, const float* dweight, const float* probs,
                               const float* lse, const int32_t* choice, const float* weight, const int32_t* counts,
                               int N, int E, int k, float aux_scale, float z_scale) {
  RETURN_IF_ERROR(CheckDims("MoeRouterBackward", {N, E, k, static_cast<int64_t>(N) * E}));
  if (k > E) return absl::InvalidArgumentError(absl::StrCat("MoeRouterBackward: top ", k, " of ", E, " experts"));
  const int L = TokenLanes(E);
  GANTRY_LAUNCH(MoeRouterBackwardKernel, CeilDiv(N, kTokenThreads / L), kTokenThreads, 0, ctx.stream())(
      dlogits, dweight, probs, lse, choice, weight, counts, N, E, k, L, aux_scale, z_scale);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace gantry::GANTRY_CUDA_NS
