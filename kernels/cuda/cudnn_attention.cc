// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// The cuDNN attention path (cudnn_attention.h): the only translation unit that includes
// cudnn-frontend. Built twice, as every kernels/cuda source: for the GPU against NVIDIA's
// frontend in its dynamic-loading mode, and for cuda-emulated against the stand-in of the
// part of it called here (kernels/emulated/cudnn_frontend.h).
#include "kernels/cuda/cudnn_attention.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/check.h"

#if defined(GANTRY_CUDA_EMULATED)
#include "kernels/emulated/cudnn_frontend.h"
namespace gantry::GANTRY_CUDA_NS {
namespace fe = ::gantry::emucudnn::cudnn_frontend;
using ::gantry::emucudnn::cudnnHandle_t;
using ::gantry::emucudnn::cudnnStatus_t;
using ::gantry::emucudnn::CUDNN_STATUS_SUCCESS;
using ::gantry::emucudnn::OpenLibrary;
}  // namespace gantry::GANTRY_CUDA_NS
#else
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include <dlfcn.h>

#include <cudnn_frontend.h>
// The frontend's dynamic loading resolves every cuDNN symbol through this handle.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend
namespace gantry::GANTRY_CUDA_NS {
namespace fe = ::cudnn_frontend;
namespace {
// dlopen of `name` for the frontend; null with the loader's words in *error.
void* OpenLibrary(const char* name, std::string* error) {
  void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    *error = e != nullptr ? e : "dlopen failed";
    return nullptr;
  }
  fe::cudnn_dlhandle = h;
  return h;
}
}  // namespace
}  // namespace gantry::GANTRY_CUDA_NS
#endif

namespace gantry::GANTRY_CUDA_NS {

// The frontend's and cuDNN's results for GPU_RETURN_IF_ERROR (common/gpu_check.h), beside the
// runtime's and cuBLAS's (check.h): at this namespace's scope, so that one lookup finds them all.
static bool GpuOk(fe::error_t e) { return e.is_good(); }
static std::string GpuErrorText(fe::error_t e) { return absl::StrCat("cuDNN frontend: ", e.get_message()); }
static bool GpuOk(cudnnStatus_t s) { return s == CUDNN_STATUS_SUCCESS; }
static std::string GpuErrorText(cudnnStatus_t s) { return absl::StrCat("cuDNN status ", static_cast<int>(s)); }

namespace {

using Graph = fe::graph::Graph;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// The tensors' uids in the graphs' variant packs.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };


// Once a process for each library name (retried until it succeeds): the library, and its
// version. GANTRY_CUDNN_LIBRARY, when set, names the file; else cuDNN 9's soname.
absl::Status LoadLibraryOnce(size_t* version) {
  static std::mutex mu;
  static std::string loaded;  // the name last loaded
  static size_t loaded_version = 0;
  std::lock_guard<std::mutex> l(mu);
  const char* env = std::getenv("GANTRY_CUDNN_LIBRARY");
  const std::string name = env != nullptr && *env != '\0' ? env : "libcudnn.so.9";
  if (loaded != name) {
    std::string error;
    if (OpenLibrary(name.c_str(), &error) == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cuDNN attention needs the cuDNN 9 library, and ", name, " could not be loaded: ", error,
          ". Install cuDNN 9 (pip's nvidia-cudnn-cu13, or NVIDIA's cudnn9-cuda-13 package) and put its lib folder "
          "on LD_LIBRARY_PATH, or name the file in GANTRY_CUDNN_LIBRARY; or choose another attention path (fused)"));
    }
    size_t v = 0;
    try {
      v = fe::detail::get_backend_version();
    } catch (const std::exception& e) {
      return absl::FailedPreconditionError(absl::StrCat("cuDNN attention: ", name, " loaded, but: ", e.what()));
    }
    if (v < 90000) {
      return absl::FailedPreconditionError(
          absl::StrCat("cuDNN attention needs cuDNN 9 or later; ", name, " is version ", v));
    }
    loaded = name;
    loaded_version = v;
  }
  *version = loaded_version;
  return absl::OkStatus();
}

// The model's attention scale, 1/sqrt(hs).
float DefaultScale(int hs) { return 1.0f / std::sqrt(static_cast<float>(hs)); }

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

absl::Status CheckAligned(const char* op, std::initializer_list<std::pair<const char*, const void*>> tensors) {
  for (auto [name, p] : tensors) {
    if (!Aligned16(p)) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": cuDNN attention needs 16-byte aligned tensors; ", name, " is at byte ",
                       reinterpret_cast<uintptr_t>(p) % 16, " of 16"));
    }
  }
  return absl::OkStatus();
}

