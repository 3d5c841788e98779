// A device profile's GEMM rate table (jobspec/cluster.h GemmTable): the profile YAML's
// gemm_table read, written and read back; its errors naming the entry and field; the rule
// between measured shapes (exact at them, linear in log2 of each dimension between them, so
// monotone; clamped beyond them); and the single rates where a precision has no grid.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "jobspec/cluster.h"

namespace gantry::jobspec {
namespace {

// A profile's required keys, then the table's text.
std::string Profile(const std::string& table) {
  return "name: swept\nmemory_gb: 80\npeak_tflops: 989\nmemory_gbs: 3000\nunfused_attention: true\n"
         "gemm_tflops: {bf16_fwd: 700, bf16_bwd: 650, fp32_fwd: 50, fp32_bwd: 45}\n" +
         table;
}

// bf16: m {1024, 4096} x n {1024, 4096} x k {512}; fp32: one shape. Rates in TFLOP/s with few
// digits, so that the YAML's 12 significant digits hold them exactly.
const char kTable[] = R"(gemm_table:
  - {precision: bf16, m: 1024, n: 1024, k: 512, fwd_tflops: 100, bwd_tflops: 90}
  - {precision: bf16, m: 4096, n: 1024, k: 512, fwd_tflops: 300, bwd_tflops: 250}
  - {precision: bf16, m: 1024, n: 4096, k: 512, fwd_tflops: 200, bwd_tflops: 170.5}
  - {precision: bf16, m: 4096, n: 4096, k: 512, fwd_tflops: 600, bwd_tflops: 520.25}
  - {precision: fp32, m: 2048, n: 2048, k: 2048, fwd_tflops: 40, bwd_tflops: 35}
)";

TEST(GemmTableTest, ProfileReadsWritesAndReadsBackItsTable) {
  auto p = ParseProfile(Profile(kTable));
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->gemm_table.entries().size(), 5u);
  EXPECT_FALSE(p->gemm_table.empty(0));
  EXPECT_FALSE(p->gemm_table.empty(1));
  const GemmRate& e = p->gemm_table.entries()[3];
  EXPECT_EQ(e.precision, 0);
  EXPECT_EQ(e.m, 4096);
  EXPECT_EQ(e.n, 4096);
  EXPECT_EQ(e.k, 512);
  EXPECT_EQ(e.fwd, 600e12);
  EXPECT_EQ(e.bwd, 520.25e12);
  EXPECT_EQ(p->gemm_table.entries()[4].precision, 1);

  // Written and read back: every entry, in order, the same (each rate is exact in 12 digits).
  const std::string yaml = ProfileYaml(*p);
  auto again = ParseProfile(yaml);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << yaml;
  ASSERT_EQ(again->gemm_table.entries().size(), 5u) << yaml;
  for (size_t i = 0; i < 5; ++i) {
    const GemmRate &a = p->gemm_table.entries()[i], &b = again->gemm_table.entries()[i];
    EXPECT_EQ(a.precision, b.precision) << i;
    EXPECT_EQ(a.m, b.m) << i;
    EXPECT_EQ(a.n, b.n) << i;
    EXPECT_EQ(a.k, b.k) << i;
    EXPECT_EQ(a.fwd, b.fwd) << i;
    EXPECT_EQ(a.bwd, b.bwd) << i;
  }
  // Inline in a cluster file too.
  ClusterSpec c;
  c.name = "one";
  c.gpus_per_node = 1;
  c.device = *p;
  c.intra = c.inter = {100e9, 1e-6};
  auto cluster = ParseCluster(ClusterYaml(c));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_EQ(cluster->device.gemm_table.entries().size(), 5u);
  // A profile without a table writes none and reads back empty.
  auto plain = ParseProfile(Profile(""));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(plain->gemm_table.empty());
  EXPECT_EQ(ProfileYaml(*plain).find("gemm_table"), std::string::npos);
}

// The error of the profile with this table, which must name every string in `names`.
void ExpectRefused(const std::string& table, std::initializer_list<std::string> names) {
  auto p = ParseProfile(Profile(table));
  ASSERT_FALSE(p.ok()) << table;
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  for (const std::string& name : names) {
    EXPECT_NE(p.status().message().find(name), std::string::npos) << p.status() << "\nshould name: " << name;
  }
}

