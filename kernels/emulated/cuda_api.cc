// Over 700 lines: the emulated runtime, cuBLAS and cuBLASLt are one API sharing one state (the
// device and pinned allocations that every copy and library call checks pointers against);
// cuBLASLt's epilogues are the part to move out first if it grows.
#include "kernels/emulated/cuda_api.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cast.h"
#include "kernels/emulated/usage.h"

namespace gantry::emucuda {

struct EmuStream {};
struct EmuEvent {
  std::chrono::steady_clock::time_point at;
  bool recorded = false;
};
struct EmuBlas {};
struct EmuLt {};
struct EmuLtMatmulDesc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // of D's type (the bias gradient's: written)
  const void* aux = nullptr;   // GELU's input, of D's type (GELU_AUX_BIAS: written)
  int64_t aux_ld = 0;
};
struct EmuLtLayout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct EmuLtPreference {
  size_t max_workspace = 0;
  uint32_t min_alignment[4] = {256, 256, 256, 256};  // A, B, C, D: what the algorithms may assume
};

namespace {

using emu::kDeviceBytes;  // what cudaMemGetInfo reports: an H100's
constexpr size_t kAlignment = 256;                 // cudaMalloc's alignment

std::mutex mu;
struct Allocation {
  size_t bytes;
  int device;  // where cudaMalloc made it (the thread's current device), for its usage (usage.h)
};
std::map<uintptr_t, Allocation> allocations;  // base → allocation, under mu
size_t allocated = 0;
std::map<uintptr_t, Allocation> pinned;       // cudaHostAlloc's, likewise
std::atomic<uint64_t> drains{0}, event_waits{0};
thread_local cudaError_t last_error = cudaSuccess;

cudaError_t Fail(cudaError_t e) {
  last_error = e;
  return e;
}

// Whether [p, p + bytes) lies inside one allocation of `in`.
bool Within(const std::map<uintptr_t, Allocation>& in, const void* p, size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> l(mu);
  auto it = in.upper_bound(a);
  if (it == in.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second.bytes;
}
bool InDevice(const void* p, size_t bytes) { return Within(allocations, p, bytes); }
bool InPinned(const void* p, size_t bytes) { return Within(pinned, p, bytes); }

}  // namespace

bool IsDeviceMemory(const void* p, size_t bytes) { return InDevice(p, bytes); }
HostWaits HostWaitsSoFar() { return {drains.load(), event_waits.load()}; }


cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return Fail(cudaErrorInvalidValue);
  void* p = std::aligned_alloc(kAlignment, (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment);
  if (p == nullptr) return Fail(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> l(mu);
  allocations[reinterpret_cast<uintptr_t>(p)] = {bytes, emu::CurrentDevice()};
  allocated += bytes;
  emu::AddAllocated(emu::CurrentDevice(), static_cast<int64_t>(bytes));
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  {
    std::lock_guard<std::mutex> l(mu);
    auto it = allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == allocations.end()) return Fail(cudaErrorInvalidValue);  // not a cudaMalloc base
    allocated -= it->second.bytes;
    emu::AddAllocated(it->second.device, -static_cast<int64_t>(it->second.bytes));
    allocations.erase(it);
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags) {
  if (ptr == nullptr || flags != cudaHostAllocDefault) return Fail(cudaErrorInvalidValue);
  void* p = std::aligned_alloc(kAlignment, (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment);
  if (p == nullptr) return Fail(cudaErrorMemoryAllocation);
  {
    std::lock_guard<std::mutex> l(mu);
    pinned[reinterpret_cast<uintptr_t>(p)] = {bytes, emu::CurrentDevice()};
  }
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr != nullptr && InDevice(ptr, 1)) return Fail(cudaErrorInvalidValue);  // device memory is cudaFree's
  {
    std::lock_guard<std::mutex> l(mu);
    pinned.erase(reinterpret_cast<uintptr_t>(ptr));
  }
  std::free(ptr);
  return cudaSuccess;
}

namespace {
cudaError_t Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return Fail(cudaErrorInvalidValue);
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if ((dst_device && !InDevice(dst, bytes)) || (src_device && !InDevice(src, bytes))) {
    return Fail(cudaErrorInvalidValue);  // a pointer on the wrong side, or a range past its allocation
  }
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes > 0 && kind != cudaMemcpyDeviceToDevice) ++drains;
  return Copy(dst, src, bytes, kind);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  const void* host = kind == cudaMemcpyHostToDevice ? src : kind == cudaMemcpyDeviceToHost ? dst : nullptr;
  if (bytes > 0 && host != nullptr && !InPinned(host, bytes)) ++drains;
  return Copy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  if (!InDevice(ptr, bytes)) return Fail(cudaErrorInvalidValue);
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t) { return cudaMemset(ptr, value, bytes); }

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  std::lock_guard<std::mutex> l(mu);
  *total = kDeviceBytes;
  *free = kDeviceBytes > allocated ? kDeviceBytes - allocated : 0;
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  *stream = new EmuStream();
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  ++drains;
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t event, unsigned) {
  return event == nullptr ? Fail(cudaErrorInvalidResourceHandle) : cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new EmuEvent();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  event->at = std::chrono::steady_clock::now();
  event->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  ++event_waits;
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (start == nullptr || end == nullptr || !start->recorded || !end->recorded) {
    return Fail(cudaErrorInvalidResourceHandle);
  }
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  ++drains;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= kDeviceCount) return Fail(cudaErrorInvalidDevice);
  emu::SetCurrentDevice(device);
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = emu::CurrentDevice();
  return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int* count) {
  *count = kDeviceCount;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= kDeviceCount) return Fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "%s %d", emu::kDeviceModel, device);
  prop->totalGlobalMem = kDeviceBytes;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  return cudaSuccess;
}
cudaError_t cudaGetLastError() { return std::exchange(last_error, cudaSuccess); }
const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
  }
  return "cudaErrorUnknown";
}
const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument (emulated: a pointer on the wrong side of a copy, or past its allocation)";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
  }
  return "unknown error";
}