// A (B,H,T,hs) view of rows `row` elements wide, head h at channel h*hs of the view's start.
fe::graph::Tensor_attributes View(const char* name, int64_t uid, int B, int T, int H, int hs, int64_t row) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({B, H, T, hs})
      .set_stride({T * row, hs, row, 1});
}
fe::graph::Tensor_attributes Stats(int B, int T, int NH) {
  return fe::graph::Tensor_attributes()
      .set_name("stats")
      .set_uid(kStats)
      .set_dim({B, NH, T, 1})
      .set_stride({int64_t{NH} * T, T, 1, 1})
      .set_data_type(fe::DataType_t::FLOAT);
}

}  // namespace

// What a graph's tensors are: the model's q|k|v rows (causal self-attention), or a ring
// block's packed tensors, its diagonal (causal) or a block every key of which is seen.
namespace {
enum Layout : int { kQkvRows = 0, kBlockCausal = 1, kBlockFull = 2 };
}  // namespace

struct CudnnAttention::Impl {
  // (backward?, 16-bit type, B, T, NH, NKV, hs, layout, attention scale)
  using Key = std::tuple<bool, kernels::Precision, int, int, int, int, int, int, float>;
  struct Plan {
    std::shared_ptr<Graph> graph;
    void* workspace = nullptr;
    int64_t workspace_bytes = 0;
  };
  cudnnHandle_t handle = nullptr;
  size_t version = 0;
  bool deterministic = true;  // the backward's algorithm
  std::map<Key, Plan> plans;

  ~Impl() {
    for (auto& [key, plan] : plans) {
      if (plan.workspace != nullptr) cudaFree(plan.workspace);
    }
    if (handle != nullptr) {
      try {
        (void)fe::detail::destroy_handle(handle);
      } catch (const std::exception&) {
      }
    }
  }

  // Graphs cuDNN would not plan, with its words (UNIMPLEMENTED): asked once.
  std::map<Key, absl::Status> refused;

  // The graph of key, built (and its workspace allocated) on first use; UNIMPLEMENTED where
  // cuDNN refuses to validate, build or plan it (remembered).
  absl::StatusOr<Plan*> Get(const Key& key) {
    if (auto it = plans.find(key); it != plans.end()) return &it->second;
    if (auto it = refused.find(key); it != refused.end()) return it->second;
    absl::StatusOr<std::shared_ptr<Graph>> g = Build(key);
    if (!g.ok()) {
      const auto [backward, type, B, T, NH, NKV, hs, layout, scale] = key;
      const char* what = layout == kQkvRows       ? "attention"
                         : layout == kBlockCausal ? "ring's diagonal attention block"
                                                  : "ring's attention block";
      absl::Status no = absl::UnimplementedError(absl::StrCat(
          "cuDNN has no plan for the ", what, " ", backward ? "backward" : "forward", " of B ", B, " T ", T, ", ", NH,
          " query heads over ", NKV, " key/value heads of ", hs, ", ", kernels::PrecisionName(type), ": ",
          g.status().message()));
      refused.emplace(key, no);
      return no;
    }
    Plan plan;
    plan.graph = std::move(*g);
    GPU_RETURN_IF_ERROR(plan.graph->get_workspace_size(plan.workspace_bytes));
    if (plan.workspace_bytes > 0) {
      GPU_RETURN_IF_ERROR(cudaMalloc(&plan.workspace, static_cast<size_t>(plan.workspace_bytes)));
    }
    return &plans.emplace(key, std::move(plan)).first->second;
  }

