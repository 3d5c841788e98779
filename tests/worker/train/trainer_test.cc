#include "worker/train/trainer.h"

#include <gtest/gtest.h>

#include <map>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/safetensors.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"
#include "data/prepare.h"
#include "data/token_file.h"
#include "data/tokenizer.h"
#include "model/hf_io.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/gpt/load_gpt.h"

namespace gantry::train {
namespace {

using testing::ReadFile;
using testing::WriteFile;

// A tiny job on a synthetic corpus with structure (so the loss falls).
class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::vector<uint16_t> toks = testing::PatternedTokens(20000, 5);
    ASSERT_TRUE(data::WriteTokenFile(dir_.File("train.bin"), toks).ok());
    ASSERT_TRUE(data::WriteTokenFile(dir_.File("val.bin"), std::vector<uint16_t>(toks.begin(), toks.begin() + 2000)).ok());
  }
  jobspec::JobSpec Spec(int steps, int ckpt_every = 0) {
    std::string y = "model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 31, seq_len: 16}\n"
                    "data: {train: " + dir_.File("train.bin") + ", val: " + dir_.File("val.bin") + ", shuffle: true}\n"
                    "train: {steps: " + std::to_string(steps) + ", micro_batch: 4, global_batch: 8, lr: 1.0e-2, warmup: " + std::to_string(std::min(steps, 2)) + ", "
                    "min_lr_ratio: 0.1, weight_decay: 0.1, grad_clip: 1.0, seed: 11}\n"
                    "eval: {every: 5, batches: 3}\n";
    if (ckpt_every > 0) y += "checkpoint: {every: " + std::to_string(ckpt_every) + ", dir: " + dir_.File("ckpt") + "}\n";
    auto s = jobspec::ParseJobSpec(y);
    EXPECT_TRUE(s.ok()) << s.status();
    return *s;
  }
  std::vector<float> Losses(const Trainer& t) {
    std::vector<float> l;
    for (const auto& r : t.reports()) l.push_back(r.loss);
    return l;
  }
  std::unique_ptr<Trainer> Make(const jobspec::JobSpec& s, TrainOptions o = {}) {
    o.out = devnull_;
    auto t = Trainer::Create(s, o);
    EXPECT_TRUE(t.ok()) << t.status();
    return std::move(*t);
  }
  void TearDown() override { std::fclose(devnull_); }
  testing::TempDir dir_;
  FILE* devnull_ = std::fopen("/dev/null", "w");
};

// A MoE job reports its routing each step: the step line shows the load-balancing and z
// losses, the share dropped over capacity and the busiest expert's load; the report's counts
// add up (every assignment routed to some expert, dropped ones counted), a tight capacity
// drops some, and a checkpoint of the MoE model resumes to the same losses.
TEST_F(TrainerTest, MoeStepsReportTheRoutingAndResume) {
  jobspec::JobSpec s = Spec(6, 3);
  s.model.n_layer = 2;
  s.model.moe = {4, 1, 0.5, 0.01, 0.001, 1};
  ASSERT_TRUE(s.model.Validate().ok());
  const std::string log = dir_.File("moe.log");
  FILE* out = std::fopen(log.c_str(), "w");
  TrainOptions o;
  o.out = out;
  auto t = Trainer::Create(s, o);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE((*t)->Run().ok());
  std::fclose(out);
  const int64_t per_step = int64_t{8} * 16 * 1 * 2;  // global batch x T x top_k x MoE layers
  for (const StepReport& r : (*t)->reports()) {
    EXPECT_EQ(r.moe_forwards, 2) << "two micro-batches a step";
    EXPECT_EQ(r.moe_assignments, per_step);
    int64_t routed = 0;
    for (int64_t n : r.moe_tokens_per_expert) routed += n;
    EXPECT_EQ(routed, per_step) << "each assignment routed to an expert";
    EXPECT_GT(r.moe_dropped, 0) << "capacity 0.5 drops";
    EXPECT_GT(r.moe_aux, 0.0);
    EXPECT_GT(r.moe_z, 0.0);
  }
  const std::string text = *ReadFileToString(log);
  EXPECT_NE(text.find("| moe aux "), std::string::npos) << text;
  EXPECT_NE(text.find("% load "), std::string::npos) << text;
  // Resumed from step 3, steps 4-6 give the uninterrupted run's losses.
  const std::vector<float> all = Losses(**t);
  std::filesystem::remove_all(dir_.File("ckpt/step_00000006"));
  TrainOptions r;
  r.resume = true;
  auto resumed = Make(s, r);
  ASSERT_TRUE(resumed->Run().ok());
  EXPECT_EQ(Losses(*resumed), std::vector<float>(all.begin() + 3, all.end()));
}