// --- cuBLAS ---

namespace {

// cuBLAS's argument checks for one column-major GEMM: op(A) (m, k), op(B) (k, n), C (m, n).
bool GemmArgsValid(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, int64_t lda,
                   int64_t ldb, int64_t ldc) {
  if (m < 0 || n < 0 || k < 0) return false;
  const int64_t a_rows = ta == CUBLAS_OP_N ? m : k, b_rows = tb == CUBLAS_OP_N ? k : n;
  return lda >= std::max<int64_t>(1, a_rows) && ldb >= std::max<int64_t>(1, b_rows) && ldc >= std::max<int64_t>(1, m);
}

void Sgemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // C = beta C (cuBLAS reads no A or B)
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        float& c = C[static_cast<int64_t>(j) * ldc + i];
        c = beta == 0.f ? 0.f : beta * c;  // beta 0: C is not read
      }
    }
    return;
  }
  cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
              m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new EmuBlas();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t) {
  return handle == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t) {
  return handle == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long strideA, const float* B, int ldb, long long strideB,
                                         const float* beta, float* C, int ldc, long long strideC, int batch) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (batch < 0 || alpha == nullptr || beta == nullptr || !GemmArgsValid(transa, transb, m, n, k, lda, ldb, ldc)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const emu::BusyScope busy;  // the GEMMs are the device's kernels
  for (int i = 0; i < batch; ++i) {
    Sgemm(transa, transb, m, n, k, *alpha, A + i * strideA, lda, B + i * strideB, ldb, *beta, C + i * strideC, ldc);
  }
  return CUBLAS_STATUS_SUCCESS;
}