  // The graph of key, validated, built and planned (cuDNN's refusal as its error).
  absl::StatusOr<std::shared_ptr<Graph>> Build(const Key& key) {
    const auto [backward, type, B, T, NH, NKV, hs, layout, scale] = key;
    // Q's heads, and the rows' widths: the model's packed q|k|v rows (K and V have NKV heads
    // each), or a ring block's q and o rows (C) and k|v rows (2·NKV·hs).
    const int64_t C = int64_t{NH} * hs;
    const int64_t q_row = layout == kQkvRows ? int64_t{NH + 2 * NKV} * hs : C;
    const int64_t kv_row = layout == kQkvRows ? q_row : int64_t{2 * NKV} * hs;
    const bool causal = layout != kBlockFull;
    auto g = std::make_shared<Graph>();
    g->set_io_data_type(type == kernels::Precision::kBf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const TensorPtr q = g->tensor(View("q", kQ, B, T, NH, hs, q_row));
    const TensorPtr k = g->tensor(View("k", kK, B, T, NKV, hs, kv_row));
    const TensorPtr v = g->tensor(View("v", kV, B, T, NKV, hs, kv_row));
    if (!backward) {
      auto options = fe::graph::SDPA_attributes()
                         .set_name("gantry_attention")
                         .set_generate_stats(true)
                         .set_causal_mask(causal)
                         .set_attn_scale(scale);
      auto [o, stats] = g->sdpa(q, k, v, options);
      o->set_output(true).set_uid(kO).set_dim({B, NH, T, hs}).set_stride({T * C, hs, C, 1});
      stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT);
    } else {
      const TensorPtr o = g->tensor(View("o", kO, B, T, NH, hs, C));
      const TensorPtr d_o = g->tensor(View("dO", kDO, B, T, NH, hs, C));
      const TensorPtr stats = g->tensor(Stats(B, T, NH));
      auto options = fe::graph::SDPA_backward_attributes()
                         .set_name("gantry_attention_backward")
                         .set_causal_mask(causal)
                         .set_attn_scale(scale)
                         .set_deterministic_algorithm(deterministic);
      auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, d_o, stats, options);
      // dK and dV of the key/value heads: cuDNN sums each over the query heads of its group.
      dq->set_output(true).set_uid(kDQ).set_dim({B, NH, T, hs}).set_stride({T * q_row, hs, q_row, 1});
      dk->set_output(true).set_uid(kDK).set_dim({B, NKV, T, hs}).set_stride({T * kv_row, hs, kv_row, 1});
      dv->set_output(true).set_uid(kDV).set_dim({B, NKV, T, hs}).set_stride({T * kv_row, hs, kv_row, 1});
    }
    GPU_RETURN_IF_ERROR(g->validate());
    GPU_RETURN_IF_ERROR(g->build_operation_graph(handle));
    GPU_RETURN_IF_ERROR(g->create_execution_plans({fe::HeurMode_t::A}));
    GPU_RETURN_IF_ERROR(g->check_support());
    GPU_RETURN_IF_ERROR(g->build_plans());
    return g;
  }

  absl::Status Run(cudaStream_t stream, const Key& key, std::unordered_map<int64_t, void*>& pack) {
    ASSIGN_OR_RETURN(Plan * plan, Get(key));
    GPU_RETURN_IF_ERROR(fe::detail::set_stream(handle, stream));
    GPU_RETURN_IF_ERROR(plan->graph->execute(handle, pack, plan->workspace));
    return absl::OkStatus();
  }
};

CudnnAttention::CudnnAttention(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnAttention::~CudnnAttention() = default;

absl::StatusOr<std::unique_ptr<CudnnAttention>> CudnnAttention::Create(bool deterministic) {
  auto impl = std::make_unique<Impl>();
  impl->deterministic = deterministic;
  RETURN_IF_ERROR(LoadLibraryOnce(&impl->version));
  try {
    if (auto st = fe::detail::create_handle(&impl->handle); st != 0) {
      impl->handle = nullptr;
      return absl::FailedPreconditionError(
          absl::StrCat("cuDNN attention: cudnnCreate failed (status ", static_cast<int>(st), ")"));
    }
  } catch (const std::exception& e) {
    return absl::FailedPreconditionError(absl::StrCat("cuDNN attention: cudnnCreate: ", e.what()));
  }
  return std::unique_ptr<CudnnAttention>(new CudnnAttention(std::move(impl)));
}

std::string CudnnAttention::Describe() const {
  const size_t v = impl_->version;  // 91900: 9.19.0
  return absl::StrCat("cuDNN ", v / 10000, ".", v / 100 % 100, ".", v % 100);
}

int CudnnAttention::graphs() const { return static_cast<int>(impl_->plans.size()); }

absl::Status CudnnAttention::Supports(bool backward, kernels::Precision type, int B, int T, int NH, int NKV, int hs) {
  RETURN_IF_ERROR(Takes(kernels::CPtr(nullptr, type), B, T, NH * hs, NH, NKV, type));
  try {
    return impl_->Get({backward, type, B, T, NH, NKV, hs, kQkvRows, DefaultScale(hs)}).status();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("cuDNN attention ", backward ? "backward" : "forward", ": ", e.what()));
  }
}

