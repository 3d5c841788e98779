// The part of NVIDIA's cudnn-frontend graph API that kernels/cuda/cudnn_attention.cc calls,
// answered on the CPU for the cuda-emulated backend: names, enums and signatures follow the
// frontend (1.x, namespace cudnn_frontend), in namespace gantry::emucudnn, so that the one
// wrapper compiles against either.
//
// What it checks, as cuDNN does for its fused attention (sdpa, sdpa_backward):
//   validate      io type bf16 or fp16 with fp32 intermediates and compute; Q, K, V, O, dO,
//                 dQ, dK, dV 4-d (B, H, S, D) with unit innermost stride; Q, O, dO and dQ one
//                 shape (B, H_q, S, D), K, V, dK and dV one shape (B, H_k, S, D), H_k a factor
//                 of H_q (grouped-query attention: query head h reads key/value head
//                 h / (H_q / H_k); cuDNN's own words otherwise, GRAPH_NOT_SUPPORTED); D a
//                 multiple of 8 up to 256; S of 2 or more; softmax statistics (B, H_q, S, 1)
//                 fp32; every tensor with a uid and dims and strides; the attention scale set
//                 (and honoured: the scores are scaled by it, whatever it is).
//                 The stand-in computes the causal (top-left) mask or none, s_q = s_kv,
//                 d_qk = d_v, and K and V of one head count: anything else is
//                 GRAPH_NOT_SUPPORTED here.
//   plans         get_workspace_size reports a non-zero workspace; check_support may answer
//                 "no plan" (kNoPlanVariable below, a test switch).
//   execute       the workspace non-null and that large in device memory (it is scribbled
//                 over); each uid of the graph bound to a pointer, 16-byte aligned, each row stride
//                 a multiple of 16 bytes, and each tensor's extent within emulated device
//                 memory; the graph built (build_operation_graph, create_execution_plans,
//                 check_support, build_plans) first.
// It computes with the cpu twin (kernels/attention.h): the tensors gathered from their
// strides into (B, S, (H_q + 2 H_k) D) rows of the io type, the key/value heads repeated to
// the query heads (kernels::gqa_expand: a copy where H_k = H_q), kernels::attention_forward
// with the softmax weights rounded to that type (what cuDNN's tensor cores multiply V by), the
// statistics by kernels::attention_lse; the backward recomputes the probabilities so, runs
// kernels::attention_backward and sums dK and dV over each group (kernels::gqa_reduce): the
// cpu backend's bits for the model's expand, attention, reduce. That is a causal graph whose
// backward is given its own statistics. Context parallelism's blocks (a graph with no mask,
// or a backward given the merged statistics and O of a longer softmax) take the block twins
// (kernels/attention_block.h) in fp32 on the widened values, their outputs rounded to the io
// type once: the forward's O and statistics, the backward's dQ, dK, dV from the given O, dO and
// statistics (D = rowsum(dO·O), p = exp(s − stats): the flash-attention identity, as cuDNN
// computes it). The backward checks that its statistics are a log-sum-exp over its Q's and K's
// scores or more (never below the graph's own, within fp32 rounding): a wiring error on the
// GPU would read stale ones.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/emulated/cuda_api.h"

namespace gantry::emucudnn {

struct EmuCudnn;
using cudnnHandle_t = EmuCudnn*;
enum cudnnStatus_t { CUDNN_STATUS_SUCCESS = 0, CUDNN_STATUS_BAD_PARAM = 2000 };

// The dynamic loader's part: the stand-in "finds" the library by cuDNN 9's soname,
// libcudnn.so.9, and no other name (null, with a loader's words in *error).
void* OpenLibrary(const char* name, std::string* error);

// A test switch: cuDNN answering "no plan" (check_support: GRAPH_NOT_SUPPORTED, no engine
// config) as a real GPU may for a graph it otherwise takes, so that CI runs the callers'
// fallbacks. The environment variable names the graphs refused, comma-separated: "all",
// "forward", "backward", "grouped" (key/value heads fewer than the query heads),
// "grouped-backward". Read at each check_support (tests set it around the calls; a daemon's
// environment sets it for a whole job). Unset or empty: every graph the stand-in computes is
// planned.
inline constexpr const char* kNoPlanVariable = "GANTRY_EMULATED_CUDNN_NO_PLAN";
std::string NoPlanSetting();
bool NoPlanFor(bool backward, bool grouped);

// The stand-in's record of what it ran: executions of sdpa (backward false) or sdpa_backward
// graphs, causal or not, of sequence length s, in this process (Executed counts one), so that a
// test can tell which path a caller took (context parallelism's blocks: s the chunk's rows).
void Executed(bool backward, bool causal, int64_t s);
int64_t Executions(bool backward, bool causal, int64_t s);

namespace cudnn_frontend {

enum class DataType_t { NOT_SET, FLOAT, HALF, BFLOAT16, INT32 };
enum class HeurMode_t { A, B, FALLBACK };
enum class error_code_t {
  OK,
  ATTRIBUTE_NOT_SET,
  INVALID_VALUE,
  GRAPH_NOT_SUPPORTED,
  GRAPH_EXECUTION_PLAN_CREATION_FAILED,
  GRAPH_EXECUTION_FAILED,
};
struct error_t {
  error_code_t code = error_code_t::OK;
  std::string err_msg;
  bool is_good() const { return code == error_code_t::OK; }
  bool is_bad() const { return !is_good(); }
  const std::string& get_message() const { return err_msg; }
  error_code_t get_code() const { return code; }
};

namespace detail {
size_t get_backend_version();  // 91900: the version the GPU hosts' PyTorch brings
cudnnStatus_t create_handle(cudnnHandle_t* handle);
cudnnStatus_t destroy_handle(cudnnHandle_t handle);
cudnnStatus_t set_stream(cudnnHandle_t handle, emucuda::cudaStream_t stream);
}  // namespace detail

namespace graph {

class Tensor_attributes {
 public:
  Tensor_attributes& set_name(const std::string& v) { name_ = v; return *this; }
  Tensor_attributes& set_uid(int64_t v) { uid_ = v; has_uid_ = true; return *this; }
  Tensor_attributes& set_dim(const std::vector<int64_t>& v) { dim_ = v; return *this; }
  Tensor_attributes& set_stride(const std::vector<int64_t>& v) { stride_ = v; return *this; }
  Tensor_attributes& set_data_type(DataType_t v) { type_ = v; return *this; }
  Tensor_attributes& set_output(bool v) { output_ = v; return *this; }
  int64_t get_uid() const { return uid_; }
  const std::string& get_name() const { return name_; }
  const std::vector<int64_t>& get_dim() const { return dim_; }
  const std::vector<int64_t>& get_stride() const { return stride_; }
  DataType_t get_data_type() const { return type_; }
  bool get_is_output() const { return output_; }
  bool has_uid() const { return has_uid_; }