TEST_F(TrainerTest, LossFallsAndValIsReported) {
  auto t = Make(Spec(20));
  ASSERT_TRUE(t->Run().ok());
  auto l = Losses(*t);
  ASSERT_EQ(l.size(), 20u);
  EXPECT_LT(l.back(), l.front() - 0.5f);
  ASSERT_EQ(t->val_losses().size(), 5u);  // step 0, 5, 10, 15, 20
  EXPECT_LT(t->val_losses().back().second, t->val_losses().front().second);
}

TEST_F(TrainerTest, SameSeedSameLossesBitForBit) {
  auto a = Make(Spec(10)), b = Make(Spec(10));
  ASSERT_TRUE(a->Run().ok());
  ASSERT_TRUE(b->Run().ok());
  auto la = Losses(*a), lb = Losses(*b);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * 4));
  EXPECT_EQ(0, std::memcmp(a->model().params(), b->model().params(), a->model().num_params() * 4));
}

TEST_F(TrainerTest, ResumeContinuesExactly) {
  auto full = Make(Spec(12));
  ASSERT_TRUE(full->Run().ok());
  // Stop after 6 steps (the checkpoint at 6) as if preempted, then resume to 12.
  TrainOptions stop;
  stop.stop_after = 6;
  auto first = Make(Spec(12, 6), stop);
  ASSERT_TRUE(first->Run().ok());
  TrainOptions o;
  o.resume = true;
  auto second = Make(Spec(12, 6), o);
  ASSERT_TRUE(second->Run().ok());
  auto lf = Losses(*full), l1 = Losses(*first), l2 = Losses(*second);
  ASSERT_EQ(l2.size(), 6u);
  l1.insert(l1.end(), l2.begin(), l2.end());
  EXPECT_EQ(0, std::memcmp(lf.data(), l1.data(), lf.size() * 4));
  EXPECT_EQ(0, std::memcmp(full->model().params(), second->model().params(), full->model().num_params() * 4));
}

// The data position is in the checkpoint: a run stopped at step 6 (global batch 8: 48 rows
// read) and resumed with a global batch of 16 reads rows 48.. next, as the uninterrupted run
// does. With a learning rate too small to move an fp32 weight, each step's loss is the mean
// over the rows it read, so the resumed step k's loss is the mean of the uninterrupted run's
// steps 2k-7 and 2k-6 (two micro-batches of 8 rows each way). Without the recorded position
// (step x global batch: 96) it would read rows 96.. instead.
TEST_F(TrainerTest, AResumedRunWithAnotherGlobalBatchContinuesTheRowsRead) {
  auto spec = [&](int global, int steps, int ckpt_every = 6) {
    jobspec::JobSpec s = Spec(steps, ckpt_every);
    s.train.global_batch = global;
    s.train.lr = 1e-30;
    s.train.grad_clip = 0;
    s.eval.every = 0;
    return s;
  };
  auto full = Make(spec(8, 12, /*ckpt_every=*/0));
  ASSERT_TRUE(full->Run().ok());
  TrainOptions stop;
  stop.stop_after = 6;
  ASSERT_TRUE(Make(spec(8, 12), stop)->Run().ok());
  const std::string manifest = ReadFile(dir_.File("ckpt/step_00000006/manifest.json"));
  EXPECT_NE(manifest.find("\"rows\": 48"), std::string::npos) << manifest;
  TrainOptions o;
  o.resume = true;
  auto resumed = Make(spec(16, 9), o);
  ASSERT_TRUE(resumed->Run().ok());
  const auto lf = Losses(*full), lr = Losses(*resumed);
  ASSERT_EQ(lr.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const float want = 0.5f * (lf[6 + 2 * i] + lf[7 + 2 * i]);
    EXPECT_NEAR(lr[i], want, 1e-5f * want) << "resumed step " << 7 + i;
  }
}

