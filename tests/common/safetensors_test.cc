#include "common/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "tests/test_util.h"

namespace gantry {
namespace {

std::string TwoTensors() {
  static const float a[6] = {1, 2, 3, 4, 5, 6};
  static const int32_t b[2] = {7, -8};
  return SerializeSafetensors({{"a", "F32", {2, 3}, a}, {"b", "I32", {2}, b}}, {{"k", "v"}});
}

TEST(SafetensorsTest, RoundTripsTensorsAndMetadata) {
  auto f = SafetensorsFile::FromBytes(TwoTensors(), "mem");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->metadata().at("k"), "v");
  std::vector<int64_t> shape = {2, 3};
  auto a = f->ReadF32("a", &shape);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  auto b = f->ReadI32("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, (std::vector<int32_t>{7, -8}));
}

TEST(SafetensorsTest, HeaderIsEightByteAligned) {
  const std::string s = TwoTensors();
  uint64_t n;
  std::memcpy(&n, s.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
}

TEST(SafetensorsTest, WrongShapeNamesTheTensorAndBothShapes) {
  auto f = SafetensorsFile::FromBytes(TwoTensors(), "m.safetensors");
  ASSERT_TRUE(f.ok());
  std::vector<int64_t> want = {3, 2};
  auto a = f->ReadF32("a", &want);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("'a'"), absl::string_view::npos) << a.status();
  EXPECT_NE(a.status().message().find("[2, 3]"), absl::string_view::npos) << a.status();
  EXPECT_NE(a.status().message().find("[3, 2]"), absl::string_view::npos) << a.status();
}

TEST(SafetensorsTest, MissingTensorIsNotFoundNamingIt) {
  auto f = SafetensorsFile::FromBytes(TwoTensors(), "m.safetensors");
  ASSERT_TRUE(f.ok());
  auto c = f->ReadF32("wte.weight");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("wte.weight"), absl::string_view::npos);
}

TEST(SafetensorsTest, RejectsTruncatedFiles) {
  const std::string full = TwoTensors();
  for (size_t cut : {size_t{0}, size_t{5}, size_t{20}, full.size() - 1}) {
    auto f = SafetensorsFile::FromBytes(full.substr(0, cut), "t.safetensors");
    EXPECT_FALSE(f.ok()) << "cut at " << cut;
    EXPECT_NE(f.status().message().find("t.safetensors"), absl::string_view::npos);
  }
}

TEST(SafetensorsTest, RejectsBadHeaders) {
  auto make = [](const std::string& header, size_t data_bytes) {
    std::string s(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(s.data(), &n, 8);
    return s + header + std::string(data_bytes, '\0');
  };
  EXPECT_FALSE(SafetensorsFile::FromBytes(make("{not json", 0), "x").ok());
  EXPECT_FALSE(SafetensorsFile::FromBytes(make("[1,2]", 0), "x").ok());
  EXPECT_FALSE(SafetensorsFile::FromBytes(
      make(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}})", 12), "x").ok());  // size mismatch
  EXPECT_FALSE(SafetensorsFile::FromBytes(
      make(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4), "x").ok());  // past the end
  EXPECT_FALSE(SafetensorsFile::FromBytes(
      make(R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", 8), "x").ok());  // dtype
  EXPECT_FALSE(SafetensorsFile::FromBytes(
      make(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}})", 8), "x").ok());
  std::string huge(8, '\0');
  const uint64_t n = ~uint64_t{0};
  std::memcpy(huge.data(), &n, 8);
  EXPECT_FALSE(SafetensorsFile::FromBytes(huge, "x").ok());
}

// Found by tests/fuzz/safetensors_fuzz: the element count of [2^62, 4] wrapped (signed
// overflow) to 0, which matched an empty byte range, and the tensor was accepted with a
// shape that claims 2^64 elements.
TEST(SafetensorsTest, RefusesShapesWhoseElementCountOverflows) {
  auto make = [](const std::string& header) {
    std::string s(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(s.data(), &n, 8);
    return s + header;
  };
  for (const char* shape : {"[4611686018427387904,4]", "[4294967296,4294967296,0]", "[2305843009213693952]"}) {
    auto f = SafetensorsFile::FromBytes(
        make(absl::StrCat(R"({"big":{"dtype":"F32","shape":)", shape, R"(,"data_offsets":[0,0]}})")), "x.safetensors");
    ASSERT_FALSE(f.ok()) << shape;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
    EXPECT_NE(f.status().message().find("'big'"), absl::string_view::npos) << f.status();
    EXPECT_NE(f.status().message().find("x.safetensors"), absl::string_view::npos) << f.status();
  }
  // An empty tensor with an ordinary shape is still fine, and reads back empty (found by
  // tests/fuzz/safetensors_fuzz too: ReadF32's and ReadI32's reads passed the empty vector's
  // null data() to memcpy).
  auto empty = SafetensorsFile::FromBytes(make(R"({"e":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]}})"), "x");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->tensors().at("e").numel(), 0);
  auto values = empty->ReadF32("e");
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_TRUE(values->empty());
  auto ints = SafetensorsFile::FromBytes(make(R"({"i":{"dtype":"I32","shape":[0],"data_offsets":[0,0]}})"), "x");
  ASSERT_TRUE(ints.ok()) << ints.status();
  auto i = ints->ReadI32("i");
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_TRUE(i->empty());
}

TEST(SafetensorsTest, ConvertsHalfPrecisionTypes) {
  const uint16_t bf16[2] = {0x3f80, 0xc000};  // 1.0, -2.0
  const uint16_t f16[3] = {0x3c00, 0xc000, 0x0001};  // 1.0, -2.0, smallest subnormal
  // Hand-written file with both dtypes.
  std::string header = R"({"b":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"h":{"dtype":"F16","shape":[3],"data_offsets":[4,10]}})";
  std::string file(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  file += header;
  file.append(reinterpret_cast<const char*>(bf16), 4);
  file.append(reinterpret_cast<const char*>(f16), 6);
  auto f = SafetensorsFile::FromBytes(file, "half");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*f->ReadF32("b"), (std::vector<float>{1.0f, -2.0f}));
  auto h = *f->ReadF32("h");
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.0f);
  EXPECT_FLOAT_EQ(h[2], 5.9604645e-08f);
}

TEST(SafetensorsTest, WriteIsAtomicAndReadable) {
  testing::TempDir dir;
  const float a[2] = {3, 4};
  ASSERT_TRUE(WriteSafetensors(dir.File("w.safetensors"), {{"a", "F32", {2}, a}}).ok());
  auto f = SafetensorsFile::Open(dir.File("w.safetensors"));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f->ReadF32("a"), (std::vector<float>{3, 4}));
  auto missing = SafetensorsFile::Open(dir.File("nope.safetensors"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gantry