// --- cuBLASLt ---

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new EmuLt();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *desc = new EmuLtMatmulDesc{compute, scale};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
  if (desc == nullptr || buf == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
      if (bytes != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
      cublasOperation_t op;
      std::memcpy(&op, buf, bytes);
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? desc->transa : desc->transb) = op;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      if (bytes != sizeof(cublasLtEpilogue_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&desc->epilogue, buf, bytes);
      switch (desc->epilogue) {
        case CUBLASLT_EPILOGUE_DEFAULT:
        case CUBLASLT_EPILOGUE_BIAS:
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
        case CUBLASLT_EPILOGUE_DGELU:
        case CUBLASLT_EPILOGUE_DGELU_BGRAD:
        case CUBLASLT_EPILOGUE_BGRADA:
        case CUBLASLT_EPILOGUE_BGRADB:
          return CUBLAS_STATUS_SUCCESS;
      }
      return CUBLAS_STATUS_NOT_SUPPORTED;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      if (bytes != sizeof(const void*)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&desc->bias, buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      if (bytes != sizeof(const void*)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&desc->aux, buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      if (bytes != sizeof(int64_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&desc->aux_ld, buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (type != CUDA_R_32F && type != CUDA_R_16F && type != CUDA_R_16BF) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (ld < static_cast<int64_t>(std::max<uint64_t>(1, rows))) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new EmuLtLayout{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new EmuLtPreference();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t bytes) {
  if (pref == nullptr || buf == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      if (bytes != sizeof(size_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&pref->max_workspace, buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: {  // no split K here: any mask is kept
      uint32_t mask = 0;
      if (bytes != sizeof(mask)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&mask, buf, bytes);
      return mask & ~static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_MASK) ? CUBLAS_STATUS_INVALID_VALUE
                                                                          : CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      if (bytes != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&pref->min_alignment[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

namespace {

// The shapes of D = op(A) op(B) + C agree (cuBLASLt's check before any algorithm).
bool LtShapesAgree(const EmuLtMatmulDesc& op, const EmuLtLayout& a, const EmuLtLayout& b, const EmuLtLayout& c,
                   const EmuLtLayout& d) {
  const uint64_t m = op.transa == CUBLAS_OP_N ? a.rows : a.cols, ka = op.transa == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t kb = op.transb == CUBLAS_OP_N ? b.rows : b.cols, n = op.transb == CUBLAS_OP_N ? b.cols : b.rows;
  return ka == kb && d.rows == m && d.cols == n && c.rows == m && c.cols == n;
}

// Whether cuBLASLt has the types of A, B, C, D for CUBLAS_COMPUTE_32F with fp32 scale (the
// only compute type the emulated descriptor takes): A and B alike, C and D alike, and the
// output fp32 or the inputs' 16-bit type.
bool LtTypesSupported(const EmuLtLayout& a, const EmuLtLayout& b, const EmuLtLayout& c, const EmuLtLayout& d) {
  if (a.type != b.type || c.type != d.type) return false;
  return d.type == CUDA_R_32F || d.type == a.type;
}

float Load(const void* p, cudaDataType_t t, int64_t i) {
  switch (t) {
    case CUDA_R_16BF:
      return kernels::FloatOfBf16(static_cast<const uint16_t*>(p)[i]);
    case CUDA_R_16F:
      return kernels::FloatOfFp16(static_cast<const uint16_t*>(p)[i]);
    case CUDA_R_32F:
      break;
  }
  return static_cast<const float*>(p)[i];
}

// x stored into element i of p, rounded to nearest even for a 16-bit type.
void Store(void* p, cudaDataType_t t, int64_t i, float x) {
  switch (t) {
    case CUDA_R_16BF:
      static_cast<uint16_t*>(p)[i] = kernels::Bf16Of(x);
      return;
    case CUDA_R_16F:
      static_cast<uint16_t*>(p)[i] = kernels::Fp16Of(x);
      return;
    case CUDA_R_32F:
      break;
  }
  static_cast<float*>(p)[i] = x;
}

// The stored part of a column-major matrix (l's columns of l.ld elements, the last one l.rows)
// widened to fp32, with the same leading dimension.
std::vector<float> Widen(const void* p, const EmuLtLayout& l) {
  std::vector<float> w(l.cols == 0 ? 0 : static_cast<size_t>((l.cols - 1) * l.ld + l.rows));
  for (uint64_t j = 0; j < l.cols; ++j) {
    for (uint64_t i = 0; i < l.rows; ++i) {
      const int64_t at = static_cast<int64_t>(j) * l.ld + static_cast<int64_t>(i);
      w[static_cast<size_t>(at)] = Load(p, l.type, at);
    }
  }
  return w;
}

bool Aligned(const void* p, uint32_t alignment) {
  return alignment == 0 || reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

// The largest power of two up to 256 dividing p's address: what an algorithm chosen for it
// may assume of the pointer the matmul passes there.
uint32_t AlignmentOf(const void* p) {
  uint32_t al = 256;
  while (al > 1 && reinterpret_cast<uintptr_t>(p) % al != 0) al /= 2;
  return al;
}

// cublasLtMatmul's calls per epilogue (LtMatmulsRun).
std::atomic<uint64_t>& LtRuns(cublasLtEpilogue_t e) {
  static std::atomic<uint64_t> runs[8];
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return runs[0];
    case CUBLASLT_EPILOGUE_BIAS: return runs[1];
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return runs[2];
    case CUBLASLT_EPILOGUE_DGELU: return runs[3];
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: return runs[4];
    case CUBLASLT_EPILOGUE_BGRADA: return runs[5];
    case CUBLASLT_EPILOGUE_BGRADB: return runs[6];
  }
  return runs[7];
}

bool GeluEpilogue(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
bool UsesBias(cublasLtEpilogue_t e) { return e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_DGELU; }

// What cuBLASLt documents of an epilogue's arguments before any algorithm: the GELU epilogues'
// aux leading dimension a multiple of 8 and no less than D's rows.
bool EpilogueArgsValid(const EmuLtMatmulDesc& op, const EmuLtLayout& d) {
  if (!GeluEpilogue(op.epilogue)) return true;
  return op.aux_ld % 8 == 0 && op.aux_ld >= static_cast<int64_t>(std::max<uint64_t>(1, d.rows));
}

// cuBLASLt's GELU and its derivative, as the emulation computes them in fp32 on the accumulator.
// cuBLASLt documents the epilogue as "x := GELU(x)" and names no formula; NVIDIA's own users of
// it (Transformer Engine's fused MLP, llm.c) pair it with GELU's tanh form,
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), which is written out here on its own (not the
// model's kernel, kernels/gelu.h), so that the emulation is not checked against itself. The erf
// form differs by up to 4.7e-4; which one and which tanh a GPU's epilogue uses is measured by
// the GPU suite (backend_ops_test's TheGeluAndBiasGradEpiloguesMatchTheCpuBackend on cuda).
float LtGelu(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.f + std::tanh(u));
}
float LtGeluGrad(float x) {
  const float th = std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x));
  const float du = 0.7978845608028654f * (1.f + 3.f * 0.044715f * x * x);
  return 0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * du;
}

// The GELU and bias-gradient epilogues (cuda_api.h): the product alpha op(A) op(B) in fp32 from
// the widened inputs, beta C added in fp32, the epilogue on those fp32 values, and each output
// rounded once to its type (D's). The bias gradient sums in fp32, in order of the reduced index.
void LtMatmulEpilogue(const EmuLtMatmulDesc& op, float al, const void* A, const EmuLtLayout& a, const void* B,
                      const EmuLtLayout& b, float be, const void* C, const EmuLtLayout& c, void* D,
                      const EmuLtLayout& d) {
  const int m = static_cast<int>(d.rows), n = static_cast<int>(d.cols);
  const int k = static_cast<int>(op.transa == CUBLAS_OP_N ? a.cols : a.rows);
  const std::vector<float> wa = Widen(A, a), wb = Widen(B, b);
  std::vector<float> acc(static_cast<size_t>(m) * n, 0.f);
  Sgemm(op.transa, op.transb, m, n, k, al, wa.data(), static_cast<int>(a.ld), wb.data(), static_cast<int>(b.ld), 0.f,
        acc.data(), std::max(m, 1));
  auto* bias = const_cast<void*>(op.bias);
  auto* aux = const_cast<void*>(op.aux);
  std::vector<float> bgrad;
  if (op.epilogue == CUBLASLT_EPILOGUE_BGRADA || op.epilogue == CUBLASLT_EPILOGUE_BGRADB) {
    const bool rows = op.epilogue == CUBLASLT_EPILOGUE_BGRADA;  // op(A)'s rows (m) or op(B)'s columns (n)
    const EmuLtLayout& x = rows ? a : b;
    const std::vector<float>& wx = rows ? wa : wb;
    const bool trans = rows ? op.transa != CUBLAS_OP_N : op.transb != CUBLAS_OP_N;
    bgrad.assign(rows ? m : n, 0.f);
    for (size_t r = 0; r < bgrad.size(); ++r) {
      for (int kk = 0; kk < k; ++kk) {  // op(A)(r, kk) or op(B)(kk, r), stored (r, kk) or (kk, r)
        const bool first_index_r = rows != trans;
        const int64_t i = first_index_r ? static_cast<int64_t>(r) : kk, j = first_index_r ? kk : static_cast<int64_t>(r);
        bgrad[r] += wx[static_cast<size_t>(j * x.ld + i)];
      }
    }
  } else if (op.epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
    bgrad.assign(m, 0.f);
  }
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      const int64_t at = static_cast<int64_t>(j) * d.ld + i, at_aux = static_cast<int64_t>(j) * op.aux_ld + i;
      float x = acc[static_cast<size_t>(j) * m + i];
      if (be != 0.f) x += be * Load(C, c.type, static_cast<int64_t>(j) * c.ld + i);
      switch (op.epilogue) {
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
          x += Load(op.bias, d.type, i);
          Store(aux, d.type, at_aux, x);
          x = LtGelu(x);
          break;
        case CUBLASLT_EPILOGUE_DGELU:
        case CUBLASLT_EPILOGUE_DGELU_BGRAD:
          x *= LtGeluGrad(Load(op.aux, d.type, at_aux));
          if (op.epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD) bgrad[static_cast<size_t>(i)] += x;
          break;
        default:
          break;
      }
      Store(D, d.type, at, x);
    }
  }
  for (size_t r = 0; r < bgrad.size(); ++r) Store(bias, d.type, static_cast<int64_t>(r), bgrad[r]);
}

}  // namespace

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* returned) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (desc == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr || pref == nullptr ||
      requested < 1 || results == nullptr || returned == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!LtShapesAgree(*desc, *a, *b, *c, *d)) return CUBLAS_STATUS_INVALID_VALUE;
  if (!LtTypesSupported(*a, *b, *c, *d)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!EpilogueArgsValid(*desc, *d)) return CUBLAS_STATUS_INVALID_VALUE;
  if (NoAlgorithmFor(desc->epilogue)) {
    *returned = 0;
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  // Up to three offers (as a GPU's heuristic offers several), which compute alike here.
  const int offers = std::min(requested, 3);
  for (int o = 0; o < offers; ++o) {
    cublasLtMatmulHeuristicResult_t* r = results + o;
    std::memset(r, 0, sizeof(*r));
    for (int i = 0; i < 4; ++i) r->algo.data[i] = pref->min_alignment[i];  // what the algorithm assumes
    // The bias's and the aux's: those of the pointers set now (cuBLASLt reads them for that alone).
    if (UsesBias(desc->epilogue)) r->algo.data[4] = AlignmentOf(desc->bias);
    if (GeluEpilogue(desc->epilogue)) r->algo.data[5] = AlignmentOf(desc->aux);
    r->algo.data[6] = static_cast<uint64_t>(o);  // which offer
    r->state = CUBLAS_STATUS_SUCCESS;
    r->wavesCount = 1.f;
  }
  *returned = offers;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void*, size_t, cudaStream_t) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (desc == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr || alpha == nullptr ||
      beta == nullptr || !LtShapesAgree(*desc, *a, *b, *c, *d)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!LtTypesSupported(*a, *b, *c, *d)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (UsesBias(desc->epilogue) && desc->bias == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (GeluEpilogue(desc->epilogue) && desc->aux == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (!EpilogueArgsValid(*desc, *d)) return CUBLAS_STATUS_INVALID_VALUE;
  if (algo != nullptr) {  // the algorithm's assumed alignments (cublasLtMatmulAlgoGetHeuristic's)
    const void* ptrs[6] = {A, B, C, D, desc->bias, desc->aux};
    for (int i = 0; i < 6; ++i) {
      if (!Aligned(ptrs[i], static_cast<uint32_t>(algo->data[i]))) return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  const emu::BusyScope busy;  // the matmul is the device's kernel
  ++LtRuns(desc->epilogue);
  if (desc->epilogue != CUBLASLT_EPILOGUE_DEFAULT && desc->epilogue != CUBLASLT_EPILOGUE_BIAS) {
    LtMatmulEpilogue(*desc, *static_cast<const float*>(alpha), A, *a, B, *b, *static_cast<const float*>(beta), C, *c,
                     D, *d);
    return CUBLAS_STATUS_SUCCESS;
  }
  const int m = static_cast<int>(d->rows), n = static_cast<int>(d->cols);
  const int k = static_cast<int>(desc->transa == CUBLAS_OP_N ? a->cols : a->rows);
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const bool bias = desc->epilogue == CUBLASLT_EPILOGUE_BIAS;
  if (a->type == CUDA_R_32F) {  // fp32 throughout (LtTypesSupported): straight into D
    auto* out = static_cast<float*>(D);
    const auto* in_c = static_cast<const float*>(C);
    if (in_c != out && be != 0.f) {  // D starts as C
      for (int j = 0; j < n; ++j) {
        std::memmove(out + static_cast<int64_t>(j) * d->ld, in_c + static_cast<int64_t>(j) * c->ld, sizeof(float) * m);
      }
    }
    Sgemm(desc->transa, desc->transb, m, n, k, al, static_cast<const float*>(A), static_cast<int>(a->ld),
          static_cast<const float*>(B), static_cast<int>(b->ld), be, out, static_cast<int>(d->ld));
    if (bias) {
      const auto* bv = static_cast<const float*>(desc->bias);
      for (int j = 0; j < n; ++j) {
        for (int i = 0; i < m; ++i) out[static_cast<int64_t>(j) * d->ld + i] += bv[i];
      }
    }
    return CUBLAS_STATUS_SUCCESS;
  }
  // 16-bit A and B: widened (exact), the same fp32 sgemm into an fp32 (m, n) accumulator. An
  // fp32 D: C (beta) and the bias added to it in fp32, stored. A 16-bit D as an H200's cuBLAS 13
  // ran it (docs/perf/gpu.md, "The first run on a GPU"): the product rounded to D's type, and only
  // then C (beta 1) and the bias added, rounded again.
  const std::vector<float> wa = Widen(A, *a), wb = Widen(B, *b);
  std::vector<float> acc(static_cast<size_t>(m) * n, 0.f);
  Sgemm(desc->transa, desc->transb, m, n, k, al, wa.data(), static_cast<int>(a->ld), wb.data(), static_cast<int>(b->ld),
        0.f, acc.data(), std::max(m, 1));
  const bool d16 = d->type != CUDA_R_32F;
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      const int64_t at = static_cast<int64_t>(j) * d->ld + i;
      float x = acc[static_cast<size_t>(j) * m + i];
      if (be == 0.f && !bias) {
        Store(D, d->type, at, x);
        continue;
      }
      // C first: it may be D itself.
      const float cv = be != 0.f ? be * Load(C, c->type, static_cast<int64_t>(j) * c->ld + i) : 0.f;
      if (d16) {
        Store(D, d->type, at, x);
        x = Load(D, d->type, at);
      }
      x += cv;
      if (bias) x += Load(desc->bias, d->type, i);
      Store(D, d->type, at, x);
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

uint64_t LtMatmulsRun(cublasLtEpilogue_t e) { return LtRuns(e).load(); }

bool NoAlgorithmFor(cublasLtEpilogue_t e) {
  const char* v = std::getenv(kNoAlgorithmVariable);
  if (v == nullptr) return false;
  const char* name = nullptr;
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: name = "default"; break;
    case CUBLASLT_EPILOGUE_BIAS: name = "bias"; break;
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: name = "gelu_aux_bias"; break;
    case CUBLASLT_EPILOGUE_DGELU: name = "dgelu"; break;
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: name = "dgelu_bgrad"; break;
    case CUBLASLT_EPILOGUE_BGRADA: name = "bgrada"; break;
    case CUBLASLT_EPILOGUE_BGRADB: name = "bgradb"; break;
  }
  const bool fused = e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS;
  const std::string list = std::string(",") + v + ",";
  return (name != nullptr && list.find(std::string(",") + name + ",") != std::string::npos) ||
         (fused && list.find(",fused,") != std::string::npos);
}

}  // namespace gantry::emucuda
