// A GPT's checkpoint read back through checkpoint/gpt (LoadCheckpoint into a model::GPT) and
// the manifest's layout (ReadCheckpointLayout), with the manifests and parts that the fuzz
// target found to break them: each is refused naming the field or the piece. The format
// without a model is checkpoint_format_test's; a bad checkpoint's refusal (a part missing or
// truncated, pieces that do not cover the model, another model's shape) is here; that a
// refused resume trains nothing is trainer_test's.
#include "checkpoint/gpt/load_gpt.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "common/file_util.h"
#include "common/safetensors.h"
#include "model/gpt.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"

namespace gantry::checkpoint {
namespace {

using testing::ReadFile;
using testing::WriteFile;

// A checkpoint of a tiny GPT-2 (dp 1, one part) by Gantry's own writers, whose manifest the
// test then edits.
class CheckpointManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_.InitRandom(3);
    const size_t n = model_.num_params();
    m_.assign(n, 0.5f), v_.assign(n, 0.25f);
    std::filesystem::create_directories(ck_);
    ASSERT_TRUE(WriteCheckpointPart(ck_, 0, model_.tensors(), {{0, n, model_.params(), m_.data(), v_.data()}}).ok());
    CheckpointState st;
    st.step = 10, st.seed = 1337, st.data_rows = 40, st.tokenizer = "gpt2/tokenizer.json";
    ASSERT_TRUE(WriteCheckpointManifest(ck_, config_, st, CheckpointLayout{}, 1).ok());
    manifest_ = nlohmann::json::parse(ReadFile(ck_ + "/manifest.json"));
  }
  // The manifest with one change written over the checkpoint's.
  void Edit(const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json j = manifest_;
    change(j);
    WriteFile(ck_ + "/manifest.json", j.dump());
  }
  absl::Status Load() {
    model::GPT into(config_);
    std::vector<float> m(into.num_params()), v(into.num_params());
    return LoadCheckpoint(ck_, into, m.data(), v.data()).status();
  }
  absl::Status Layout() { return ReadCheckpointLayout(*DirectorySource(ck_)).status(); }
  const jobspec::GPTConfig config_{8, 16, 2, 2, 8};
  model::GPT model_{config_};
  std::vector<float> m_, v_;
  testing::TempDir dir_;
  const std::string ck_ = dir_.File("ckpt/step_00000010");
  nlohmann::json manifest_;
};

// Found by tests/fuzz/checkpoint_fuzz: a layout that is not an object, or a field of it that
// is not a number, threw nlohmann's type_error out of ReadCheckpointLayout; a float step
// (5e71) was converted to an integer with undefined behaviour; a data.tokenizer that is not a
// string threw out of LoadCheckpoint. Each is an error naming the field (a manifest may come
// off the network from a shard server).
TEST_F(CheckpointManifestTest, FieldsOfTheWrongTypeAreRefusedNamingTheField) {
  ASSERT_TRUE(Layout().ok()) << Layout();
  ASSERT_TRUE(Load().ok()) << Load();
  const std::string file = ck_ + "/manifest.json";
  using J = nlohmann::json;
  struct Case {
    std::function<void(J&)> change;
    std::string want;
  };
  // Read by ReadCheckpointLayout.
  for (const Case& k : std::vector<Case>{
           {[](J& j) { j["layout"] = J::array({1, 2}); }, "layout is [1,2], not an object"},
           {[](J& j) { j["layout"] = "dp2"; }, "layout is \"dp2\", not an object"},
           {[](J& j) { j["layout"]["dp"] = "x"; }, "layout.dp is \"x\", not an integer >= 1"},
           {[](J& j) { j["layout"]["tp"] = 2.5; }, "layout.tp is 2.5, not an integer >= 1"},
           {[](J& j) { j["layout"]["zero_stage"] = J::object(); }, "layout.zero_stage is {}, not an integer >= 0"},
           {[](J& j) { j["layout"]["pp"] = 4294967297; }, "layout.pp is 4294967297, not an integer >= 1"},
           {[](J& j) { j["step"] = 5e71; }, "step is 5e+71, not an integer >= 0"}}) {
    Edit(k.change);
    const absl::Status st = Layout();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_EQ(std::string(st.message()), absl::StrCat(file, ": ", k.want));
  }
  // Read by LoadCheckpoint, which reads the manifest's step, seed and data.
  for (const Case& k : std::vector<Case>{
           {[](J& j) { j["step"] = 5e71; }, "step is 5e+71, not an integer >= 0"},
           {[](J& j) { j["step"] = 10.0; }, "step is 10.0, not an integer >= 0"},
           {[](J& j) { j["data"]["tokenizer"] = 5; }, "data.tokenizer is 5, not a string"},
           {[](J& j) { j["data"]["tokenizer"] = J::array({"a"}); }, "data.tokenizer is [\"a\"], not a string"}}) {
    Edit(k.change);
    const absl::Status st = Load();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_EQ(std::string(st.message()), absl::StrCat(file, ": ", k.want));
  }
}

