#include "kernels/cpu/gemm16.h"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cpu/blocks.h"
#include "kernels/cpu/gemm16_paths.h"

namespace gantry::kernels {
namespace {

// Below this many multiply-adds a GEMM runs on the calling thread (as kernels/cpu/matmul.cc).
constexpr int64_t kSmallWork = int64_t{1} << 18;

// The number of threads a GEMM uses: the process's OpenMP threads, or 1 inside a parallel
// region (the contract says not to call it there; this keeps such a call correct).
int Threads(int64_t work) {
  if (omp_in_parallel() || work < kSmallWork) return 1;
  return omp_get_max_threads();
}

// C (M,N) *= beta (beta 0: C = 0, whatever C held), for K == 0.
void ScaleC(int M, int N, float beta, float* C, int ldc) {
  for (int m = 0; m < M; ++m) {
    float* c = C + static_cast<int64_t>(m) * ldc;
    if (beta == 0.f) {
      std::fill(c, c + N, 0.f);
    } else {
      for (int n = 0; n < N; ++n) c[n] *= beta;
    }
  }
}

// ---------------------------------------------------------------------------------------
// The convert path: widen to fp32, then per-thread slices of single-threaded sgemm.

// in (n) 16-bit of type t → out (n) fp32, exactly (every bf16 and fp16 value is an fp32).
void WidenRow(const uint16_t* in, float* out, int n, Precision t) {
  int i = 0;
  if (t == Precision::kFp16) {
    for (; i + 8 <= n; i += 8) {  // F16C (x86-64-v3)
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
    }
    for (; i < n; ++i) out[i] = _cvtsh_ss(in[i]);
  } else {
    for (; i + 8 <= n; i += 8) {  // bf16 is the upper half of an fp32
      const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
      _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
    for (; i < n; ++i) out[i] = FloatOfBf16(in[i]);
  }
}

// The GEMMs with nothing to sum (M, N or K zero): C = beta C where K is 0, `after` over the
// rows. Whether it was one.
bool EmptyGemm(int M, int N, int K, float beta, float* C, int ldc, const std::function<void(int, int)>& after) {
  if (M > 0 && N > 0 && K > 0) return false;
  if (M > 0 && N > 0) ScaleC(M, N, beta, C, ldc);
  if (M > 0 && after) after(0, M);
  return true;
}

// Rows [r0, r1) and columns [c0, c1) of a 16-bit matrix of leading dimension ld, widened into
// dst as a dense (r1 - r0, c1 - c0) fp32 matrix.
void WidenBlock(const uint16_t* src, int ld, int r0, int r1, int c0, int c1, float* dst, Precision t) {
  for (int r = r0; r < r1; ++r) {
    WidenRow(src + static_cast<int64_t>(r) * ld + c0, dst + static_cast<int64_t>(r - r0) * (c1 - c0), c1 - c0, t);
  }
}

// The fp32 room of the widened operands: a K-chunk of the operand every block shares is at
// most about this many floats (16 MB), so the path's memory does not grow with a GEMM's size
// (the classifier's operands are hundreds of MB in fp32).
constexpr int64_t kWideFloats = int64_t{1} << 22;

}  // namespace

void gemm16_convert(bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda,
                    const uint16_t* B, int ldb, float beta, float* C, int ldc, Precision t,
                    const std::function<void(int, int)>& after, int64_t wide_floats) {
  // A (M,K) or stored (K,M), B (K,N) or stored (N,K) → C (M,N)
  if (EmptyGemm(M, N, K, beta, C, ldc, after)) return;
  const CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE TB = tb ? CblasTrans : CblasNoTrans;
  const int nt = Threads(static_cast<int64_t>(M) * N * K);
  // The output is cut into blocks of rows (or of columns, whichever dimension is larger) that
  // depend on the shape only (kernels/cpu/blocks.h), one sgemm call each, shared out over the
  // threads.
  const bool split_rows = M >= N;
  const int total = split_rows ? M : N;
  const int nb = ShapeBlocks(total);
  // K is cut into chunks, also by the shape only, so that a chunk of the shared operand (B when
  // the rows are split, A when the columns are) fits kWideFloats: it is widened once per chunk
  // by the whole team, each block widens its own part, and the chunks' products add up in C
  // (beta for the first, 1 after).
  const int shared = split_rows ? N : M;
  const int64_t room = wide_floats > 0 ? wide_floats : kWideFloats;
  const int kc = static_cast<int>(std::min<int64_t>(K, std::max<int64_t>(16, room / shared / 16 * 16)));
  const int block = (total + nb - 1) / nb + 16;  // the largest block's extent (Slice's edges on multiples of 16)
  std::vector<float> wide_shared(static_cast<size_t>(shared) * kc);
  float* sh = wide_shared.data();
#pragma omp parallel num_threads(nt)
  {
    static thread_local std::vector<float> own;  // this thread's block part of a chunk
    own.resize(static_cast<size_t>(block) * kc);
    float* mine = own.data();
    for (int k0 = 0; k0 < K; k0 += kc) {
      const int k1 = std::min(K, k0 + kc), w = k1 - k0;
      const float bk = k0 == 0 ? beta : 1.f;
      // The shared operand's chunk, dense: B rows [k0, k1) (tb: B's rows are N, its columns
      // the chunk), or A's.
#pragma omp for schedule(static)
      for (int r = 0; r < (split_rows ? (tb ? N : w) : (ta ? w : M)); ++r) {
        if (split_rows) {
          tb ? WidenBlock(B, ldb, r, r + 1, k0, k1, sh + static_cast<int64_t>(r) * w, t)
             : WidenBlock(B, ldb, k0 + r, k0 + r + 1, 0, N, sh + static_cast<int64_t>(r) * N, t);
        } else {
          ta ? WidenBlock(A, lda, k0 + r, k0 + r + 1, 0, M, sh + static_cast<int64_t>(r) * M, t)
             : WidenBlock(A, lda, r, r + 1, k0, k1, sh + static_cast<int64_t>(r) * w, t);
        }
      }  // (the loop's barrier: the chunk is whole before any block reads it)
#pragma omp for schedule(static)
      for (int b = 0; b < nb; ++b) {
        int i0, i1;
        Slice(total, b, nb, 16, &i0, &i1);
        if (i1 <= i0) continue;
        const int n = i1 - i0;
        if (split_rows) {  // A's rows [i0, i1) of the chunk: (n, w), or stored (w, n)
          ta ? WidenBlock(A, lda, k0, k1, i0, i1, mine, t) : WidenBlock(A, lda, i0, i1, k0, k1, mine, t);
          cblas_sgemm(CblasRowMajor, TA, TB, n, N, w, 1.f, mine, ta ? n : w, sh, tb ? w : N, bk,
                      C + static_cast<int64_t>(i0) * ldc, ldc);
          if (after && k1 == K) after(i0, i1);
        } else {  // B's columns [i0, i1) of the chunk: (w, n), or stored (n, w)
          tb ? WidenBlock(B, ldb, i0, i1, k0, k1, mine, t) : WidenBlock(B, ldb, k0, k1, i0, i1, mine, t);
          cblas_sgemm(CblasRowMajor, TA, TB, M, n, w, 1.f, sh, ta ? M : w, mine, tb ? w : n, bk, C + i0, ldc);
        }
      }  // (its barrier: every block is done with the chunk before the next is widened)
    }
  }
  if (!split_rows && after) after(0, M);
}

// ---------------------------------------------------------------------------------------
// The native path: VDPBF16PS (AVX512_BF16), compiled for that ISA only here and chosen at
// run time, so the rest of the build stays x86-64-v3.
//
// VDPBF16PS adds to each fp32 lane i the two products a[2i] b[2i] + a[2i+1] b[2i+1] of bf16
// pairs. So both operands are laid out in pairs along K: a 32-bit word holds (x[k], x[k+1]),
// k even, the lower address in the lower half. A tile of kMr x kNr outputs lives in 24 zmm
// accumulators; per pair of k it takes kMr broadcasts of A's word and 3 loads of B's packed
// words (16 columns each).
//
// Determinism: every output element is one lane's chain of VDPBF16PS over k = 0, 2, 4, ...
// in order, started from beta * C (or 0); K is cut into blocks of kKc at fixed offsets from 0,
// and the partial value goes through C (an exact fp32 store and reload) between blocks. No
// step depends on which tile, slice or thread computes the element, so neither does the
// result.
namespace {

constexpr int kMr = 8;     // rows of a kernel tile
constexpr int kNr = 48;    // columns of a kernel tile: 3 zmm of 16 fp32
constexpr int kKc = 384;   // K block (192 pairs): B's tile panel, 192 x 48 words = 36 KiB, in L1
constexpr int kMc = 256;   // rows of A per block (192 KiB of A's pairs per K block, in L2)
constexpr int kNc = 1536;  // columns of B per packed block (1.1 MiB of pairs)

#define GANTRY_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

inline uint32_t Load32(const uint16_t* p) {
  uint32_t w;
  std::memcpy(&w, p, sizeof(w));
  return w;
}
inline uint32_t Pair(uint16_t lo, uint16_t hi) { return lo | static_cast<uint32_t>(hi) << 16; }

// How a tile's accumulators start in the first K block: 0 (beta 0), C, or beta * C.
// Later K blocks always start from C.
enum class Start { kZero, kLoad, kScale };

// One tile: C (kMr, kNr) (ldc) = start + sum over np pairs. A's pair p of row r is the word
// at a + r * a_row + p * a_pair (uint16 offsets): A itself (a_row = lda, a_pair = 2) or a
// packed panel (a_row = 2, a_pair = 2 kMr). bp: B's packed panel, np x kNr words.
GANTRY_BF16_TARGET
void Tile(int np, const uint16_t* a, int64_t a_row, int64_t a_pair, const uint32_t* bp,
          float* c, int64_t ldc, Start start, float beta) {
  __m512 acc[kMr][3];
  if (start == Start::kZero) {
#pragma GCC unroll 8
    for (int r = 0; r < kMr; ++r) {
      for (int j = 0; j < 3; ++j) acc[r][j] = _mm512_setzero_ps();
    }
  } else {
    const __m512 vb = _mm512_set1_ps(beta);
#pragma GCC unroll 8
    for (int r = 0; r < kMr; ++r) {
      for (int j = 0; j < 3; ++j) {
        acc[r][j] = _mm512_loadu_ps(c + r * ldc + 16 * j);
        if (start == Start::kScale) acc[r][j] = _mm512_mul_ps(acc[r][j], vb);
      }
    }
  }
  // Rows r and r + 4 addressed from two pointers and the strides s, 3s (x86 addressing
  // scales s by 1, 2, 4), so that the loop needs few general registers and no accumulator
  // is spilled.
  const uint16_t* a0 = a;
  const uint16_t* a4 = a + 4 * a_row;
  const int64_t s3 = 3 * a_row;
  for (int p = 0; p < np; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + 16);
    const __m512bh b2 = (__m512bh)_mm512_loadu_si512(bp + 32);
    bp += kNr;
    const uint16_t* row[kMr] = {a0, a0 + a_row, a0 + 2 * a_row, a0 + s3,
                                a4, a4 + a_row, a4 + 2 * a_row, a4 + s3};
    a0 += a_pair;
    a4 += a_pair;
#pragma GCC unroll 8
    for (int r = 0; r < kMr; ++r) {
      const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(Load32(row[r])));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], x, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], x, b1);
      acc[r][2] = _mm512_dpbf16_ps(acc[r][2], x, b2);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kMr; ++r) {
    for (int j = 0; j < 3; ++j) _mm512_storeu_ps(c + r * ldc + 16 * j, acc[r][j]);
  }
}