// Text through a byte-level BPE end to end: prepare writes shards with the fixture tokenizer;
// a job reads them as a glob with data.tokenizer set; its checkpoint records the tokenizer and
// export puts it beside the model, where sample finds it. A tokenizer larger than the model's
// vocabulary is refused before training.
TEST_F(TrainerTest, ATokenizersShardsTrainAndItsExportCarriesTheTokenizer) {
  const std::string tokenizer = testing::SourcePath("tests/reference/fixtures/tokenizer/bpe/tokenizer.json");
  data::PrepareOptions p;
  p.inputs = {testing::SourcePath("tests/reference/fixtures/tokenizer/corpus.txt")};
  p.out_dir = dir_.File("bpe-data");
  p.tokenizer = tokenizer;
  p.shard_tokens = 4000;
  p.val_fraction = 0.1;
  p.documents = data::DocumentCut::kParagraph;  // one file of paragraphs
  auto prepared = data::Prepare(p, nullptr);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_GT(prepared->train_shards.size(), 3u);
  auto spec = jobspec::ParseJobSpec("model: {n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 1024, seq_len: 32}\n"
                           "data: {train: " + dir_.File("bpe-data/train_*.bin") + ", val: " + dir_.File("bpe-data/val_*.bin") +
                           ", shuffle: true, tokenizer: " + tokenizer + "}\n"
                           "train: {steps: 4, micro_batch: 2, global_batch: 4, lr: 1.0e-3, seed: 5}\n"
                           "checkpoint: {every: 4, dir: " + dir_.File("bpe-ckpt") + "}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto t = Make(*spec);
  ASSERT_TRUE(t->Run().ok());
  EXPECT_EQ(Losses(*t).size(), 4u);
  const std::string ckpt = dir_.File("bpe-ckpt/step_00000004");
  EXPECT_NE(ReadFile(ckpt + "/manifest.json").find(tokenizer), std::string::npos) << "data.tokenizer recorded";
  ASSERT_TRUE(checkpoint::ExportCheckpoint(ckpt, dir_.File("hf")).ok());
  EXPECT_EQ(ReadFile(dir_.File("hf/tokenizer.json")), ReadFile(tokenizer));
  auto model = model::LoadHFModel(dir_.File("hf"));
  ASSERT_TRUE(model.ok()) << model.status();
  auto tok = data::TokenizerForModel(dir_.File("hf"), "", (*model)->config().vocab_size);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 1000u);
  EXPECT_EQ((*tok)->Encode("hello world"), (*data::Tokenizer::Load(tokenizer))->Encode("hello world"));
  // A model whose vocabulary is smaller than the tokenizer's is refused.
  spec->model.vocab_size = 512;
  auto refused = Trainer::Create(*spec, TrainOptions{});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("more than model.vocab_size 512"), absl::string_view::npos)
      << refused.status();
}

// With the worker's hook, a checkpoint's files go to it from memory: nothing is written
// under checkpoint.dir (here a path no one can create), and each file is byte for byte the
// one a local checkpoint of the same run holds.
TEST_F(TrainerTest, CheckpointPartsStreamFromMemoryByteForByte) {
  ASSERT_TRUE(Make(Spec(6, 3))->Run().ok());  // local: ckpt/step_00000003, step_00000006
  jobspec::JobSpec s = Spec(6, 3);
  s.checkpoint.dir = "/dev/null/cannot-exist";
  std::map<int64_t, std::map<std::string, std::string>> sent;
  TrainOptions o;
  o.worker.on_checkpoint_part = [&](const std::vector<checkpoint::CheckpointFile>& files, int64_t step) {
    for (const auto& f : files) {
      std::string bytes(f.bytes->size(), '\0');
      RETURN_IF_ERROR(f.bytes->ReadAt(0, bytes.size(), bytes.data()));
      sent[step][f.name] = std::move(bytes);
    }
    return absl::OkStatus();
  };
  auto t = Make(s, o);
  ASSERT_TRUE(t->Run().ok());
  ASSERT_EQ(sent.size(), 2u);
  for (const auto& [step, files] : sent) {
    EXPECT_EQ(files.size(), 3u) << "the part, manifest.json and config.json";
    for (const auto& [name, bytes] : files) {
      auto disk = ReadFileToString(dir_.File("ckpt/" + checkpoint::CheckpointDirName(step) + "/" + name));
      ASSERT_TRUE(disk.ok()) << disk.status();
      EXPECT_TRUE(*disk == bytes) << name << " of step " << step << " differs from the file on disk";
    }
  }
}

