// Grouped-query attention's key/value heads repeated for the multi-head attention ops, and
// the gradient summed back (Hugging Face's repeat_kv). CPU reference in kernels/cpu/gqa.cc.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/types.h"

namespace gantry::kernels {

// The heads of grouped-query attention: positive, and the query heads a multiple of the
// key/value heads. An error names op.
inline absl::Status CheckGroups(const char* op, int NH, int NKV, int hd) {
  if (NH > 0 && NKV > 0 && hd > 0 && NH % NKV == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", NH, " query heads over ", NKV, " key/value heads of ", hd,
                                                 " (the query heads must be a multiple of the key/value heads)"));
}

// Grouped-query attention through the multi-head attention ops, as HF's repeat_kv: rows of
// qkv ((NH + 2 NKV) * hd) → rows of (3 NH * hd): the query heads, then each key and each value
// head repeated NH / NKV times (query head h reads key/value head h / (NH / NKV)). Exact.
void gqa_expand(Ptr out, CPtr qkv, int64_t rows, int NH, int NKV, int hd);
// The gradient back: dqkv3 rows (3 NH * hd) → dqkv rows ((NH + 2 NKV) * hd), overwritten: the
// query heads' as they are, each key/value head's the sum over the query heads that read it (in
// head order, in fp32, rounded once).
void gqa_reduce(Ptr dqkv, CPtr dqkv3, int64_t rows, int NH, int NKV, int hd);

}  // namespace gantry::kernels