// A tile at the edge of C (rows < kMr or cols < kNr): the same arithmetic on a full tile in a
// local buffer (A's missing rows and B's missing columns are packed as zeros), then the valid
// part copied out.
GANTRY_BF16_TARGET
void EdgeTile(int np, const uint16_t* a, int64_t a_row, int64_t a_pair, const uint32_t* bp,
              float* c, int64_t ldc, int rows, int cols, Start start, float beta) {
  alignas(64) float buf[kMr * kNr] = {};
  if (start != Start::kZero) {
    for (int r = 0; r < rows; ++r) std::memcpy(buf + r * kNr, c + r * ldc, cols * sizeof(float));
  }
  Tile(np, a, a_row, a_pair, bp, buf, kNr, start, beta);
  for (int r = 0; r < rows; ++r) std::memcpy(c + r * ldc, buf + r * kNr, cols * sizeof(float));
}

// B's block (k0.., kc) x (j0.., nc) → bp: panels of kNr columns, each np x kNr words of
// pairs (k, k+1); columns past nc and the k past kc (odd kc) are zeros.
// B (K,N), or stored (N,K) when tb.
GANTRY_BF16_TARGET
void PackB(bool tb, const uint16_t* B, int64_t ldb, int k0, int kc, int j0, int nc, uint32_t* bp) {
  const int np = (kc + 1) / 2;
  for (int q = 0; q * kNr < nc; ++q) {
    uint32_t* out = bp + static_cast<int64_t>(q) * np * kNr;
    const int cols = std::min(kNr, nc - q * kNr);
    const int jq = j0 + q * kNr;
    if (!tb) {
      for (int p = 0; p < np; ++p) {
        const uint16_t* b0 = B + (k0 + 2 * p) * ldb + jq;
        uint32_t* o = out + p * kNr;
        if (2 * p + 1 < kc && cols == kNr) {
          const uint16_t* b1 = b0 + ldb;
          for (int j = 0; j < kNr; j += 16) {  // interleave 16 columns of rows k and k+1
            // (The maskz forms: GCC 12 warns about the plain ones' undefined pass-through.)
            const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + j));
            const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + j));
            const __m512i lo = _mm512_maskz_cvtepu16_epi32(0xffff, x0);
            const __m512i hi = _mm512_maskz_cvtepu16_epi32(0xffff, x1);
            _mm512_storeu_si512(o + j, _mm512_or_si512(lo, _mm512_maskz_slli_epi32(0xffff, hi, 16)));
          }
        } else {
          for (int j = 0; j < kNr; ++j) {
            o[j] = j >= cols ? 0 : Pair(b0[j], 2 * p + 1 < kc ? b0[ldb + j] : 0);
          }
        }
      }
    } else {
      // Column j's pairs are consecutive words of B's row jq + j: a transpose.
      for (int j = 0; j < kNr; ++j) {
        const uint16_t* b = B + static_cast<int64_t>(jq + j) * ldb + k0;
        if (j >= cols) {
          for (int p = 0; p < np; ++p) out[p * kNr + j] = 0;
          continue;
        }
        const int full = kc / 2;
        for (int p = 0; p < full; ++p) out[p * kNr + j] = Load32(b + 2 * p);
        if (full < np) out[full * kNr + j] = Pair(b[2 * full], 0);
      }
    }
  }
}