TEST_F(TrainerTest, InitFromSavedModelReproducesIt) {
  TrainOptions save;
  save.save_dir = dir_.File("model");
  auto a = Make(Spec(3), save);
  ASSERT_TRUE(a->Run().ok());
  TrainOptions init;
  init.init_from = dir_.File("model");
  auto b = Make(Spec(3), init);
  EXPECT_EQ(0, std::memcmp(a->model().params(), b->model().params(), a->model().num_params() * 4));
}

TEST_F(TrainerTest, InitFromAModelOfOtherShapeIsRefused) {
  TrainOptions save;
  save.save_dir = dir_.File("model");
  ASSERT_TRUE(Make(Spec(1), save)->Run().ok());
  auto s = Spec(1);
  s.model.n_embd = 32;
  TrainOptions init;
  init.init_from = dir_.File("model");
  init.out = devnull_;
  auto t = Trainer::Create(s, init);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("differs from the job spec"), absl::string_view::npos) << t.status();
  EXPECT_NE(t.status().message().find("differs from the job spec's in n_embd (config.json 16, job spec 32)"),
            absl::string_view::npos)
      << t.status();
}

// The trainer's own check (the spec parsed without the config, as a cluster job's is) lists
// every model key that differs, the Llama ones included.
TEST_F(TrainerTest, InitFromNamesEveryModelFieldThatDiffers) {
  TrainOptions save;
  save.save_dir = dir_.File("model");
  ASSERT_TRUE(Make(Spec(1), save)->Run().ok());
  auto s = Spec(1);
  s.model.arch = jobspec::Arch::kLlama;
  TrainOptions init;
  init.init_from = dir_.File("model");
  init.out = devnull_;
  auto t = Trainer::Create(s, init);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("differs from the job spec's in arch (config.json gpt2, job spec llama), "
                                      "ffn_hidden (config.json 64, job spec 256)"),
            absl::string_view::npos)
      << t.status();
  // A Llama config.json against a Llama spec of other grouping, RoPE base and epsilon.
  jobspec::GPTConfig llama = s.model;
  llama.n_kv_head = 1, llama.rope_theta = 500000, llama.norm_eps = 1e-6;
  ASSERT_TRUE(hf::WriteConfig(dir_.File("llama"), llama).ok());
  init.init_from = dir_.File("llama");
  t = Trainer::Create(s, init);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("n_kv_head (config.json 1, job spec 2), rope_theta (config.json 500000, job spec "
                                      "10000), norm_eps (config.json 1e-06, job spec 1e-05)"),
            absl::string_view::npos)
      << t.status();
}

TEST_F(TrainerTest, KeepLeavesTheNewestCheckpoints) {
  auto s = Spec(12, 3);
  s.checkpoint.keep = 2;
  ASSERT_TRUE(Make(s)->Run().ok());
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir_.File("ckpt"))) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"step_00000009", "step_00000012"}));
}

// A resume from a checkpoint the reader refuses fails with the reader's error, and nothing is
// trained or written: the checkpoint and its folder are as they were. The reader's own rules
// (a part missing or truncated, pieces that do not cover the model, another model's shape)
// are tests/checkpoint/gpt_checkpoint_test's BadCheckpointsAreRefusedByName; this case needs
// the trainer: it is the job spec's model that the resume holds the checkpoint to.
TEST_F(TrainerTest, ARefusedResumeTrainsAndWritesNothing) {
  TrainOptions stop;
  stop.stop_after = 6;
  ASSERT_TRUE(Make(Spec(12, 6), stop)->Run().ok());
  const std::string ck = dir_.File("ckpt/step_00000006");
  const std::string part = ReadFile(ck + "/part-00000.safetensors");
  // Another model's shape.
  auto other = Spec(12, 6);
  other.model.n_embd = 32;
  TrainOptions o;
  o.resume = true;
  o.out = devnull_;
  auto t = Trainer::Create(other, o);
  ASSERT_FALSE(t.ok());
  const absl::Status st = t.status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("the checkpoint's model (n_layer 2, n_head 2, n_embd 16"), absl::string_view::npos) << st;
  EXPECT_NE(st.message().find("differs from the job spec's in n_embd (checkpoint 16, job spec 32)"),
            absl::string_view::npos)
      << st;
  // Nothing was overwritten or added.
  EXPECT_EQ(ReadFile(ck + "/part-00000.safetensors"), part);
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir_.File("ckpt"))) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, (std::vector<std::string>{"step_00000006"}));
}