 private:
  std::string name_;
  int64_t uid_ = 0;
  bool has_uid_ = false;
  std::vector<int64_t> dim_, stride_;
  DataType_t type_ = DataType_t::NOT_SET;
  bool output_ = false;
};

class SDPA_attributes {
 public:
  SDPA_attributes& set_name(const std::string& v) { name = v; return *this; }
  SDPA_attributes& set_generate_stats(bool v) { generate_stats = v; return *this; }
  SDPA_attributes& set_causal_mask(bool v) { causal = v; return *this; }
  SDPA_attributes& set_attn_scale(float v) { scale = v; has_scale = true; return *this; }
  std::string name;
  bool generate_stats = false, causal = false, has_scale = false;
  float scale = 1.0f;
};

class SDPA_backward_attributes {
 public:
  SDPA_backward_attributes& set_name(const std::string& v) { name = v; return *this; }
  SDPA_backward_attributes& set_causal_mask(bool v) { causal = v; return *this; }
  SDPA_backward_attributes& set_attn_scale(float v) { scale = v; has_scale = true; return *this; }
  SDPA_backward_attributes& set_deterministic_algorithm(bool v) { deterministic = v; return *this; }
  std::string name;
  bool causal = false, has_scale = false, deterministic = false;
  float scale = 1.0f;
};

// One graph holds one sdpa or one sdpa_backward node (all the wrapper builds).
class Graph {
 public:
  Graph& set_io_data_type(DataType_t v) { io_ = v; return *this; }
  Graph& set_intermediate_data_type(DataType_t v) { intermediate_ = v; return *this; }
  Graph& set_compute_data_type(DataType_t v) { compute_ = v; return *this; }
  std::shared_ptr<Tensor_attributes> tensor(const Tensor_attributes& t);
  // → O, Stats (Stats null unless generate_stats)
  std::array<std::shared_ptr<Tensor_attributes>, 2> sdpa(std::shared_ptr<Tensor_attributes> q,
                                                         std::shared_ptr<Tensor_attributes> k,
                                                         std::shared_ptr<Tensor_attributes> v, SDPA_attributes a);
  // → dQ, dK, dV
  std::array<std::shared_ptr<Tensor_attributes>, 3> sdpa_backward(
      std::shared_ptr<Tensor_attributes> q, std::shared_ptr<Tensor_attributes> k,
      std::shared_ptr<Tensor_attributes> v, std::shared_ptr<Tensor_attributes> o,
      std::shared_ptr<Tensor_attributes> dO, std::shared_ptr<Tensor_attributes> stats, SDPA_backward_attributes a);
  error_t validate();
  error_t build_operation_graph(cudnnHandle_t handle);
  error_t create_execution_plans(const std::vector<HeurMode_t>& modes);
  error_t check_support();
  error_t build_plans();
  error_t get_workspace_size(int64_t& bytes) const;
  error_t execute(cudnnHandle_t handle, std::unordered_map<int64_t, void*>& pack, void* workspace) const;

 private:
  enum class Stage { kDefined, kValidated, kBuilt, kPlanned, kSupported, kReady };
  error_t Fail(error_code_t code, const std::string& message) const;
  int64_t WorkspaceBytes() const;  // validated graphs only
  DataType_t io_ = DataType_t::NOT_SET, intermediate_ = DataType_t::NOT_SET, compute_ = DataType_t::NOT_SET;
  std::vector<std::shared_ptr<Tensor_attributes>> tensors_;
  bool forward_ = false, backward_ = false;
  SDPA_attributes fwd_;
  SDPA_backward_attributes bwd_;
  // forward: q, k, v, o, stats; backward: q, k, v, o, dO, stats, dQ, dK, dV
  std::vector<std::shared_ptr<Tensor_attributes>> io_tensors_;
  Stage stage_ = Stage::kDefined;
};

}  // namespace graph
}  // namespace cudnn_frontend
}  // namespace gantry::emucudnn
