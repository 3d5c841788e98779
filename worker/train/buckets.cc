#include "worker/train/buckets.h"

#include <algorithm>

namespace gantry::train {

std::vector<FlatRange> MergedRanges(const std::vector<jobspec::ParamTensor>& tensors,
                                    const std::function<bool(const jobspec::ParamTensor&)>& keep) {
  std::vector<FlatRange> out;
  for (const jobspec::ParamTensor& t : tensors) {
    if (!keep(t)) continue;
    if (!out.empty() && out.back().second == t.offset) {
      out.back().second = t.offset + t.numel;
    } else {
      out.push_back({t.offset, t.offset + t.numel});
    }
  }
  return out;
}

std::vector<FlatRange> Complement(const std::vector<FlatRange>& ranges, size_t n) {
  std::vector<FlatRange> rest;
  size_t at = 0;
  for (const auto& [b, e] : ranges) {
    if (at < b) rest.push_back({at, b});
    at = e;
  }
  if (at < n) rest.push_back({at, n});
  return rest;
}

std::vector<BucketPlan> GroupUnits(const std::vector<size_t>& unit_bounds, double bucket_bytes, bool one_unit_each,
                                   std::vector<int>* unit_bucket, const std::vector<int>& breaks) {
  const int units = static_cast<int>(unit_bounds.size()) - 1;
  unit_bucket->assign(static_cast<size_t>(std::max(units, 0)), -1);
  std::vector<BucketPlan> buckets;
  bool filling = false;
  for (int u = units - 1; u >= 0; --u) {
    if (!filling || one_unit_each) {
      BucketPlan b;
      b.end = unit_bounds[static_cast<size_t>(u) + 1];
      buckets.push_back(b);
    }
    BucketPlan& b = buckets.back();
    b.begin = unit_bounds[static_cast<size_t>(u)];
    ++b.units;
    (*unit_bucket)[static_cast<size_t>(u)] = static_cast<int>(buckets.size()) - 1;
    filling = static_cast<double>(b.size()) * sizeof(float) < bucket_bytes &&
              std::find(breaks.begin(), breaks.end(), u) == breaks.end();
  }
  for (size_t k = 0; k < buckets.size(); ++k) buckets[k].lead = static_cast<int>(k);
  return buckets;
}

std::vector<BucketPlan> CutAtRanges(const std::vector<BucketPlan>& buckets, const std::vector<FlatRange>& ranges,
                                    std::vector<int>* unit_bucket) {
  std::vector<BucketPlan> cut;
  std::vector<int> lead_of(buckets.size());
  for (size_t k = 0; k < buckets.size(); ++k) {
    const BucketPlan& b = buckets[k];
    lead_of[k] = static_cast<int>(cut.size());
    size_t at = b.begin;
    auto add = [&](size_t lo, size_t hi, bool expert) {
      if (lo >= hi) return;
      BucketPlan part = b;
      part.begin = lo;
      part.end = hi;
      part.lead = lead_of[k];
      part.units = cut.size() == static_cast<size_t>(lead_of[k]) ? b.units : 0;
      part.expert = expert;
      cut.push_back(part);
    };
    for (const auto& [xb, xe] : ranges) {
      const size_t lo = std::max(xb, b.begin), hi = std::min(xe, b.end);
      if (lo >= hi) continue;
      add(at, lo, false);
      add(lo, hi, true);
      at = hi;
    }
    add(at, b.end, false);
  }
  for (int& k : *unit_bucket) k = lead_of[static_cast<size_t>(k)];
  return cut;
}

}  // namespace gantry::train
