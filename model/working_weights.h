// Mixed precision's 16-bit working weights (train.precision bf16 or fp16): the GEMMs read a
// 16-bit copy of their weights and biases while the fp32 parameters stay the master copy.
//   ZeRO 0-2  one persistent image of every GEMM tensor, recast from the parameters when they
//             changed (after every update): Refresh, then Layer and Classifier point into it
//   ZeRO 3    no persistent image (the parameters are gathered a unit at a time): Layer casts
//             the gathered unit's GEMM tensors into a per-unit buffer, Classifier the wte rows
// In fp32 the operands are the parameters themselves. The model (gpt.h) owns one.
#pragma once

#include <cstddef>
#include <vector>

#include "jobspec/model_layout.h"
#include "kernels/backend.h"

namespace gantry::model {

// A layer's GEMM operands in this order (Llama: qkvw is q|k|v, fcw gate|up, fcprojw down_proj;
// no biases).
struct GemmOperands {
  kernels::CPtr qkvw, qkvb, projw, projb, fcw, fcb, fcprojw, fcprojb;
};

class WorkingWeights {
 public:
  // tensors: the shard's parameter layout (outlives this); classifier: the index of the
  // classifier's rows in it.
  WorkingWeights(kernels::Backend* be, const std::vector<jobspec::ParamTensor>* tensors, bool llama,
                 size_t classifier)
      : be_(be), tensors_(tensors), llama_(llama), classifier_(classifier) {}

  // A new precision: every copy goes (made again at the next use).
  void set_precision(kernels::Precision p) {
    lp_ = p;
    Release();
  }
  bool mixed() const { return lp_ != kernels::Precision::kFp32; }

  // The parameters changed: the persistent image is stale.
  void Invalidate() { valid_ = false; }
  // Where the persistent image keeps each GEMM tensor (flat order), for an update that writes
  // it with the parameters (optim::AdamW::Step's working targets); empty in fp32 or before the
  // image exists. After such an update the image is current: Written().
  std::vector<kernels::WorkingCopyRange> ImageRanges();
  void Written() { valid_ = true; }
  // ZeRO 0-2: the persistent image recast from the flat parameters, if stale.
  void Refresh(const float* params);
  // Layer operands from its fp32 GEMM tensors src (GemmOperands order, null where the
  // architecture has none) whose first tensor of the layer is tensors[first]: src itself in
  // fp32, the persistent image's (per_unit false), or src cast now (per_unit: ZeRO 3).
  GemmOperands Layer(const float* const src[8], size_t first, bool per_unit);
  // The classifier's weight (this rank's rows at W), likewise.
  kernels::CPtr Classifier(const float* W, bool per_unit);

  // Bytes of the 16-bit copies held now.
  size_t bytes() const { return (image_.size() + unit_.size() + wte_.size()) * sizeof(float); }
  void ReleaseImage() { image_.Reset(); }  // the parameters' buffer is freed (ZeRO 3)
  void ReleasePerUnit() {                  // training is over
    unit_.Reset();
    wte_.Reset();
  }
  void Release() {
    ReleaseImage();
    ReleasePerUnit();
    valid_ = false;
  }

 private:
  kernels::Backend* be_;
  const std::vector<jobspec::ParamTensor>* tensors_;
  const bool llama_;
  const size_t classifier_;
  kernels::Precision lp_ = kernels::Precision::kFp32;
  // The image: at image_at_[i] 16-bit elements for GEMM tensor i, in flat order.
  kernels::DeviceBuffer image_, unit_, wte_;
  std::vector<size_t> image_at_;
  bool valid_ = false;
};

}  // namespace gantry::model
