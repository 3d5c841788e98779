// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// The ring's 16-bit blocks on cuDNN (AttentionBlock::values, kernels/attention_block.h): the
// moves around the SDPA graphs (kernels/cuda/cudnn_attention.h BlockForward, BlockBackward)
// between the ring's fp32
// strided rows and the packed 16-bit tensors cuDNN reads and writes. Defined in
// attention_block.cu.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/attention_block.h"
#include "kernels/cuda/context.h"
#include "kernels/types.h"

namespace gantry::GANTRY_CUDA_NS {

// src's first `width` values of each of L rows of B sequences (fp32 values of dst's 16-bit
// type, so exact), rounded to dst's type → dst (B, L, dst_row) packed, columns [0, width) of
// each row from dst.data.
absl::Status NarrowRows(Context& ctx, kernels::Ptr dst, int64_t dst_row, kernels::HeadRows<const float> src, int B,
                        int L, int width);
// The block's own attention, o (B, L, NH·hd) of a 16-bit type and lse_b (B, NH, L) fp32,
// merged by log-sum-exps into the running (out, lse) as attention_block_forward merges (first:
// written over them).
absl::Status MergeBlock(Context& ctx, kernels::HeadRows<float> out, kernels::RowStats<float> lse, kernels::CPtr o,
                        const float* lse_b, int B, int NH, int hd, int L, bool first);
// dst's first `width` values of each of L rows of B sequences += src's (B, L, src_row) packed
// 16-bit values, widened.
absl::Status AddRows(Context& ctx, kernels::HeadRows<float> dst, kernels::CPtr src, int64_t src_row, int B, int L,
                     int width);

}  // namespace gantry::GANTRY_CUDA_NS