// Found by tests/fuzz/checkpoint_fuzz (while writing it): a piece named
// T@18446744073709551615 wrapped begin + n and passed the bounds check. One element of
// wpe.weight from 2^64 - 1 covered, in wrapped sums, the last element of wte.weight before it:
// with that element left out of the other part, the pieces tiled the model and the checkpoint
// loaded without it.
TEST_F(CheckpointManifestTest, APieceFromPastTheEndOfItsTensorIsRefusedNamingIt) {
  const jobspec::ParamTensor& wpe = model_.tensors()[1];
  ASSERT_EQ(wpe.name, "wpe.weight");
  const size_t n = model_.num_params(), o = wpe.offset;
  // Part 0: everything but element o - 1 (wte.weight's last).
  ASSERT_TRUE(WriteCheckpointPart(ck_, 0, model_.tensors(),
                                  {{0, o - 1, model_.params(), m_.data(), v_.data()},
                                   {o, n, model_.params() + o, m_.data() + o, v_.data() + o}})
                  .ok());
  // Part 1: that element, named as wpe.weight's from 2^64 - 1.
  std::vector<TensorToWrite> piece;
  for (const auto& [kind, data] : std::vector<std::pair<std::string, const float*>>{
           {"param", model_.params() + o - 1}, {"adamw.m", m_.data() + o - 1}, {"adamw.v", v_.data() + o - 1}}) {
    piece.push_back({kind + "/wpe.weight@18446744073709551615", "F32", {1}, data});
  }
  ASSERT_TRUE(WriteSafetensors(ck_ + "/" + CheckpointPartName(1), piece).ok());
  CheckpointState st;
  st.step = 10, st.seed = 1337;
  ASSERT_TRUE(WriteCheckpointManifest(ck_, config_, st, CheckpointLayout{2, 0}, 2).ok());
  const absl::Status load = Load();
  EXPECT_EQ(load.code(), absl::StatusCode::kDataLoss) << load;
  EXPECT_EQ(std::string(load.message()),
            absl::StrCat(ck_, "/", CheckpointPartName(1),
                         ": 'adamw.m/wpe.weight@18446744073709551615' has 1 elements from 18446744073709551615, "
                         "beyond wpe.weight's ",
                         wpe.numel));
}

// A checkpoint that cannot be read whole is refused with an error naming what is wrong: another
// model's shape (before any part is read), a part the manifest names that is missing or
// truncated, and a manifest whose parts' pieces do not cover the model (here one part named
// twice). Moved from trainer_test (issue 51 item 9): these are the reader's rules, whoever
// resumes; trainer_test keeps only that a refused resume trains and writes nothing.
TEST_F(CheckpointManifestTest, BadCheckpointsAreRefusedByName) {
  ASSERT_TRUE(Load().ok()) << Load();
  const std::string part = ck_ + "/" + CheckpointPartName(0);
  // Another model's shape: the job's model against the checkpoint's config.json.
  jobspec::GPTConfig wider = config_;
  wider.n_embd = 16;
  model::GPT other(wider);
  std::vector<float> m(other.num_params()), v(other.num_params());
  absl::Status st = LoadCheckpoint(ck_, other, m.data(), v.data()).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find(absl::StrCat(ck_, ": the checkpoint's model (n_layer 2, n_head 2, n_embd 8")),
            absl::string_view::npos)
      << st;
  EXPECT_NE(st.message().find("differs from the job spec's in n_embd (checkpoint 8, job spec 16)"),
            absl::string_view::npos)
      << st;
  // A part the manifest names is missing.
  const std::string bytes = ReadFile(part);
  std::filesystem::remove(part);
  st = Load();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(part), absl::string_view::npos) << st;
  // A part that is truncated.
  WriteFile(part, bytes.substr(0, bytes.size() - 100));
  st = Load();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(part), absl::string_view::npos) << st;
  // A manifest naming two parts where one was written: the pieces do not cover the model
  // exactly once.
  WriteFile(part, bytes);
  ASSERT_TRUE(Load().ok()) << Load();
  Edit([](nlohmann::json& j) { j["parts"].push_back(j["parts"][0]); });
  st = Load();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find(absl::StrCat(ck_, ": the parts' param pieces do not cover the ", model_.num_params(),
                                           " parameters exactly once")),
            absl::string_view::npos)
      << st;
}

}  // namespace
}  // namespace gantry::checkpoint
