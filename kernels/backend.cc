#include "kernels/backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
namespace gantry::kernels {

absl::StatusOr<BackendKind> ParseBackendKind(absl::string_view name) {
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda") return BackendKind::kCuda;
  if (name == "cuda-emulated") return BackendKind::kCudaEmulated;
  return absl::InvalidArgumentError(
      absl::StrCat("device kind '", name, "' is none of cpu, cuda, cuda-emulated"));
}

const char* CapabilityName(Capability c) {
  switch (c) {
    case Capability::kHostAddressable: return "host-addressable";
    case Capability::kPinnedHost: return "pinned-host";
    case Capability::kFusedAttention: return "fused-attention";
    case Capability::kGroupedAttention: return "grouped-attention";
  }
  return "?";
}

absl::StatusOr<AttentionPath> ParseAttentionPath(absl::string_view name) {
  for (AttentionPath p : {AttentionPath::kAuto, AttentionPath::kCudnn, AttentionPath::kFused, AttentionPath::kReference}) {
    if (name == AttentionPathName(p)) return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("attention path '", name, "' is none of auto, cudnn, fused, reference"));
}

const char* AttentionPathName(AttentionPath path) {
  switch (path) {
    case AttentionPath::kAuto: return "auto";
    case AttentionPath::kCudnn: return "cudnn";
    case AttentionPath::kFused: return "fused";
    case AttentionPath::kReference: return "reference";
  }
  return "?";
}

absl::Status CheckTypes(const char* op, std::initializer_list<CPtr> same, std::initializer_list<CPtr> out) {
  const CPtr* first = nullptr;
  for (const CPtr& t : same) {
    if (!t) continue;
    if (first == nullptr) {
      first = &t;
    } else if (t.type != first->type) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": tensors of ", PrecisionName(first->type), " and ",
                                                     PrecisionName(t.type), " in one call"));
    }
  }
  const Precision type = first ? first->type : Precision::kFp32;
  for (const CPtr& t : out) {
    if (t && !t.f32() && t.type != type) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": a ", PrecisionName(t.type), " output of ", PrecisionName(type), " inputs"));
    }
  }
  return absl::OkStatus();
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    Reset();
    backend_ = std::exchange(o.backend_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    host_ = std::exchange(o.host_, false);
  }
  return *this;
}

void DeviceBuffer::Assign(Backend* backend, size_t floats, bool zero) {
  Reset();
  backend_ = backend;
  data_ = static_cast<float*>(backend->Allocate(floats * sizeof(float)));
  if (data_ == nullptr) return;  // the backend keeps the error
  size_ = floats;
  if (zero) backend->Zero(data_, floats * sizeof(float));
}

void DeviceBuffer::AssignHost(Backend* backend, size_t floats) {
  Reset();
  backend_ = backend;
  host_ = true;
  data_ = static_cast<float*>(backend->AllocateHost(floats * sizeof(float)));
  if (data_ == nullptr) return;
  size_ = floats;
  std::memset(data_, 0, floats * sizeof(float));
}

void* Backend::AllocateHost(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 64, std::max<size_t>(bytes, 1)) != 0) return nullptr;
  return p;
}

void Backend::FreeHost(void* p) { std::free(p); }

void DeviceBuffer::Reset() {
  if (backend_ != nullptr && data_ != nullptr) host_ ? backend_->FreeHost(data_) : backend_->Free(data_);
  data_ = nullptr;
  size_ = 0;
  host_ = false;
}

}  // namespace gantry::kernels