// A's rows (i0.., rows <= kMr) over (k0.., kc) → ap: np x kMr words of pairs (k, k+1); rows
// past `rows` and the k past kc are zeros. A (M,K), or stored (K,M) when ta.
GANTRY_BF16_TARGET
void PackA(bool ta, const uint16_t* A, int64_t lda, int i0, int rows, int k0, int kc, uint32_t* ap) {
  const int np = (kc + 1) / 2;
  for (int p = 0; p < np; ++p) {
    const int k = k0 + 2 * p;
    const bool hi = 2 * p + 1 < kc;
    uint32_t* o = ap + p * kMr;
    if (ta && hi && rows == kMr) {  // rows k and k+1 of the stored (K,M), 8 columns each
      const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(A + k * lda + i0));
      const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(A + (k + 1) * lda + i0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm_unpacklo_epi16(x0, x1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 4), _mm_unpackhi_epi16(x0, x1));
      continue;
    }
    for (int r = 0; r < kMr; ++r) {
      if (r >= rows) {
        o[r] = 0;
      } else if (ta) {
        o[r] = Pair(A[k * lda + i0 + r], hi ? A[(k + 1) * lda + i0 + r] : 0);
      } else {
        const uint16_t* x = A + static_cast<int64_t>(i0 + r) * lda + k;
        o[r] = Pair(x[0], hi ? x[1] : 0);
      }
    }
  }
}

