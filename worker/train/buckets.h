// The ZeRO engine's buckets as pure functions of the model's layout (zero.h runs them): which
// units' gradients are reduced together, where the expert ranges cut them, and each rank's
// piece of a bucket. tests/worker/train/buckets_test.cc holds them to their contracts.
#pragma once

#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

#include "jobspec/model_layout.h"

namespace gantry::train {

using FlatRange = std::pair<size_t, size_t>;  // [begin, end) in the flat parameter buffer

// The flat ranges of the tensors for which keep(t) holds, adjacent ones merged, in order.
std::vector<FlatRange> MergedRanges(const std::vector<jobspec::ParamTensor>& tensors,
                                    const std::function<bool(const jobspec::ParamTensor&)>& keep);
// [0, n) without `ranges` (sorted, disjoint, within [0, n)).
std::vector<FlatRange> Complement(const std::vector<FlatRange>& ranges, size_t n);

struct BucketPlan {
  size_t begin = 0, end = 0;  // flat range
  int units = 0;              // units whose gradients launch it (counted on its lead only)
  int lead = 0;               // the bucket whose units launch it: itself, or the one it was cut from
  bool expert = false;        // an expert range: reduced over the expert-data-parallel group
  size_t size() const { return end - begin; }
};

// The units (unit_bounds: units + 1 flat offsets) grouped in backward order (the last unit
// first, so that buckets launch in index order as backward finishes them): a bucket takes
// units until it holds at least bucket_bytes of fp32 gradients, or one unit each when
// one_unit_each (ZeRO 3 gathers unit by unit). unit_bucket[u]: the bucket of unit u.
// breaks: units no bucket takes with the unit before them (the interleaved pipeline's chunks
// start there: one backward runs one chunk, and a bucket launches when all its units are done).
std::vector<BucketPlan> GroupUnits(const std::vector<size_t>& unit_bounds, double bucket_bytes, bool one_unit_each,
                                   std::vector<int>* unit_bucket, const std::vector<int>& breaks = {});

// Each bucket cut where it meets `ranges` (sorted, disjoint): the parts inside them are
// `expert`. The parts keep their bucket's place in backward order; the first part of each is
// the lead of the others and keeps the bucket's unit count (0 on the rest); unit_bucket is
// remapped to the leads.
std::vector<BucketPlan> CutAtRanges(const std::vector<BucketPlan>& buckets, const std::vector<FlatRange>& ranges,
                                    std::vector<int>* unit_bucket);

// Elements of a rank's piece of a bucket of `size` over a group of group_size: the pieces
// are equal (the last rank's may be short, or empty) and cover the bucket.
inline size_t PieceSize(size_t size, int group_size) {
  return (size + static_cast<size_t>(group_size) - 1) / static_cast<size_t>(group_size);
}

}  // namespace gantry::train
