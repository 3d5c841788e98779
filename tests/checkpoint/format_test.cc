// The checkpoint format without a model (checkpoint/checkpoint.h): parts written by one
// layout read back into another's host buffers (whole, a ZeRO rank's compact m and v, a
// tensor-parallel rank's blocks), and a checkpoint exported to a Hugging Face directory in
// fp32 and bf16. This binary links gantry_checkpoint alone (no model, no kernels, no
// OpenBLAS or OpenMP): that it links at all says the format needs none of them.
#include "checkpoint/checkpoint.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/safetensors.h"
#include "jobspec/model_layout.h"

namespace gantry::checkpoint {
namespace {

namespace fs = std::filesystem;

jobspec::GPTConfig Tiny() {
  jobspec::GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.vocab_size = 16;
  c.max_seq_len = 8;
  return c;
}

// A checkpoint of Tiny() written by two ranks, each its own uneven run of the flat buffer,
// cut into two slices (as over two shard servers): params[i] = i + 0.25 (bf16 rounds some of
// them), m = 1000 + i, v = 2000 + i.
class FormatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gantry_format_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    tensors_ = jobspec::ParameterLayout(Tiny());
    n_ = tensors_.back().offset + tensors_.back().numel;
    params_.resize(n_);
    m_.resize(n_);
    v_.resize(n_);
    for (size_t i = 0; i < n_; ++i) {
      params_[i] = static_cast<float>(i) + 0.25f;
      m_[i] = 1000.0f + static_cast<float>(i);
      v_[i] = 2000.0f + static_cast<float>(i);
    }
    const size_t split = n_ / 3;
    const std::vector<size_t> cuts = {n_ / 2};
    auto piece = [&](size_t b, size_t e) { return CheckpointPiece{b, e, params_.data() + b, m_.data() + b, v_.data() + b}; };
    ASSERT_TRUE(WriteCheckpointPart(dir_.string(), 0, tensors_, {piece(0, split)}, cuts).ok());
    ASSERT_TRUE(WriteCheckpointPart(dir_.string(), 1, tensors_, {piece(split, n_)}, cuts).ok());
    CheckpointState st;
    st.step = 7;
    st.seed = 3;
    st.data_rows = 70;
    CheckpointLayout layout;
    layout.dp = 2;
    ASSERT_TRUE(WriteCheckpointManifest(dir_.string(), Tiny(), st, layout, 2, cuts).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  std::vector<jobspec::ParamTensor> tensors_;
  size_t n_ = 0;
  std::vector<float> params_, m_, v_;
};

TEST_F(FormatTest, AnyLayoutReadsBackIntoWholeBuffersAndAZeroRanksCompactState) {
  std::vector<float> p(n_, -1), m(n_, -1), v(n_, -1);
  auto st = ReadCheckpoint(*DirectorySource(dir_.string()), Tiny(), tensors_, p.data(), m.data(), v.data());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->step, 7);
  EXPECT_EQ(st->seed, 3u);
  EXPECT_EQ(st->data_rows, 70);
  EXPECT_EQ(p, params_);
  EXPECT_EQ(m, m_);
  EXPECT_EQ(v, v_);

  // A ZeRO rank keeping two runs of the flat buffer: its compact m and v hold just those.
  const std::vector<optim::ShardSegment> own = {{n_ / 4, n_ / 2, 0}, {3 * n_ / 4, n_, n_ / 2 - n_ / 4}};
  const size_t local = (n_ / 2 - n_ / 4) + (n_ - 3 * n_ / 4);
  std::vector<float> cm(local, -1), cv(local, -1);
  st = ReadCheckpoint(*DirectorySource(dir_.string()), Tiny(), tensors_, p.data(), cm.data(), cv.data(), &own);
  ASSERT_TRUE(st.ok()) << st.status();
  for (const auto& s : own) {
    for (size_t i = s.flat_begin; i < s.flat_end; ++i) {
      ASSERT_EQ(cm[s.local + i - s.flat_begin], m_[i]) << "flat element " << i;
      ASSERT_EQ(cv[s.local + i - s.flat_begin], v_[i]) << "flat element " << i;
    }
  }
}

TEST_F(FormatTest, ATensorParallelRankReadsItsBlockOfEachTensor) {
  for (int rank = 0; rank < 2; ++rank) {
    jobspec::ModelShard shard;
    shard.tp = 2;
    shard.tp_rank = rank;
    const std::vector<jobspec::ParamTensor> mine = jobspec::ParameterLayout(Tiny(), shard);
    std::vector<float> p(mine.back().offset + mine.back().numel, -1);
    auto st = ReadCheckpoint(*DirectorySource(dir_.string()), Tiny(), mine, p.data(), nullptr, nullptr);
    ASSERT_TRUE(st.ok()) << st.status();
    size_t checked = 0;
    for (const jobspec::ParamTensor& t : mine) {
      const jobspec::ParamTensor* whole = nullptr;
      for (const auto& w : tensors_) {
        if (w.name == t.name) whole = &w;
      }
      ASSERT_NE(whole, nullptr) << t.name;
      jobspec::ForEachRun(t, [&](int64_t g, int64_t l, int64_t len) {
        for (int64_t k = 0; k < len; ++k, ++checked) {
          ASSERT_EQ(p[t.offset + l + k], params_[whole->offset + g + k]) << t.name << " rank " << rank;
        }
      });
    }
    EXPECT_EQ(checked, p.size()) << "rank " << rank << ": every element of its buffer is a block's";
  }
}

TEST_F(FormatTest, ExportWritesTheHuggingFaceDirectoryWithoutAModel) {
  for (kernels::Precision dtype : {kernels::Precision::kFp32, kernels::Precision::kBf16}) {
    const fs::path out = dir_ / (dtype == kernels::Precision::kBf16 ? "hf_bf16" : "hf_fp32");
    ASSERT_TRUE(ExportCheckpoint(dir_.string(), out.string(), dtype).ok());
    ASSERT_TRUE(fs::exists(out / "config.json"));
    auto f = SafetensorsFile::Open((out / "model.safetensors").string());
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_EQ(f->tensors().size(), tensors_.size());
    for (const jobspec::ParamTensor& t : tensors_) {
      ASSERT_EQ(f->tensors().at(t.name).dtype, dtype == kernels::Precision::kBf16 ? "BF16" : "F32") << t.name;
      auto got = f->ReadF32(t.name, &t.shape);
      ASSERT_TRUE(got.ok()) << got.status();
      for (size_t i = 0; i < t.numel; ++i) {
        const float want = params_[t.offset + i];
        ASSERT_EQ((*got)[i], dtype == kernels::Precision::kBf16 ? kernels::RoundToBf16(want) : want)
            << t.name << "[" << i << "]";
      }
    }
  }
  EXPECT_FALSE(ExportCheckpoint(dir_.string(), (dir_ / "hf_fp16").string(), kernels::Precision::kFp16).ok());
}

TEST_F(FormatTest, AnotherModelShapeIsRefusedNamingTheDifference) {
  jobspec::GPTConfig other = Tiny();
  other.n_layer = 3;
  const std::vector<jobspec::ParamTensor> t = jobspec::ParameterLayout(other);
  std::vector<float> p(t.back().offset + t.back().numel);
  auto st = ReadCheckpoint(*DirectorySource(dir_.string()), other, t, p.data(), nullptr, nullptr);
  ASSERT_EQ(st.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(st.status().message()).find("n_layer"), std::string::npos) << st.status();
}

}  // namespace
}  // namespace gantry::checkpoint