// Per-thread packing buffers, kept between calls (64-byte aligned).
struct PackBuffers {
  std::vector<uint32_t> a, b;
};
PackBuffers& ThreadPackBuffers() {
  static thread_local PackBuffers buffers;
  return buffers;
}

// One thread's block of C: rows [m0, m0 + m), columns [n0, n0 + n), all of K.
GANTRY_BF16_TARGET
void NativeBlock(bool ta, bool tb, int m0, int m, int n0, int n, int K, const uint16_t* A,
                 int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  PackBuffers& buf = ThreadPackBuffers();
  const int np_max = kKc / 2;
  const size_t b_words = static_cast<size_t>((std::min(n, kNc) + kNr - 1) / kNr) * np_max * kNr;
  const size_t a_words = static_cast<size_t>(kMc / kMr) * np_max * kMr;
  if (buf.b.size() < b_words) buf.b.resize(b_words);
  if (buf.a.size() < a_words) buf.a.resize(a_words);
  for (int jc = 0; jc < n; jc += kNc) {
    const int nc = std::min(kNc, n - jc);
    for (int pc = 0; pc < K; pc += kKc) {
      const int kc = std::min(kKc, K - pc), np = (kc + 1) / 2;
      const Start start = pc > 0 ? Start::kLoad
                          : beta == 0.f ? Start::kZero
                          : beta == 1.f ? Start::kLoad
                                        : Start::kScale;
      PackB(tb, B, ldb, pc, kc, n0 + jc, nc, buf.b.data());
      // A is read in place when its pairs are consecutive words (row-major, whole pairs);
      // otherwise (transposed, an odd last block, the last rows) it is packed.
      const bool direct = !ta && kc % 2 == 0;
      for (int ic = 0; ic < m; ic += kMc) {
        const int mc = std::min(kMc, m - ic);
        for (int ir = 0; ir < mc; ir += kMr) {
          const int rows = std::min(kMr, mc - ir);
          if (!direct || rows < kMr) {
            PackA(ta, A, lda, m0 + ic + ir, rows, pc, kc,
                  buf.a.data() + static_cast<int64_t>(ir / kMr) * np * kMr);
          }
        }
        for (int jr = 0; jr < nc; jr += kNr) {
          const int cols = std::min(kNr, nc - jr);
          const uint32_t* bp = buf.b.data() + static_cast<int64_t>(jr / kNr) * np * kNr;
          for (int ir = 0; ir < mc; ir += kMr) {
            const int rows = std::min(kMr, mc - ir);
            const int i = m0 + ic + ir;
            float* c = C + i * ldc + n0 + jc + jr;
            const uint16_t* a;
            int64_t a_row, a_pair;
            if (direct && rows == kMr) {
              a = A + i * lda + pc;
              a_row = lda;
              a_pair = 2;
            } else {
              a = reinterpret_cast<const uint16_t*>(buf.a.data() + static_cast<int64_t>(ir / kMr) * np * kMr);
              a_row = 2;
              a_pair = 2 * kMr;
            }
            if (rows == kMr && cols == kNr) {
              Tile(np, a, a_row, a_pair, bp, c, ldc, start, beta);
            } else {
              EdgeTile(np, a, a_row, a_pair, bp, c, ldc, rows, cols, start, beta);
            }
          }
        }
      }
    }
  }
}