// The device option: a bad name is refused with the reason before anything is allocated;
// without a visible GPU (this machine, CI) a CUDA run of any layout is refused naming the
// device count (where CUDA is not built, saying so).
// One rank on an accelerator: the GPT on the backend, AdamW's state and update beside it,
// through ZeroEngine as every layout. cuda-emulated takes cuda's paths (the host reaches
// the model's memory only through the backend's copies): the cpu losses and evaluations,
// and a checkpoint written from device memory that resumes on cpu with the uninterrupted
// losses.
TEST_F(TrainerTest, OneRankOnCudaEmulatedRunsOnTheDeviceWithTheCpuResults) {
  auto cpu = Make(Spec(12));
  ASSERT_TRUE(cpu->Run().ok());
  TrainOptions emulated;
  emulated.device = "cuda-emulated";
  emulated.stop_after = 6;
  auto dev = Make(Spec(12, /*ckpt_every=*/6), emulated);
  ASSERT_TRUE(dev->Run().ok());
  const auto want = Losses(*cpu), got = Losses(*dev);
  ASSERT_EQ(got.size(), 6u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * want[i]) << "step " << i + 1;
  ASSERT_GE(dev->val_losses().size(), 2u);
  EXPECT_NEAR(dev->val_losses()[1].second, cpu->val_losses()[1].second, 1e-5 * cpu->val_losses()[1].second)
      << "evaluation on the device";
  TrainOptions resume;
  resume.resume = true;
  auto rest = Make(Spec(12, 6), resume);
  ASSERT_TRUE(rest->Run().ok());
  const auto tail = Losses(*rest);
  ASSERT_EQ(tail.size(), 6u);
  for (size_t i = 0; i < tail.size(); ++i) EXPECT_NEAR(tail[i], want[i + 6], 1e-5 * want[i + 6]) << "step " << i + 7;
}

// Where a device library refuses a call (here the emulated cuDNN told to have no plan for
// grouped heads' backward, as a GPU's may), the step falls back (the key/value heads repeated)
// and says so once: in the first step's report and under its step line, not again. The losses
// are those of the run without the refusal (on cuda-emulated the two paths give the same bits).
TEST_F(TrainerTest, ALibrarysRefusalOnCudaEmulatedIsSaidOnceInTheStepReportAndLine) {
  const std::string y = "model: {arch: llama, n_layer: 2, n_head: 2, n_kv_head: 1, n_embd: 16, vocab_size: 31, "
                        "seq_len: 16}\n"
                        "data: {train: " + dir_.File("train.bin") + ", shuffle: true}\n"
                        "train: {steps: 3, micro_batch: 4, global_batch: 4, lr: 1.0e-2, warmup: 1, seed: 11, "
                        "precision: bf16}\n";
  auto spec = jobspec::ParseJobSpec(y);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto run = [&](const std::string& log) {
    FILE* out = std::fopen(log.c_str(), "w");
    TrainOptions o;
    o.out = out;
    o.device = "cuda-emulated";
    auto t = Trainer::Create(*spec, o);
    EXPECT_TRUE(t.ok()) << t.status();
    if (t.ok()) {
      EXPECT_TRUE((*t)->Run().ok());
    }
    std::fclose(out);
    return t.ok() ? std::move(*t) : nullptr;
  };
  auto plain = run(dir_.File("plain.log"));
  ASSERT_TRUE(setenv("GANTRY_EMULATED_CUDNN_NO_PLAN", "grouped-backward", 1) == 0);
  auto refused = run(dir_.File("refused.log"));
  unsetenv("GANTRY_EMULATED_CUDNN_NO_PLAN");
  ASSERT_TRUE(plain && refused);
  ASSERT_EQ(refused->reports().size(), 3u);
  for (const StepReport& r : plain->reports()) EXPECT_TRUE(r.notes.empty()) << "step " << r.step;
  ASSERT_EQ(refused->reports()[0].notes.size(), 1u);
  EXPECT_NE(refused->reports()[0].notes[0].find("cuDNN has no plan for the attention backward"), std::string::npos)
      << refused->reports()[0].notes[0];
  EXPECT_NE(refused->reports()[0].notes[0].find("key/value heads are repeated"), std::string::npos);
  for (size_t i = 1; i < 3; ++i) EXPECT_TRUE(refused->reports()[i].notes.empty()) << "said once: step " << i + 1;
  EXPECT_EQ(Losses(*refused), Losses(*plain));
  const std::string lines = ReadFile(dir_.File("refused.log"));
  const size_t at = lines.find("\n  note: ");
  EXPECT_NE(at, std::string::npos) << lines;
  EXPECT_EQ(lines.find("\n  note: ", at + 1), std::string::npos) << "once: " << lines;
  EXPECT_EQ(ReadFile(dir_.File("plain.log")).find("note:"), std::string::npos);
}