absl::Status CudnnAttention::Takes(kernels::CPtr qkv, int B, int T, int C, int NH, int NKV,
                                   kernels::Precision weights) {
  if (qkv.f32()) return absl::InvalidArgumentError("cuDNN attention takes bf16 or fp16 tensors, not fp32");
  if (weights != qkv.type) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuDNN attention rounds the softmax weights to the tensors' type (",
                     kernels::PrecisionName(qkv.type), "), and this call keeps them in ",
                     kernels::PrecisionName(weights)));
  }
  if (B <= 0 || T <= 0 || C <= 0 || NH <= 0 || C % NH != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cuDNN attention: bad shape B ", B, " T ", T, " C ", C, " NH ", NH));
  }
  if (NKV <= 0 || NH % NKV != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cuDNN attention: ", NH, " query heads over ", NKV,
                                                   " key/value heads (the query heads must be a multiple of them)"));
  }
  if (T < 2) {
    // cuDNN 9.19 refuses s_q = s_kv = 1 (seen on an H200: "s_q = s_kv = 1 is not supported").
    return absl::InvalidArgumentError("cuDNN attention takes sequences of 2 tokens or more; this one has 1");
  }
  const int hs = C / NH;
  if (hs % 8 != 0 || hs > kMaxHead) {
    return absl::InvalidArgumentError(absl::StrCat("cuDNN attention takes head sizes that are multiples of 8 up to ",
                                                   kMaxHead, "; this one is ", hs));
  }
  return absl::OkStatus();
}

absl::Status CudnnAttention::Forward(cudaStream_t stream, kernels::Ptr out, float* lse, kernels::CPtr qkv, int B,
                                     int T, int C, int NH, int NKV) {
  // qkv (B,T,(NH + 2 NKV)·hs) → out (B,T,C), lse (B,NH,T)
  RETURN_IF_ERROR(Takes(qkv, B, T, C, NH, NKV, qkv.type));
  if (out.type != qkv.type) return absl::InvalidArgumentError("cuDNN attention: out and qkv differ in type");
  RETURN_IF_ERROR(CheckAligned("AttentionForward", {{"qkv", qkv.data}, {"out", out.data}, {"lse", lse}}));
  const int hs = C / NH;
  // K's and V's byte offsets in a row: after the NH query heads, and the NKV key heads.
  const size_t k_at = static_cast<size_t>(C) * 2, v_at = k_at + static_cast<size_t>(NKV) * hs * 2;
  char* q = static_cast<char*>(const_cast<void*>(qkv.data));
  std::unordered_map<int64_t, void*> pack = {
      {kQ, q}, {kK, q + k_at}, {kV, q + v_at}, {kO, out.data}, {kStats, lse}};
  try {
    return impl_->Run(stream, {false, qkv.type, B, T, NH, NKV, hs, kQkvRows, DefaultScale(hs)}, pack);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("cuDNN attention forward: ", e.what()));
  }
}

absl::Status CudnnAttention::Backward(cudaStream_t stream, kernels::Ptr dqkv, kernels::CPtr dout, kernels::CPtr qkv,
                                      kernels::CPtr out, const float* lse, int B, int T, int C, int NH, int NKV) {
  // dout (B,T,C), qkv (B,T,W), out (B,T,C), lse (B,NH,T) → dqkv (B,T,W), W = (NH + 2 NKV)·hs
  RETURN_IF_ERROR(Takes(qkv, B, T, C, NH, NKV, qkv.type));
  if (dqkv.type != qkv.type || dout.type != qkv.type || out.type != qkv.type) {
    return absl::InvalidArgumentError("cuDNN attention: dqkv, dout, qkv and out differ in type");
  }
  RETURN_IF_ERROR(CheckAligned("AttentionBackward",
                               {{"dqkv", dqkv.data}, {"dout", dout.data}, {"qkv", qkv.data}, {"out", out.data}, {"lse", lse}}));
  const int hs = C / NH;
  const size_t k_at = static_cast<size_t>(C) * 2, v_at = k_at + static_cast<size_t>(NKV) * hs * 2;
  char* q = static_cast<char*>(const_cast<void*>(qkv.data));
  char* dq = static_cast<char*>(dqkv.data);
  std::unordered_map<int64_t, void*> pack = {{kQ, q},
                                             {kK, q + k_at},
                                             {kV, q + v_at},
                                             {kO, const_cast<void*>(out.data)},
                                             {kDO, const_cast<void*>(dout.data)},
                                             {kStats, const_cast<float*>(lse)},
                                             {kDQ, dq},
                                             {kDK, dq + k_at},
                                             {kDV, dq + v_at}};
  try {
    return impl_->Run(stream, {true, qkv.type, B, T, NH, NKV, hs, kQkvRows, DefaultScale(hs)}, pack);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("cuDNN attention backward: ", e.what()));
  }
}