bool CpuHasAvx512Bf16() {
  // __builtin_cpu_supports checks cpuid and that the OS saves the AVX-512 state (XCR0).
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512bf16");
  return has;
}

}  // namespace

bool gemm16_native_supported(Precision t) { return t == Precision::kBf16 && CpuHasAvx512Bf16(); }

const char* gemm16_native_unsupported_reason(Precision t) {
  if (t != Precision::kBf16) return "no native path for this type (fp16 is widened to fp32 on every CPU)";
  if (!CpuHasAvx512Bf16()) {
    return "this CPU has no AVX512_BF16 (cpuid), or the OS does not save the AVX-512 state";
  }
  return "";
}

void gemm16_native(bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda,
                   const uint16_t* B, int ldb, float beta, float* C, int ldc, Precision t,
                   const std::function<void(int, int)>& after) {
  // A (M,K) or stored (K,M), B (K,N) or stored (N,K) → C (M,N)
  if (!gemm16_native_supported(t)) {
    std::fprintf(stderr, "gemm16_native: %s\n", gemm16_native_unsupported_reason(t));
    std::abort();
  }
  if (EmptyGemm(M, N, K, beta, C, ldc, after)) return;
  const int nt = Threads(static_cast<int64_t>(M) * N * K);
  const bool split_rows = M >= N;
#pragma omp parallel num_threads(nt)
  {
    int i0, i1;
    Slice(split_rows ? M : N, omp_get_thread_num(), omp_get_num_threads(), split_rows ? 16 : kNr, &i0, &i1);
    if (i1 > i0) {
      if (split_rows) {
        NativeBlock(ta, tb, i0, i1 - i0, 0, N, K, A, lda, B, ldb, beta, C, ldc);
        if (after) after(i0, i1);
      } else {
        NativeBlock(ta, tb, 0, M, i0, i1 - i0, K, A, lda, B, ldb, beta, C, ldc);
      }
    }
  }
  if (!split_rows && after) after(0, M);
}

namespace {

// GANTRY_GEMM16=convert forces the convert path (read once); anything else, or unset, lets
// gemm16 take the native path where the CPU has it.
bool ForcedConvert() {
  static const bool forced = [] {
    const char* v = std::getenv("GANTRY_GEMM16");
    return v != nullptr && std::strcmp(v, "convert") == 0;
  }();
  return forced;
}

bool UseNative(Precision t) { return !ForcedConvert() && gemm16_native_supported(t); }

}  // namespace

void gemm16(bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
            float beta, float* C, int ldc, Precision t, const std::function<void(int, int)>& after) {
  // A (M,K) or stored (K,M), B (K,N) or stored (N,K) → C (M,N)
  if (t == Precision::kFp32) {
    std::fprintf(stderr, "gemm16: the inputs must be kBf16 or kFp16\n");
    std::abort();
  }
  if (UseNative(t)) {
    gemm16_native(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, t, after);
  } else {
    gemm16_convert(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, t, after);
  }
}

const char* gemm16_path(Precision t) { return UseNative(t) ? "own avx512_bf16" : "convert+sgemm"; }

}  // namespace gantry::kernels