TEST(GemmTableTest, ErrorsNameTheEntryAndField) {
  const std::string ok0 = "  - {precision: bf16, m: 8, n: 8, k: 8, fwd_tflops: 1, bwd_tflops: 1}\n";
  ExpectRefused("gemm_table: 5\n", {"gemm_table", "sequence"});
  ExpectRefused("gemm_table:\n" + ok0 + "  - {precision: bf16, m: -16, n: 8, k: 8, fwd_tflops: 1, bwd_tflops: 1}\n",
                {"gemm_table[1].m", "> 0"});
  ExpectRefused("gemm_table:\n  - {precision: bf16, m: 8, n: 8.5, k: 8, fwd_tflops: 1, bwd_tflops: 1}\n",
                {"gemm_table[0].n", "whole number"});
  ExpectRefused("gemm_table:\n  - {precision: bf16, m: 8, n: 8, k: x, fwd_tflops: 1, bwd_tflops: 1}\n",
                {"gemm_table[0].k", "number"});
  ExpectRefused("gemm_table:\n  - {precision: fp8, m: 8, n: 8, k: 8, fwd_tflops: 1, bwd_tflops: 1}\n",
                {"gemm_table[0].precision", "bf16", "fp32"});
  ExpectRefused("gemm_table:\n  - {precision: bf16, m: 8, n: 8, k: 8, fwd_tflops: 0, bwd_tflops: 1}\n",
                {"gemm_table[0].fwd_tflops", "> 0"});
  ExpectRefused("gemm_table:\n" + ok0 + "  - {precision: bf16, m: 16, n: 8, k: 8, fwd_tflops: 1}\n",
                {"gemm_table[1].bwd_tflops", "required"});
  ExpectRefused("gemm_table:\n  - {precision: bf16, m: 8, n: 8, k: 8, fwd_tflops: 1, bwd_tflops: 1, batch: 2}\n",
                {"gemm_table[0].batch"});
  ExpectRefused("gemm_table:\n" + ok0 + ok0, {"gemm_table", "entry 1 (bf16 m 8 n 8 k 8) repeats entry 0"});
  // m {8, 16} x n {8, 16}: three of the four measured.
  ExpectRefused("gemm_table:\n" + ok0 +
                    "  - {precision: bf16, m: 16, n: 8, k: 8, fwd_tflops: 1, bwd_tflops: 1}\n"
                    "  - {precision: bf16, m: 8, n: 16, k: 8, fwd_tflops: 1, bwd_tflops: 1}\n",
                {"gemm_table", "bf16", "grid", "m 16 n 16 k 8 is missing"});
  // Made in code: the same rules.
  EXPECT_FALSE(GemmTable::Make({{8, 8, 8, 2, 1, 1}}).ok()) << "precision index 2";
  EXPECT_FALSE(GemmTable::Make({{8, 8, 8, 0, 1, -1}}).ok()) << "a negative rate";
}

TEST(GemmTableTest, RatesAreExactAtMeasuredShapesAndMonotoneBetween) {
  auto p = ParseProfile(Profile(kTable));
  ASSERT_TRUE(p.ok()) << p.status();
  const GemmTable& t = p->gemm_table;
  // Exact (==) at every measured shape: the corner's weight is 1, the others' 0.
  for (const GemmRate& e : t.entries()) {
    EXPECT_EQ(t.Rate(e.precision, false, e.m, e.n, e.k), e.fwd) << e.m << " " << e.n << " " << e.k;
    EXPECT_EQ(t.Rate(e.precision, true, e.m, e.n, e.k), e.bwd) << e.m << " " << e.n << " " << e.k;
    EXPECT_EQ(p->GemmFwd(e.precision, e.m, e.n, e.k), e.fwd);
    EXPECT_EQ(p->GemmBwd(e.precision, e.m, e.n, e.k), e.bwd);
  }
  // Halfway in log2 (m 2048 between 1024 and 4096): the mean of the two; at the centre of the
  // cell the mean of all four. Tolerance: a few roundings of doubles near 1e14 (1e-15 relative
  // each); 1e-13 relative.
  EXPECT_NEAR(t.Rate(0, false, 2048, 1024, 512), 200e12, 200e12 * 1e-13);
  EXPECT_NEAR(t.Rate(0, false, 2048, 2048, 512), (100 + 300 + 200 + 600) / 4.0 * 1e12, 300e12 * 1e-13);
  EXPECT_NEAR(t.Rate(0, true, 1024, 2048, 512), (90 + 170.5) / 2 * 1e12, 130e12 * 1e-13);
  // Monotone along m between 1024 and 4096 (the rate rises there, at every n), and within the
  // measured rates at the segment's ends.
  for (double n : {1024.0, 1500.0, 2048.0, 4096.0}) {
    double last = t.Rate(0, false, 1024, n, 512);
    for (double m = 1024; m <= 4096; m *= 1.05) {
      const double r = t.Rate(0, false, m, n, 512);
      EXPECT_GE(r, last) << "m " << m << " n " << n;
      EXPECT_GE(r, t.Rate(0, false, 1024, n, 512));
      EXPECT_LE(r, t.Rate(0, false, 4096, n, 512));
      last = r;
    }
  }
  // Beyond the measured range: the nearest measured value of each dimension (k's one value for
  // any k).
  EXPECT_EQ(t.Rate(0, false, 65536, 4096, 512), 600e12);
  EXPECT_EQ(t.Rate(0, false, 100, 50, 64), 100e12);
  EXPECT_EQ(t.Rate(0, true, 4096, 50304, 8192), 520.25e12);
  EXPECT_EQ(t.Rate(1, false, 1, 1e9, 3), 40e12) << "fp32's single shape: every shape";
}

TEST(GemmTableTest, APrecisionWithoutAGridTakesTheSingleRates) {
  auto p = ParseProfile(Profile("gemm_table:\n"
                                "  - {precision: bf16, m: 8, n: 8, k: 8, fwd_tflops: 1, bwd_tflops: 2}\n"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->gemm_table.empty(1));
  EXPECT_EQ(p->GemmFwd(1, 4096, 4096, 4096), 50e12) << "fp32: gemm_tflops.fp32_fwd";
  EXPECT_EQ(p->GemmBwd(1, 4096, 4096, 4096), 45e12);
  EXPECT_EQ(p->GemmFwd(0, 4096, 4096, 4096), 1e12) << "bf16: the table's";
  auto plain = ParseProfile(Profile(""));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->GemmFwd(0, 768, 768, 768), 700e12);
  EXPECT_EQ(plain->GemmBwd(0, 768, 768, 768), 650e12);
  // The built-in profiles have none.
  EXPECT_TRUE(BuiltinProfile("h100")->gemm_table.empty());
}

}  // namespace
}  // namespace gantry::jobspec
