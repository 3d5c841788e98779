// The ZeRO engine's buckets (worker/train/buckets.h) as pure functions: grouping units in
// backward order, cutting at expert ranges, the ranks' pieces, merged and complementary ranges.
#include "worker/train/buckets.h"

#include <gtest/gtest.h>

#include <string>

namespace gantry::train {
namespace {

// Units of 10, 20, 30 and 40 floats.
const std::vector<size_t> kBounds = {0, 10, 30, 60, 100};

TEST(BucketsTest, UnitsGroupInBackwardOrderUntilABucketHoldsItsBytes) {
  std::vector<int> unit_bucket;
  const auto b = GroupUnits(kBounds, 50 * sizeof(float), /*one_unit_each=*/false, &unit_bucket);
  ASSERT_EQ(b.size(), 2u);
  // The last unit (40 floats) is below 50: the next one joins it; then units 1 and 0.
  EXPECT_EQ(b[0].begin, 30u);
  EXPECT_EQ(b[0].end, 100u);
  EXPECT_EQ(b[0].units, 2);
  EXPECT_EQ(b[1].begin, 0u);
  EXPECT_EQ(b[1].end, 30u);
  EXPECT_EQ(b[1].units, 2);
  EXPECT_EQ(unit_bucket, (std::vector<int>{1, 1, 0, 0}));
  for (size_t k = 0; k < b.size(); ++k) EXPECT_EQ(b[k].lead, static_cast<int>(k));
}

// The interleaved pipeline's chunks start at the break units: no bucket takes a unit with the
// one before it there (one backward runs one chunk; a bucket launches when all its units are
// done), however large the buckets may grow.
TEST(BucketsTest, NoBucketCrossesABreak) {
  std::vector<int> unit_bucket;
  const auto whole = GroupUnits(kBounds, 1e9, false, &unit_bucket);
  ASSERT_EQ(whole.size(), 1u) << "without breaks one bucket takes everything";
  const auto b = GroupUnits(kBounds, 1e9, false, &unit_bucket, /*breaks=*/{2});
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].begin, 30u);  // units 2 and 3
  EXPECT_EQ(b[0].end, 100u);
  EXPECT_EQ(b[0].units, 2);
  EXPECT_EQ(b[1].begin, 0u);  // units 0 and 1
  EXPECT_EQ(b[1].end, 30u);
  EXPECT_EQ(unit_bucket, (std::vector<int>{1, 1, 0, 0}));
}

TEST(BucketsTest, ZeroThreeTakesOneUnitABucketWhateverTheSize) {
  std::vector<int> unit_bucket;
  const auto b = GroupUnits(kBounds, 1e9, /*one_unit_each=*/true, &unit_bucket);
  ASSERT_EQ(b.size(), 4u);
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(b[k].begin, kBounds[3 - k]);
    EXPECT_EQ(b[k].end, kBounds[4 - k]);
    EXPECT_EQ(b[k].units, 1);
  }
  EXPECT_EQ(unit_bucket, (std::vector<int>{3, 2, 1, 0}));
}

TEST(BucketsTest, BucketsCoverTheBufferOnceWhateverTheSize) {
  for (double bytes : {1.0, 39.0 * 4, 40.0 * 4, 71.0 * 4, 1e12}) {
    std::vector<int> unit_bucket;
    const auto b = GroupUnits(kBounds, bytes, false, &unit_bucket);
    size_t at = 100;
    int units = 0;
    for (const BucketPlan& p : b) {  // descending, contiguous
      EXPECT_EQ(p.end, at) << bytes;
      EXPECT_LT(p.begin, p.end);
      at = p.begin;
      units += p.units;
    }
    EXPECT_EQ(at, 0u) << bytes;
    EXPECT_EQ(units, 4) << bytes;
    for (size_t u = 0; u < 4; ++u) {
      const BucketPlan& p = b[static_cast<size_t>(unit_bucket[u])];
      EXPECT_LE(p.begin, kBounds[u]);
      EXPECT_GE(p.end, kBounds[u + 1]) << "unit " << u << " lies in its bucket";
    }
  }
}

TEST(BucketsTest, ExpertRangesCutBucketsThatKeepTheirLeadAndUnits) {
  std::vector<int> unit_bucket;
  const auto b = GroupUnits(kBounds, 50 * sizeof(float), false, &unit_bucket);  // [30,100) [0,30)
  const auto cut = CutAtRanges(b, {{5, 12}, {40, 50}}, &unit_bucket);
  struct Want {
    size_t begin, end;
    int units, lead;
    bool expert;
  };
  const std::vector<Want> want = {{30, 40, 2, 0, false}, {40, 50, 0, 0, true}, {50, 100, 0, 0, false},
                                  {0, 5, 2, 3, false},   {5, 12, 0, 3, true},  {12, 30, 0, 3, false}};
  ASSERT_EQ(cut.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(cut[k].begin, want[k].begin) << k;
    EXPECT_EQ(cut[k].end, want[k].end) << k;
    EXPECT_EQ(cut[k].units, want[k].units) << k;
    EXPECT_EQ(cut[k].lead, want[k].lead) << k;
    EXPECT_EQ(cut[k].expert, want[k].expert) << k;
  }
  EXPECT_EQ(unit_bucket, (std::vector<int>{3, 3, 0, 0})) << "units launch the leads";
}

TEST(BucketsTest, PiecesAreEqualAndCoverTheBucket) {
  for (size_t size : {1u, 7u, 10u, 64u, 1001u}) {
    for (int g : {1, 2, 3, 4, 8}) {
      const size_t piece = PieceSize(size, g);
      size_t covered = 0;
      for (int r = 0; r < g; ++r) {
        const size_t b = std::min(size, piece * static_cast<size_t>(r)), e = std::min(size, piece * (r + 1));
        covered += e - b;
      }
      EXPECT_EQ(covered, size) << size << " over " << g;
      EXPECT_LT(piece * static_cast<size_t>(g) - size, static_cast<size_t>(g)) << "at most one short piece's worth";
    }
  }
}

TEST(BucketsTest, MergedRangesJoinAdjacentTensorsAndComplementFillsTheGaps) {
  std::vector<jobspec::ParamTensor> t(4);
  const size_t offsets[] = {0, 10, 30, 60}, sizes[] = {10, 20, 30, 40};
  const char* names[] = {"a", "x.mlp.experts.0", "x.mlp.experts.1", "b"};
  for (size_t i = 0; i < 4; ++i) {
    t[i].name = names[i];
    t[i].offset = offsets[i];
    t[i].numel = sizes[i];
  }
  const auto experts = MergedRanges(t, [](const jobspec::ParamTensor& p) {
    return p.name.find(".mlp.experts.") != std::string::npos;
  });
  EXPECT_EQ(experts, (std::vector<FlatRange>{{10, 60}}));
  EXPECT_EQ(Complement(experts, 100), (std::vector<FlatRange>{{0, 10}, {60, 100}}));
  EXPECT_EQ(Complement({}, 100), (std::vector<FlatRange>{{0, 100}}));
  EXPECT_EQ(Complement({{0, 100}}, 100), (std::vector<FlatRange>{}));
  const auto ends = MergedRanges(t, [](const jobspec::ParamTensor& p) { return p.name.size() == 1; });
  EXPECT_EQ(ends, (std::vector<FlatRange>{{0, 10}, {60, 100}}));
}

}  // namespace
}  // namespace gantry::train
