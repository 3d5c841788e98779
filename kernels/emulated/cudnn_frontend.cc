// The emulated cudnn-frontend (cudnn_frontend.h): the checks cuDNN makes of a fused-attention
// graph and its variant pack, and the cpu twin's arithmetic.
#include "kernels/emulated/cudnn_frontend.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kernels/attention.h"
#include "kernels/attention_block.h"
#include "kernels/cast.h"
#include "kernels/emulated/usage.h"
#include "kernels/gqa.h"

namespace gantry::emucudnn {

struct EmuCudnn {
  emucuda::cudaStream_t stream = nullptr;
};

void* OpenLibrary(const char* name, std::string* error) {
  static int token = 0;
  if (std::strcmp(name, "libcudnn.so.9") == 0) return &token;
  *error = absl::StrCat(name, ": cannot open shared object file: No such file or directory (cuda-emulated: the "
                              "stand-in answers to libcudnn.so.9 only)");
  return nullptr;
}

std::string NoPlanSetting() {
  const char* v = std::getenv(kNoPlanVariable);
  return v != nullptr ? v : "";
}

bool NoPlanFor(bool backward, bool grouped) {
  const std::string v = NoPlanSetting();
  if (v.empty()) return false;
  for (absl::string_view w : absl::StrSplit(v, ',')) {
    if (w == "all" || (w == "grouped" && grouped) || (w == "backward" && backward) ||
        (w == "forward" && !backward) || (w == "grouped-backward" && grouped && backward)) {
      return true;
    }
  }
  return false;
}

namespace {
std::mutex executions_mu;
std::map<std::tuple<bool, bool, int64_t>, int64_t>& ExecutionCounts() {
  static auto* counts = new std::map<std::tuple<bool, bool, int64_t>, int64_t>;
  return *counts;
}
}  // namespace

void Executed(bool backward, bool causal, int64_t s) {
  std::lock_guard<std::mutex> l(executions_mu);
  ++ExecutionCounts()[{backward, causal, s}];
}

int64_t Executions(bool backward, bool causal, int64_t s) {
  std::lock_guard<std::mutex> l(executions_mu);
  auto it = ExecutionCounts().find({backward, causal, s});
  return it == ExecutionCounts().end() ? 0 : it->second;
}

namespace cudnn_frontend {
namespace detail {
size_t get_backend_version() { return 91900; }
cudnnStatus_t create_handle(cudnnHandle_t* handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *handle = new EmuCudnn;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t destroy_handle(cudnnHandle_t handle) {
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t set_stream(cudnnHandle_t handle, emucuda::cudaStream_t stream) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}
}  // namespace detail

namespace graph {
namespace {

using TensorPtr = std::shared_ptr<Tensor_attributes>;

std::string Shape(const std::vector<int64_t>& v) { return absl::StrCat("(", absl::StrJoin(v, ", "), ")"); }

size_t ElemBytes(DataType_t t) { return t == DataType_t::FLOAT || t == DataType_t::INT32 ? 4 : 2; }

// The 16-bit value at byte address p of type t, widened.
float Load16(const void* p, DataType_t t) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return t == DataType_t::BFLOAT16 ? kernels::FloatOfBf16(bits) : kernels::FloatOfFp16(bits);
}

}  // namespace

error_t Graph::Fail(error_code_t code, const std::string& message) const {
  return error_t{code, absl::StrCat("(cuda-emulated cuDNN) ", message)};
}

TensorPtr Graph::tensor(const Tensor_attributes& t) {
  tensors_.push_back(std::make_shared<Tensor_attributes>(t));
  return tensors_.back();
}

std::array<TensorPtr, 2> Graph::sdpa(TensorPtr q, TensorPtr k, TensorPtr v, SDPA_attributes a) {
  forward_ = true;
  fwd_ = a;
  auto o = std::make_shared<Tensor_attributes>();
  o->set_name(a.name + "::O");
  TensorPtr stats;
  if (a.generate_stats) {
    stats = std::make_shared<Tensor_attributes>();
    stats->set_name(a.name + "::Stats");
  }
  io_tensors_ = {q, k, v, o, stats};
  return {o, stats};
}

std::array<TensorPtr, 3> Graph::sdpa_backward(TensorPtr q, TensorPtr k, TensorPtr v, TensorPtr o, TensorPtr dO,
                                              TensorPtr stats, SDPA_backward_attributes a) {
  backward_ = true;
  bwd_ = a;
  std::array<TensorPtr, 3> d;
  const char* names[] = {"::dQ", "::dK", "::dV"};
  for (int i = 0; i < 3; ++i) {
    d[i] = std::make_shared<Tensor_attributes>();
    d[i]->set_name(a.name + names[i]);
  }
  io_tensors_ = {q, k, v, o, dO, stats, d[0], d[1], d[2]};
  return d;
}

error_t Graph::validate() {
  if (forward_ == backward_) return Fail(error_code_t::GRAPH_NOT_SUPPORTED, "the stand-in takes one sdpa or one sdpa_backward node a graph");
  if (io_ != DataType_t::HALF && io_ != DataType_t::BFLOAT16) {
    return Fail(error_code_t::GRAPH_NOT_SUPPORTED, "fused attention needs an io data type of HALF or BFLOAT16");
  }
  if (intermediate_ != DataType_t::FLOAT || compute_ != DataType_t::FLOAT) {
    return Fail(error_code_t::GRAPH_NOT_SUPPORTED, "fused attention needs FLOAT intermediate and compute data types");
  }
  const bool scaled = forward_ ? fwd_.has_scale : bwd_.has_scale;
  if (!scaled) return Fail(error_code_t::ATTRIBUTE_NOT_SET, "attn_scale is not set");
  if (forward_ && !fwd_.generate_stats) {
    return Fail(error_code_t::GRAPH_NOT_SUPPORTED, "the stand-in computes training graphs only (generate_stats)");
  }
  const size_t stats_at = forward_ ? 4 : 5;
  // The query side (Q, O; dO, dQ) and the key/value side (K, V; dK, dV): each one shape.
  const bool kv_side[] = {false, true, true, false, false, false, false, true, true};
  std::vector<int64_t> q_shape, kv_shape;
  for (size_t i = 0; i < io_tensors_.size(); ++i) {
    const TensorPtr& t = io_tensors_[i];
    if (t == nullptr) return Fail(error_code_t::ATTRIBUTE_NOT_SET, "a tensor of the node is null");
    if (!t->has_uid()) return Fail(error_code_t::ATTRIBUTE_NOT_SET, t->get_name() + " has no uid");
    const auto& dim = t->get_dim();
    const auto& stride = t->get_stride();
    if (i == stats_at) {
      if (t->get_data_type() != DataType_t::FLOAT) {
        return Fail(error_code_t::INVALID_VALUE, t->get_name() + ": the softmax statistics are FLOAT");
      }
      // Outputs inherit their dims from the node; the inputs state theirs.
      if (!dim.empty() && (dim.size() != 4 || dim[3] != 1)) {
        return Fail(error_code_t::INVALID_VALUE, t->get_name() + ": statistics are (B, H, S, 1), not " + Shape(dim));
      }
      if (!t->get_is_output() && stride.size() != 4) {
        return Fail(error_code_t::ATTRIBUTE_NOT_SET, t->get_name() + " has no strides");
      }
      continue;
    }
    if (dim.size() != 4 || stride.size() != 4) {
      return Fail(error_code_t::ATTRIBUTE_NOT_SET, t->get_name() + ": 4 dims and 4 strides, (B, H, S, D), are needed");
    }
    if (stride[3] != 1) {
      return Fail(error_code_t::GRAPH_NOT_SUPPORTED, t->get_name() + ": the innermost (D) stride must be 1");
    }
    std::vector<int64_t>& shape = kv_side[i] ? kv_shape : q_shape;
    if (shape.empty()) shape = dim;
    if (dim != shape) {
      return Fail(error_code_t::INVALID_VALUE, t->get_name() + " is " + Shape(dim) + ", the node's other " +
                                                   (kv_side[i] ? "key/value" : "query") + " tensors " + Shape(shape));
    }
    if (t->get_data_type() != DataType_t::NOT_SET && t->get_data_type() != io_) {
      return Fail(error_code_t::INVALID_VALUE, t->get_name() + ": its data type is not the graph's io type");
    }
  }
  for (const auto* shape : {&q_shape, &kv_shape}) {
    for (int64_t x : *shape) {
      if (x <= 0) return Fail(error_code_t::INVALID_VALUE, "dims must be positive: " + Shape(*shape));
    }
  }
  // Grouped-query attention: K and V may have fewer heads than Q, each a factor of Q's (query
  // head h reads key/value head h / (h_q / h_k)); dK and dV have K's and V's.
  if (q_shape[1] % kv_shape[1] != 0) {
    return Fail(error_code_t::GRAPH_NOT_SUPPORTED,
                absl::StrCat("For group-query attention, number of heads for key and query must be a factor of number "
                             "of heads for query (h_q ", q_shape[1], ", h_k ", kv_shape[1], ")"));
  }
  if (kv_shape[0] != q_shape[0]) {
    return Fail(error_code_t::INVALID_VALUE, "Q is " + Shape(q_shape) + ", K and V " + Shape(kv_shape) +
                                                 ": one batch size");
  }
  if (kv_shape[2] != q_shape[2] || kv_shape[3] != q_shape[3]) {
    // cuDNN also takes s_q != s_kv and d_v != d_qk; the stand-in computes self-attention only.
    return Fail(error_code_t::GRAPH_NOT_SUPPORTED, "the stand-in computes s_q = s_kv and d_qk = d_v only; Q is " +
                                                       Shape(q_shape) + ", K and V " + Shape(kv_shape));
  }
  const std::vector<int64_t>& shape = q_shape;
  if (shape[2] == 1) return Fail(error_code_t::GRAPH_NOT_SUPPORTED, "s_q = s_kv = 1 is not supported.");
  const int64_t d = shape[3];
  if (d % 8 != 0 || d > 256) {
    return Fail(error_code_t::GRAPH_NOT_SUPPORTED,
                absl::StrCat("head dim ", d, ": fused attention takes multiples of 8 up to 256"));
  }
  stage_ = Stage::kValidated;
  return {};
}

error_t Graph::build_operation_graph(cudnnHandle_t handle) {
  if (handle == nullptr) return Fail(error_code_t::ATTRIBUTE_NOT_SET, "build_operation_graph needs a handle");
  if (stage_ != Stage::kValidated) return Fail(error_code_t::INVALID_VALUE, "validate the graph first");
  stage_ = Stage::kBuilt;
  return {};
}

error_t Graph::create_execution_plans(const std::vector<HeurMode_t>& modes) {
  if (stage_ != Stage::kBuilt) return Fail(error_code_t::INVALID_VALUE, "build_operation_graph first");
  if (modes.empty()) return Fail(error_code_t::INVALID_VALUE, "no heuristic mode");
  stage_ = Stage::kPlanned;
  return {};
}

error_t Graph::check_support() {
  if (stage_ != Stage::kPlanned) return Fail(error_code_t::INVALID_VALUE, "create_execution_plans first");
  const int64_t h_q = io_tensors_[0]->get_dim()[1], h_k = io_tensors_[1]->get_dim()[1];
  if (NoPlanFor(backward_, h_q != h_k)) {
    return Fail(error_code_t::GRAPH_NOT_SUPPORTED,
                absl::StrCat("no engine config supports this ", backward_ ? "sdpa_backward" : "sdpa", " graph (",
                             h_q, " query heads over ", h_k, " key/value heads; ", kNoPlanVariable, "=",
                             NoPlanSetting(), ")"));
  }
  stage_ = Stage::kSupported;
  return {};
}

error_t Graph::build_plans() {
  if (stage_ != Stage::kSupported) return Fail(error_code_t::INVALID_VALUE, "check_support first");
  stage_ = Stage::kReady;
  return {};
}

error_t Graph::get_workspace_size(int64_t& bytes) const {
  if (stage_ != Stage::kReady) return Fail(error_code_t::INVALID_VALUE, "build_plans first");
  bytes = WorkspaceBytes();
  return {};
}

int64_t Graph::WorkspaceBytes() const {
  // What cuDNN's fused attention keeps beside its tensors, roughly: the forward a row of fp32
  // per query (B, H_q, S), the deterministic backward also an fp32 dQ accumulator (B, H_q, S,
  // D). Never zero, so a caller that passes no workspace fails here as it would on a GPU.
  const auto& q = io_tensors_[0]->get_dim();
  const int64_t rows = q[0] * q[1] * q[2];
  return 4 * rows * (backward_ ? q[3] + 1 : 1);
}

error_t Graph::execute(cudnnHandle_t handle, std::unordered_map<int64_t, void*>& pack, void* workspace) const {
  if (handle == nullptr) return Fail(error_code_t::INVALID_VALUE, "execute needs a handle");
  const gantry::emu::BusyScope busy;  // the graph is the device's kernel
  if (stage_ != Stage::kReady) return Fail(error_code_t::GRAPH_EXECUTION_FAILED, "the graph's plans are not built");
  const auto& dim = io_tensors_[0]->get_dim();
  const int B = static_cast<int>(dim[0]), NH = static_cast<int>(dim[1]), T = static_cast<int>(dim[2]),
            hs = static_cast<int>(dim[3]);
  const int NKV = static_cast<int>(io_tensors_[1]->get_dim()[1]);  // K's heads (validate: V's too)
  const int C = NH * hs, W = (NH + 2 * NKV) * hs;
  const size_t stats_at = forward_ ? 4 : 5;
  // Each tensor's pointer: bound, aligned, its rows aligned, its extent in device memory.
  std::vector<char*> ptr(io_tensors_.size());
  for (size_t i = 0; i < io_tensors_.size(); ++i) {
    const TensorPtr& t = io_tensors_[i];
    auto it = pack.find(t->get_uid());
    if (it == pack.end() || it->second == nullptr) {
      return Fail(error_code_t::INVALID_VALUE, absl::StrCat(t->get_name(), " (uid ", t->get_uid(), ") is not bound"));
    }
    ptr[i] = static_cast<char*>(it->second);
    if (reinterpret_cast<uintptr_t>(ptr[i]) % 16 != 0) {
      return Fail(error_code_t::INVALID_VALUE, t->get_name() + " is not 16-byte aligned");
    }
    const bool stats = i == stats_at;
    const size_t elem = stats ? 4 : ElemBytes(io_);
    std::vector<int64_t> stride = t->get_stride();
    if (stride.empty()) stride = {int64_t{NH} * T, T, 1, 1};  // an output's default: packed
    if (!stats && (stride[2] * static_cast<int64_t>(elem)) % 16 != 0) {
      return Fail(error_code_t::INVALID_VALUE, t->get_name() + ": its row stride is not a multiple of 16 bytes");
    }
    const int64_t heads = stats ? NH : t->get_dim()[1];
    const int64_t last = (B - 1) * stride[0] + (heads - 1) * stride[1] + (T - 1) * stride[2] + (stats ? 0 : hs - 1);
    if (!emucuda::IsDeviceMemory(ptr[i], static_cast<size_t>(last + 1) * elem)) {
      return Fail(error_code_t::INVALID_VALUE, t->get_name() + " does not lie in device memory");
    }
  }
  // The workspace: as large as get_workspace_size said, in device memory; the stand-in
  // scribbles over it, as a GPU leaves it holding the last call's partial results.
  const int64_t ws = WorkspaceBytes();
  if (workspace == nullptr || !emucuda::IsDeviceMemory(workspace, static_cast<size_t>(ws))) {
    return Fail(error_code_t::INVALID_VALUE, absl::StrCat("the workspace (", ws, " bytes, get_workspace_size) is ",
                                                          workspace == nullptr ? "null" : "not in device memory"));
  }
  std::memset(workspace, 0xA5, static_cast<size_t>(ws));
  const float scale = forward_ ? fwd_.scale : bwd_.scale;  // honoured: the cpu twin scores with it
  const kernels::Precision p = io_ == DataType_t::BFLOAT16 ? kernels::Precision::kBf16 : kernels::Precision::kFp16;
  const size_t bt = static_cast<size_t>(B) * T;
  // Element (b, h, t, d) of tensor i, as a byte address.
  auto at = [&](size_t i, int b, int h, int t, int d) {
    const auto& s = io_tensors_[i]->get_stride();
    return ptr[i] + (b * s[0] + h * s[1] + t * s[2] + d) * static_cast<int64_t>(ElemBytes(io_));
  };
  auto heads = [&](size_t i) { return static_cast<int>(io_tensors_[i]->get_dim()[1]); };
  // Tensors (index list) packed side by side in rows of w, each its heads' hs channels: f(the
  // element's address in tensor i, its index in the rows) for every element.
  auto each = [&](std::initializer_list<size_t> parts, int w, auto f) {
    int col = 0;
    for (size_t i : parts) {
      for (int b = 0; b < B; ++b)
        for (int h = 0; h < heads(i); ++h)
          for (int t = 0; t < T; ++t)
            for (int d = 0; d < hs; ++d) f(at(i, b, h, t, d), (static_cast<size_t>(b) * T + t) * w + col + h * hs + d);
      col += heads(i) * hs;
    }
  };
  // Those rows gathered, 16-bit of p's type and fp32; and 16-bit rows scattered back.
  auto gather = [&](std::initializer_list<size_t> parts, int w, std::vector<uint16_t>* out16,
                    std::vector<float>* out32) {
    out16->assign(bt * w, 0);
    out32->assign(bt * w, 0.f);
    each(parts, w, [&](char* x, size_t o) {
      std::memcpy(&(*out16)[o], x, 2);
      (*out32)[o] = Load16(x, io_);
    });
  };
  auto scatter = [&](const std::vector<uint16_t>& rows, int w, std::initializer_list<size_t> parts) {
    each(parts, w, [&](char* x, size_t o) { std::memcpy(x, &rows[o], 2); });
  };
  auto stats_at_bht = [&](int b, int h, int t) -> float* {
    const auto& s = io_tensors_[stats_at]->get_stride();
    const int64_t s0 = s.empty() ? int64_t{NH} * T : s[0], s1 = s.empty() ? T : s[1], s2 = s.empty() ? 1 : s[2];
    return reinterpret_cast<float*>(ptr[stats_at]) + b * s0 + h * s1 + t * s2;
  };
  // The cpu twin runs multi-head attention on q|k|v rows of 3C: the key/value heads repeated
  // to the query heads (kernels/gqa.h, exact; NKV = NH: a copy).
  std::vector<uint16_t> packed16, qkv16(bt * 3 * C);
  std::vector<float> packed32, qkv32(bt * 3 * C);
  gather({0, 1, 2}, W, &packed16, &packed32);
  kernels::gqa_expand(kernels::Ptr(qkv16.data(), p), kernels::CPtr(packed16.data(), p), static_cast<int64_t>(bt), NH,
                      NKV, hs);
  kernels::gqa_expand(qkv32.data(), packed32.data(), static_cast<int64_t>(bt), NH, NKV, hs);
  const bool causal = forward_ ? fwd_.causal : bwd_.causal;
  std::vector<float> lse(static_cast<size_t>(B) * NH * T), att;
  std::vector<uint16_t> out16(bt * C);
  // The grouped q|k|v rows as the block twin reads them (kernels/attention_block.h).
  const kernels::HeadRows<const float> q32{packed32.data(), static_cast<int64_t>(T) * W, W};
  const kernels::HeadRows<const float> k32{packed32.data() + C, q32.seq, W};
  const kernels::HeadRows<const float> v32{packed32.data() + C + static_cast<int64_t>(NKV) * hs, q32.seq, W};
  const kernels::AttentionBlock block{B, NH, NKV, hs, T, T, causal, scale, /*first=*/true};
  if (causal) {
    att.resize(static_cast<size_t>(B) * NH * T * T);
    kernels::attention_lse(lse.data(), qkv32.data(), B, T, C, NH, scale);
    kernels::attention_forward(kernels::Ptr(out16.data(), p), att.data(), kernels::CPtr(qkv16.data(), p), B, T, C,
                               NH, p, scale);
  } else {
    // Every key seen (a ring's block below the diagonal): the block twin in fp32, its output
    // rounded to the io type once.
    std::vector<float> out32(bt * C);
    kernels::attention_block_forward({out32.data(), static_cast<int64_t>(T) * C, C}, {lse.data(), T}, q32, k32, v32,
                                     block);
    for (size_t i = 0; i < out32.size(); ++i) out16[i] = kernels::Of16(out32[i], p);
  }
  if (forward_) {
    scatter(out16, C, {3});
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h)
        for (int t = 0; t < T; ++t) *stats_at_bht(b, h, t) = lse[(static_cast<size_t>(b) * NH + h) * T + t];
    Executed(false, causal, T);
    return {};
  }
  // The statistics given: this graph's own (its forward's), or a log-sum-exp over these keys
  // and more (context parallelism's merged one: never below the block's own). Anything else is
  // a wiring error (stale or another row's statistics).
  bool own = causal;
  std::vector<float> stats_in(lse.size());
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const size_t i = (static_cast<size_t>(b) * NH + h) * T + t;
        const float want = lse[i], got = *stats_at_bht(b, h, t), tol = 1e-4f * (1.f + std::fabs(want));
        stats_in[i] = got;
        if (!(std::fabs(got - want) <= tol)) own = false;
        if (!(got >= want - tol) || !std::isfinite(got)) {
          return Fail(error_code_t::INVALID_VALUE,
                      absl::StrCat("the statistics are not a log-sum-exp over this Q and K's keys (or more): row (", b,
                                   ", ", h, ", ", t, ") holds ", got, ", below its own log-sum-exp ", want));
        }
      }
  if (!own) {
    // A block of a longer softmax (or every key seen): the block twin's backward from the
    // given statistics and O, D = rowsum(dO·O) of the values given (the flash-attention
    // identity, as cuDNN computes), in fp32; dQ, dK and dV rounded to the io type once.
    std::vector<uint16_t> o16, dout16b;
    std::vector<float> o32, dout32b, D(lse.size()), dqkv32(bt * W, 0.f);
    gather({3}, C, &o16, &o32);
    gather({4}, C, &dout16b, &dout32b);
    const kernels::HeadRows<const float> o_rows{o32.data(), static_cast<int64_t>(T) * C, C};
    const kernels::HeadRows<const float> do_rows{dout32b.data(), o_rows.seq, C};
    kernels::attention_block_delta({D.data(), T}, do_rows, o_rows, B, NH, hs, T);
    float* dq = dqkv32.data();
    kernels::attention_block_backward({dq, static_cast<int64_t>(T) * W, W}, {dq + C, static_cast<int64_t>(T) * W, W},
                                      {dq + C + static_cast<int64_t>(NKV) * hs, static_cast<int64_t>(T) * W, W}, q32,
                                      k32, v32, do_rows, {stats_in.data(), T}, {D.data(), T}, block);
    std::vector<uint16_t> d16(bt * W);
    for (size_t i = 0; i < d16.size(); ++i) d16[i] = kernels::Of16(dqkv32[i], p);
    scatter(d16, W, {6, 7, 8});
    Executed(true, causal, T);
    return {};
  }
  std::vector<uint16_t> dout16, dqkv3(bt * 3 * C), dqkv16(bt * W);
  std::vector<float> dout32, scratch(att.size());
  gather({4}, C, &dout16, &dout32);
  kernels::attention_backward(kernels::Ptr(dqkv3.data(), p), scratch.data(), kernels::CPtr(dout16.data(), p),
                              kernels::CPtr(qkv16.data(), p), att.data(), B, T, C, NH, scale);
  // Each key/value head's gradient summed over the query heads of its group (kernels/gqa.h).
  kernels::gqa_reduce(kernels::Ptr(dqkv16.data(), p), kernels::CPtr(dqkv3.data(), p), static_cast<int64_t>(bt), NH,
                      NKV, hs);
  scatter(dqkv16, W, {6, 7, 8});
  Executed(true, causal, T);
  return {};
}

}  // namespace graph
}  // namespace cudnn_frontend
}  // namespace gantry::emucudnn
