// The part of the CUDA runtime, cuBLAS and cuBLASLt APIs that kernels/cuda calls, answered
// on the CPU: the cuda-emulated backend compiles kernels/cuda's launchers against this
// instead of the real headers (kernels/cuda/runtime.h chooses). Names, enums and signatures
// follow the real APIs, in namespace gantry::emucuda, so that the same source compiles for
// both.
//   Memory   "device" memory is host memory from cudaMalloc, recorded, so that a copy whose
//            kind names the wrong side (a host pointer where a device one belongs) fails
//            with cudaErrorInvalidValue, as the real runtime's checks would.
//   Order    every call and launch runs at once, in order: streams and events only keep
//            the API (an event records the time; elapsed time is real time).
//   Devices  kDeviceCount emulated devices; cudaSetDevice selects one per host thread. Each
//            device's busy time and allocated bytes are kept for its metrics (usage.h).
//   GEMMs    cublasSgemmStridedBatched and cublasLtMatmul check their arguments as cuBLAS
//            documents (dimensions, leading dimensions, transposes, types) and compute in
//            fp32 with OpenBLAS's column-major sgemm; cuBLASLt's bias epilogue adds a bias
//            per row of D. cublasLtMatmul takes the type combinations cuBLASLt has for
//            CUBLAS_COMPUTE_32F with fp32 scale: A and B of one type, C and D of one type,
//            (A, D) one of (32F, 32F), (16BF, 16BF), (16BF, 32F), (16F, 16F), (16F, 32F); others
//            are CUBLAS_STATUS_NOT_SUPPORTED. 16-bit A and B are widened to fp32 (exactly:
//            every product of two 16-bit values is exact in fp32) and multiplied by the same
//            sgemm, with C widened; the bias (of D's type, as cuBLASLt's bias vector is) is
//            added in fp32, and a 16-bit D is rounded once, to nearest even (kernels/cast.h).
//            The heuristic's algorithm assumes the alignments of the preference
//            (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, 256 unless set); a matmul whose
//            pointer is less aligned than its algorithm assumes is CUBLAS_STATUS_INVALID_VALUE
//            (the arguments conflict with the algorithm: on a GPU it may read out of bounds).
//            The same holds of the bias and aux pointers, whose alignment the heuristic takes
//            from the pointers set in the descriptor when it is asked (as cuBLASLt documents).
//            The heuristic can be made to find no algorithm (kNoAlgorithmVariable, a test switch).
//            The GELU and bias-gradient epilogues (cublasLtEpilogue_t below) check what
//            cuBLASLt documents: an aux pointer and CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD (a
//            multiple of 8, no less than D's rows) for the GELU ones, a bias pointer, the aux and
//            bias of D's type (their default types: the emulation takes no other). They compute
//            as cuBLASLt documents them, on the fp32 accumulator: each output (D, aux, the bias
//            gradient) rounded once to its type. How a GPU rounds them has yet to be measured.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/emulated/usage.h"

namespace gantry::emucuda {

constexpr int kDeviceCount = emu::kDeviceCount;

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
struct EmuStream;
struct EmuEvent;
using cudaStream_t = EmuStream*;
using cudaEvent_t = EmuEvent*;
constexpr unsigned cudaStreamNonBlocking = 1;

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major, minor;
  int multiProcessorCount;
};

cudaError_t cudaMalloc(void** ptr, size_t bytes);
template <typename T>
cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
cudaError_t cudaFree(void* ptr);
// Page-locked host memory (the real runtime's cudaHostAllocDefault): host memory here, kept
// apart from the device's, which a copy must name as the host side.
constexpr unsigned cudaHostAllocDefault = 0;
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaMemGetInfo(size_t* free, size_t* total);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaDeviceSynchronize();

cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaGetLastError();
// Whether [p, p + bytes) lies inside one emulated device allocation (for the library
// stand-ins' checks of the pointers they are handed).
bool IsDeviceMemory(const void* p, size_t bytes);
// How often the host has waited for the device's queued work so far in this process, counted
// where a GPU makes the host wait (not a CUDA function: for tests that hold a step to no waits
// inside it). drains: cudaStreamSynchronize, cudaDeviceSynchronize, a cudaMemcpy to or from the
// host, and a cudaMemcpyAsync whose host side is not cudaHostAlloc's (pageable memory: the
// copy waits for the stream); events: cudaEventSynchronize (the host waits for one point of
// the stream while the work queued after it goes on).
struct HostWaits {
  uint64_t drains = 0, events = 0;
};
HostWaits HostWaitsSoFar();
const char* cudaGetErrorName(cudaError_t err);
const char* cudaGetErrorString(cudaError_t err);


// --- cuBLAS ---
enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 };
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68 };
struct EmuBlas;
using cublasHandle_t = EmuBlas*;

const char* cublasGetStatusName(cublasStatus_t status);
cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
// Column-major C_i (m, n) = alpha op(A_i) (m, k) op(B_i) (k, n) + beta C_i, i < batch, with
// X_i = X + i * strideX.
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long strideA, const float* B, int ldb, long long strideB,
                                         const float* beta, float* C, int ldc, long long strideC, int batch);

// --- cuBLASLt ---
struct EmuLt;
struct EmuLtMatmulDesc;
struct EmuLtLayout;
struct EmuLtPreference;
using cublasLtHandle_t = EmuLt*;
using cublasLtMatmulDesc_t = EmuLtMatmulDesc*;
using cublasLtMatrixLayout_t = EmuLtLayout*;
using cublasLtMatmulPreference_t = EmuLtPreference*;
enum cublasLtMatmulDescAttributes_t {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,        // the bias, or the bias gradient (an output), of D's type
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,  // GELU's input (D's type and layout), written or read
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,       // int64_t: its leading dimension, a multiple of 8, >= D's rows
};
// The epilogues the emulated cuBLASLt computes (cuBLASLt's values). GELU_AUX_BIAS: D = gelu(x),
// aux = x, x = the product + bias. DGELU: D = gelu'(aux) * the product; DGELU_BGRAD also the
// bias gradient, D's row sums. BGRADA / BGRADB: D the product, the bias gradient the sums of
// op(A)'s rows (D's rows) / op(B)'s columns (D's columns) over k.
enum cublasLtEpilogue_t {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
  CUBLASLT_EPILOGUE_DGELU = 192,
  CUBLASLT_EPILOGUE_DGELU_BGRAD = 208,
  CUBLASLT_EPILOGUE_BGRADA = 256,
  CUBLASLT_EPILOGUE_BGRADB = 512,
};
enum cublasLtReductionScheme_t {
  CUBLASLT_REDUCTION_SCHEME_NONE = 0,
  CUBLASLT_REDUCTION_SCHEME_INPLACE = 1,
  CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE = 2,
  CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE = 4,
  CUBLASLT_REDUCTION_SCHEME_MASK = 0x7,
};
enum cublasLtMatmulPreferenceAttributes_t {
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
  CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3,  // uint32_t, the split-K sums allowed
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,  // uint32_t, default 256
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};
struct cublasLtMatmulAlgo_t {
  uint64_t data[8];
};
struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t bytes);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* returned);
// D = alpha op(A) op(B) + beta C (+ bias per row of D; or another epilogue of the descriptor's),
// column-major; beta 0: C is not read.
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream);
// How many cublasLtMatmul calls in this process have run epilogue e: which path a caller took,
// for tests (not a cuBLASLt function).
uint64_t LtMatmulsRun(cublasLtEpilogue_t e);

// A test switch: cuBLASLt's heuristic finding no algorithm (CUBLAS_STATUS_NOT_SUPPORTED, none
// returned), as a GPU's cuBLASLt may for an epilogue at some shape or alignment, so that CI runs
// the callers' fallbacks. The environment variable names the epilogues refused,
// comma-separated: "bias", "gelu_aux_bias", "dgelu", "dgelu_bgrad", "bgrada", "bgradb",
// "fused" (every one but the default and the bias), "default". Read at each heuristic call.
inline constexpr const char* kNoAlgorithmVariable = "GANTRY_EMULATED_CUBLASLT_NO_ALGO";
bool NoAlgorithmFor(cublasLtEpilogue_t e);

}  // namespace gantry::emucuda