TEST_F(TrainerTest, DevicesThatCannotRunAreRefusedWithTheReason) {
  TrainOptions o;
  o.out = devnull_;
  o.device = "tpu:0";
  auto bad = Trainer::Create(Spec(2), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("expected cpu, cuda, cuda:N, cuda-emulated or cuda-emulated:N"),
            std::string::npos)
      << bad.status();
  for (const char* name : {"cpu:1", "cuda:x", "cuda-emulated:-1", "cuda-emulated:"}) {
    o.device = name;
    EXPECT_TRUE(absl::IsInvalidArgument(Trainer::Create(Spec(2), o).status())) << name;
  }
  o.device = "cuda:0";
  jobspec::JobSpec zero1 = Spec(2);
  zero1.parallel.zero_stage = 1;
  if (kernels::DeviceCount(kernels::BackendKind::kCuda) == 0) {
    for (const jobspec::JobSpec& spec : {Spec(2), zero1}) {
      auto none = Trainer::Create(spec, o);
      ASSERT_FALSE(none.ok());
      EXPECT_TRUE(none.status().code() == absl::StatusCode::kUnavailable ||
                  none.status().code() == absl::StatusCode::kUnimplemented)
          << none.status();
      EXPECT_TRUE(absl::StrContains(none.status().message(), "device(s) visible") ||
                  absl::StrContains(none.status().message(), "no CUDA backend"))
          << none.status();
    }
  } else {
    std::printf("a GPU is visible: tests/gpu runs cuda:0 (this test checks the refusal without one)\n");
  }
}

// Activation checkpointing on the 6-layer, 384-wide model (T 256): full recompute keeps
// each layer's output only and cuts the activation bytes by >= 60%; selective drops
// attention's probabilities. Both leave the losses and parameters bitwise equal.
TEST_F(TrainerTest, RecomputeCutsActivationBytesAndLeavesTheLossesBitwiseEqual) {
  struct Run {
    std::vector<float> losses, params;
    size_t activation_bytes;
  };
  auto run = [&](const std::string& mode) {
    auto spec = jobspec::ParseJobSpec("model: {n_layer: 6, n_head: 6, n_embd: 384, vocab_size: 31, seq_len: 256}\n"
                             "data: {train: " + dir_.File("train.bin") + ", shuffle: true}\n"
                             "train: {steps: 3, micro_batch: 2, global_batch: 2, lr: 1.0e-3, seed: 3, recompute: " + mode + "}\n");
    EXPECT_TRUE(spec.ok()) << spec.status();
    auto t = Make(*spec);
    EXPECT_TRUE(t->Run().ok());
    return Run{Losses(*t), std::vector<float>(t->model().params(), t->model().params() + t->model().num_params()),
               t->model().activation_bytes()};
  };
  const Run none = run("none"), full = run("full"), selective = run("selective");
  const double cut = 1.0 - static_cast<double>(full.activation_bytes) / none.activation_bytes;
  std::printf("activation bytes: none %.1f MB, full %.1f MB (%.0f%% less), selective %.1f MB\n",
              none.activation_bytes / 1e6, full.activation_bytes / 1e6, 100 * cut, selective.activation_bytes / 1e6);
  EXPECT_GE(cut, 0.6);
  EXPECT_LT(selective.activation_bytes, none.activation_bytes);
  EXPECT_EQ(full.losses, none.losses) << "bitwise";
  EXPECT_EQ(selective.losses, none.losses) << "bitwise";
  EXPECT_EQ(full.params, none.params);
  EXPECT_EQ(selective.params, none.params);
  auto bad = jobspec::ParseJobSpec("model: {n_layer: 1, n_head: 1, n_embd: 8, vocab_size: 31, seq_len: 8}\ndata: {train: x}\n"
                          "train: {steps: 1, micro_batch: 1, lr: 1.0e-3, recompute: some}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("train.recompute"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace gantry::train