absl::Status CudnnAttention::SupportsBlock(bool backward, kernels::Precision type, int B, int L, int NH, int NKV,
                                           int hs, bool causal, float scale) {
  RETURN_IF_ERROR(Takes(kernels::CPtr(nullptr, type), B, L, NH * hs, NH, NKV, type));
  try {
    return impl_->Get({backward, type, B, L, NH, NKV, hs, causal ? kBlockCausal : kBlockFull, scale}).status();
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("cuDNN attention block ", backward ? "backward" : "forward", ": ", e.what()));
  }
}

absl::Status CudnnAttention::BlockForward(cudaStream_t stream, kernels::Ptr o, float* stats, kernels::CPtr q,
                                          kernels::CPtr kv, int B, int L, int NH, int NKV, int hs, bool causal,
                                          float scale) {
  // q (B,L,NH·hs), kv (B,L,2·NKV·hs) → o (B,L,NH·hs), stats (B,NH,L)
  RETURN_IF_ERROR(Takes(q, B, L, NH * hs, NH, NKV, q.type));
  if (kv.type != q.type || o.type != q.type) {
    return absl::InvalidArgumentError("cuDNN attention block: q, kv and o differ in type");
  }
  RETURN_IF_ERROR(CheckAligned("AttentionBlockForward16", {{"q", q.data}, {"kv", kv.data}, {"o", o.data}, {"stats", stats}}));
  char* k = static_cast<char*>(const_cast<void*>(kv.data));
  std::unordered_map<int64_t, void*> pack = {{kQ, const_cast<void*>(q.data)},
                                             {kK, k},
                                             {kV, k + static_cast<size_t>(NKV) * hs * 2},
                                             {kO, o.data},
                                             {kStats, stats}};
  try {
    return impl_->Run(stream, {false, q.type, B, L, NH, NKV, hs, causal ? kBlockCausal : kBlockFull, scale}, pack);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("cuDNN attention block forward: ", e.what()));
  }
}

absl::Status CudnnAttention::BlockBackward(cudaStream_t stream, kernels::Ptr dq, kernels::Ptr dkv, kernels::CPtr q,
                                           kernels::CPtr kv, kernels::CPtr o, kernels::CPtr dout, const float* stats,
                                           int B, int L, int NH, int NKV, int hs, bool causal, float scale) {
  // q, o, dout (B,L,NH·hs), kv (B,L,2·NKV·hs), stats (B,NH,L) → dq (B,L,NH·hs), dkv (B,L,2·NKV·hs)
  RETURN_IF_ERROR(Takes(q, B, L, NH * hs, NH, NKV, q.type));
  if (kv.type != q.type || o.type != q.type || dout.type != q.type || dq.type != q.type || dkv.type != q.type) {
    return absl::InvalidArgumentError("cuDNN attention block: dq, dkv, q, kv, o and dout differ in type");
  }
  RETURN_IF_ERROR(CheckAligned("AttentionBlockBackward16", {{"dq", dq.data},
                                                            {"dkv", dkv.data},
                                                            {"q", q.data},
                                                            {"kv", kv.data},
                                                            {"o", o.data},
                                                            {"dout", dout.data},
                                                            {"stats", stats}}));
  const size_t v_at = static_cast<size_t>(NKV) * hs * 2;
  char* k = static_cast<char*>(const_cast<void*>(kv.data));
  char* dk = static_cast<char*>(dkv.data);
  std::unordered_map<int64_t, void*> pack = {{kQ, const_cast<void*>(q.data)},
                                             {kK, k},
                                             {kV, k + v_at},
                                             {kO, const_cast<void*>(o.data)},
                                             {kDO, const_cast<void*>(dout.data)},
                                             {kStats, const_cast<float*>(stats)},
                                             {kDQ, dq.data},
                                             {kDK, dk},
                                             {kDV, dk + v_at}};
  try {
    return impl_->Run(stream, {true, q.type, B, L, NH, NKV, hs, causal ? kBlockCausal : kBlockFull, scale}, pack);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("cuDNN attention block backward: ", e.what()));
  }
}

}  // namespace gantry::GANTRY_CUDA_NS
