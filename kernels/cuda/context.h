// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// The per-device state the CUDA ops share: the stream they run on, the cuBLAS and cuBLASLt
// handles, cuBLASLt's workspace and a small scratch buffer for the kernels' partial sums.
// Everything is allocated once, at Create: no op allocates.
#pragma once

#include "kernels/cuda/runtime.h"

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gantry::GANTRY_CUDA_NS {

// cuBLASLt's descriptors and chosen algorithm per GEMM shape (kernels/cuda/matmul.cu).
struct MatmulPlans;
void DeleteMatmulPlans(MatmulPlans* plans);

class Context {
 public:
  // On device `device` (cudaSetDevice), with a new non-blocking stream.
  static absl::StatusOr<std::unique_ptr<Context>> Create(int device);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Where the ops issue: the context's own stream, or the one SetStream chose.
  cudaStream_t stream() const { return stream_; }
  cudaStream_t own_stream() const { return own_stream_; }
  int device() const { return device_; }
  // Issues the following work (kernels, copies, cuBLAS) on s; null: the own stream.
  absl::Status SetStream(cudaStream_t s);
  cublasHandle_t blas() const { return blas_; }
  cublasLtHandle_t lt() const { return lt_; }
  void* lt_workspace() const { return lt_workspace_; }
  size_t lt_workspace_bytes() const { return kLtWorkspaceBytes; }
  // Room for kScratchFloats floats of partial sums (column sums, norms).
  float* scratch() const { return scratch_; }
  static constexpr size_t kScratchFloats = size_t{4} << 20;
  // Waits for the own stream's work.
  absl::Status Synchronize() const;
  // Whether a 16-bit GEMM output with a bias takes cuBLASLt's bias epilogue (two roundings,
  // no scratch pass) rather than one rounding through an fp32 scratch (kernels/cuda/matmul.cu;
  // BackendOptions::bias_epilogue, on by default there). Off unless set.
  bool bias_epilogue() const { return bias_epilogue_; }
  void set_bias_epilogue(bool on) { bias_epilogue_ = on; }
  // Whether cuBLASLt's GELU and bias-gradient epilogues (GELU_AUX_BIAS, DGELU(_BGRAD), BGRADA/B)
  // replace the GELU, GELU-backward and column-sum passes where they take the call
  // (kernels/cuda/matmul.cu; BackendOptions::gelu_epilogue). Off unless set.
  bool gelu_epilogue() const { return gelu_epilogue_; }
  void set_gelu_epilogue(bool on) { gelu_epilogue_ = on; }
  // Whether each GEMM shape's plan times the first few algorithms cuBLASLt's heuristic offers and
  // keeps the fastest (kernels/cuda/matmul.cu; BackendOptions::gemm_autotune), rather than taking
  // its first. Off unless set.
  bool gemm_autotune() const { return gemm_autotune_; }
  void set_gemm_autotune(bool on) { gemm_autotune_ = on; }
  // The GEMMs' plans, made on first use and kept with the context (matmul.cu fills it): a
  // GEMM of a shape already seen asks cuBLASLt's heuristic nothing and creates no descriptor.
  MatmulPlans*& matmul_plans() { return matmul_plans_; }
  // A library's refusal and the path taken instead (cuDNN without a plan for an attention
  // graph, cuBLASLt without an algorithm for an epilogue): the first notice of each key is
  // written to stderr (the process's log) and kept for TakeNotices (the step report); later
  // ones of that key are dropped, so each is said once per context.
  void Notice(const std::string& key, const std::string& text);
  // The notices not yet taken, oldest first.
  std::vector<std::string> TakeNotices();

 private:
  Context() = default;
  static constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;
  int device_ = 0;
  cudaStream_t own_stream_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* lt_workspace_ = nullptr;
  float* scratch_ = nullptr;
  MatmulPlans* matmul_plans_ = nullptr;  // DeleteMatmulPlans at destruction
  bool bias_epilogue_ = false;
  bool gelu_epilogue_ = false;
  bool gemm_autotune_ = false;
  std::mutex notices_mu_;
  std::set<std::string> noticed_;        // the keys said
  std::vector<std::string> untaken_;     // their texts, for TakeNotices
};

}  // namespace gantry::GANTRY_CUDA_NS
