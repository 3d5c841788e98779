// The job spec (jobspec/job_spec.h): parsing, the normal form, and every refusal naming its
// field. Over 700 lines because each of the spec's rules has a case here that could fail.
#include "jobspec/job_spec.h"

#include <gtest/gtest.h>

#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/file_util.h"
#include "jobspec/planner.h"
#include "tests/test_util.h"

namespace gantry::jobspec {
namespace {

constexpr char kMinimal[] = R"(
model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8}
data: {train: t.bin}
train: {steps: 10, micro_batch: 2, lr: 1.0e-3}
)";

std::string With(const std::string& extra) { return std::string(kMinimal) + extra; }

std::string Error(const std::string& yaml) {
  auto s = ParseJobSpec(yaml);
  EXPECT_FALSE(s.ok()) << yaml;
  return s.ok() ? "" : std::string(s.status().message());
}

TEST(JobSpecTest, ParsesMinimalSpecWithDefaults) {
  auto s = ParseJobSpec(kMinimal);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->model.max_seq_len, 8);  // defaults to seq_len
  EXPECT_EQ(s->train.global_batch, 2);
  EXPECT_EQ(s->grad_accum(), 1);
  EXPECT_EQ(s->train.seed, 1337u);
  EXPECT_DOUBLE_EQ(s->train.grad_clip, 1.0);
}

TEST(JobSpecTest, ResourcesDeviceIsCheckedAndKeptThroughTheNormalisedSpec) {
  auto s = ParseJobSpec(kMinimal);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->resources.device, "cpu");
  auto e = ParseJobSpec(With("resources: {device: cuda-emulated}\nparallel: {dp: 2, zero_stage: 1}\n"));
  ASSERT_TRUE(e.ok()) << e.status();
  auto again = ParseJobSpec(ToYaml(*e));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->resources.device, "cuda-emulated");
  EXPECT_NE(Error(With("resources: {device: tpu}\n")).find("field 'resources.device' is 'tpu': cpu, cuda or cuda-emulated"),
            std::string::npos);
  // cuda runs every layout, as cuda-emulated does.
  EXPECT_TRUE(ParseJobSpec(With("resources: {device: cuda}\n")).ok());
  auto g = ParseJobSpec(With("resources: {device: cuda}\nparallel: {dp: 2, zero_stage: 3}\n"));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->parallel.zero_stage, 3);
}

TEST(JobSpecTest, BundledDemoSpecParses) {
  auto s = LoadJobSpec(testing::SourcePath("configs/demo.yaml"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->data.shuffle);
}

TEST(JobSpecTest, UnknownFieldIsNamedWithItsSection) {
  const std::string e = Error("model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8}\n"
                              "data: {train: t.bin}\ntrain: {steps: 10, micro_batch: 2, lr: 1.0e-3, lrr: 3}\n");
  EXPECT_NE(e.find("unknown field 'train.lrr'"), std::string::npos) << e;
  EXPECT_NE(Error(With("optimiser: {}\n")).find("unknown field 'optimiser'"), std::string::npos);
  EXPECT_NE(Error(With("parallel: {cpp: 2}\n")).find("unknown field 'parallel.cpp'"), std::string::npos);
}

TEST(JobSpecTest, IllTypedFieldIsNamed) {
  const std::string e = Error("model: {n_layer: two, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8}\n"
                              "data: {train: t.bin}\ntrain: {steps: 10, micro_batch: 2, lr: 1.0e-3}\n");
  EXPECT_NE(e.find("'model.n_layer' must be an integer, got 'two'"), std::string::npos) << e;
  const std::string e2 = Error("model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8}\n"
                               "data: {train: t.bin, shuffle: maybe}\ntrain: {steps: 10, micro_batch: 2, lr: 1.0e-3}\n");
  EXPECT_NE(e2.find("'data.shuffle'"), std::string::npos) << e2;
  EXPECT_NE(Error(With("eval: 3\n")).find("'eval' must be a mapping"), std::string::npos);
}

TEST(JobSpecTest, MissingRequiredFieldIsNamed) {
  EXPECT_NE(Error("model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8}\n"
                  "train: {steps: 10, micro_batch: 2, lr: 1.0e-3}\n").find("'data.train' is required"),
            std::string::npos);
}

TEST(JobSpecTest, GlobalBatchErrorShowsTheArithmetic) {
  const std::string e = Error("model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8}\n"
                              "data: {train: t.bin}\ntrain: {steps: 10, micro_batch: 4, global_batch: 10, lr: 1.0e-3}\n");
  EXPECT_NE(e.find("10 is not a multiple of micro_batch 4"), std::string::npos) << e;
}

TEST(JobSpecTest, IncoherentModelIsRefused) {
  EXPECT_NE(Error("model: {n_layer: 2, n_head: 3, n_embd: 16, vocab_size: 256, seq_len: 8}\n"
                  "data: {train: t.bin}\ntrain: {steps: 10, micro_batch: 2, lr: 1.0e-3}\n").find("n_embd"),
            std::string::npos);
  EXPECT_NE(Error("model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8, max_seq_len: 4}\n"
                  "data: {train: t.bin}\ntrain: {steps: 10, micro_batch: 2, lr: 1.0e-3}\n").find("model.seq_len"),
            std::string::npos);
  EXPECT_NE(Error(With("checkpoint: {every: 5}\n")).find("checkpoint.dir"), std::string::npos);
  EXPECT_NE(Error("[1, 2]").find("mapping"), std::string::npos);
  EXPECT_NE(Error("model: {n_layer: [").find("not valid YAML"), std::string::npos);
}

TEST(JobSpecTest, ParallelSectionParsesEveryZeroStage) {
  for (int zero : {0, 1, 2, 3}) {
    auto s = ParseJobSpec(With("parallel: {dp: 2, zero_stage: " + std::to_string(zero) + ", bucket_mb: 4, timeout_s: 60}\n"
                               "resources: {workers: 2}\noptimizer: {placement: worker}\n"));
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->parallel.zero_stage, zero);
    EXPECT_DOUBLE_EQ(s->parallel.bucket_mb, 4);
    EXPECT_EQ(s->world_size(), 2);
  }
  auto d = ParseJobSpec(kMinimal);
  ASSERT_TRUE(d.ok());
  EXPECT_DOUBLE_EQ(d->parallel.bucket_mb, 25);
  EXPECT_EQ(d->optimizer.placement, "worker");
}

TEST(JobSpecTest, IncoherentParallelSpecsAreRefusedWithTheReason) {
  const std::string ps = Error(With("parallel: {dp: 2, zero_stage: 3}\noptimizer: {placement: shardserver}\n"));
  EXPECT_NE(ps.find("'optimizer.placement' shardserver keeps whole parameters on every worker"), std::string::npos) << ps;
  EXPECT_NE(ps.find("parallel.zero_stage 3 shards the parameters"), std::string::npos) << ps;
  const std::string w = Error(With("parallel: {dp: 4}\nresources: {workers: 3}\n"));
  EXPECT_NE(w.find("'resources.workers' 3 workers asked for, but the parallel degrees need dp 4 x tp 1 x pp 1 = 4"), std::string::npos) << w;
  EXPECT_NE(Error(With("parallel: {bucket_mb: 0}\n")).find("'parallel.bucket_mb' must be > 0"), std::string::npos);
  EXPECT_NE(Error(With("parallel: {zero_stage: 4}\n")).find("'parallel.zero_stage' must be 0, 1, 2 or 3"), std::string::npos);
  // ZeRO 2 and 3 shard a tensor-parallel shard's state too (as FSDP with TP); pipeline stages
  // keep to 0 and 1.
  EXPECT_TRUE(ParseJobSpec(With("parallel: {tp: 2, zero_stage: 3}\n")).ok());
  EXPECT_TRUE(ParseJobSpec(With("parallel: {tp: 2, zero_stage: 2}\n")).ok());
  EXPECT_NE(Error(With("parallel: {pp: 2, zero_stage: 2}\n")).find("'parallel.zero_stage' is 2 with pp 2: pipeline stages run with ZeRO 0 or 1"),
            std::string::npos);
  EXPECT_NE(Error(With("optimizer: {placement: gpu}\n")).find("'gpu' is not worker or shardserver"), std::string::npos);
}

TEST(JobSpecTest, PrecisionAndLossScalingAreParsedAndChecked) {
  auto d = ParseJobSpec(kMinimal);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->train.precision, "fp32");
  EXPECT_EQ(d->train.loss_scale, 65536) << "GradScaler's initial scale";
  EXPECT_EQ(d->train.loss_scale_window, 2000) << "GradScaler's growth interval";
  const std::string base = R"(
model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8}
data: {train: t.bin}
)";
  auto train = [&](const std::string& extra) { return base + "train: {steps: 10, micro_batch: 2, lr: 1.0e-3" + extra + "}\n"; };
  for (const char* p : {"fp32", "bf16", "fp16"}) {
    auto s = ParseJobSpec(train(std::string(", precision: ") + p));
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->train.precision, p);
  }
  EXPECT_NE(Error(train(", precision: fp8")).find("field 'train.precision' is 'fp8': fp32, bf16 or fp16"),
            std::string::npos);
  EXPECT_NE(Error(train(", loss_scale: 1000")).find("'train.loss_scale' must be a power of 2"), std::string::npos);
  EXPECT_NE(Error(train(", loss_scale: 0.5")).find("'train.loss_scale' must be a power of 2, at least 1"),
            std::string::npos);
  EXPECT_NE(Error(train(", loss_scale_window: 0")).find("'train.loss_scale_window' must be >= 1"), std::string::npos);
  auto off = ParseJobSpec(train("") + "parallel: {dp: 2, zero_stage: 2}\noptimizer: {offload: cpu}\n");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->optimizer.offload, "cpu");
  EXPECT_EQ(ParseJobSpec(ToYaml(*off))->optimizer.offload, "cpu");
  EXPECT_NE(Error(train("") + "optimizer: {offload: cpu}\n").find("'optimizer.offload' cpu offloads a ZeRO rank's shard"),
            std::string::npos);
  EXPECT_NE(Error(train("") + "optimizer: {offload: nvme}\n").find("'optimizer.offload' is 'nvme': none or cpu"),
            std::string::npos);
  auto both = ParseJobSpec(train("") + "parallel: {dp: 2, zero_stage: 3, offload_params: cpu}\noptimizer: {offload: cpu}\n");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(ParseJobSpec(ToYaml(*both))->parallel.offload_params, "cpu");
  EXPECT_NE(Error(train("") + "parallel: {dp: 2, zero_stage: 3, offload_params: cpu}\n")
                .find("'parallel.offload_params' cpu keeps ZeRO 3's parameter shard in host memory"),
            std::string::npos);
  EXPECT_NE(Error(train("") + "parallel: {dp: 2, zero_stage: 2, offload_params: cpu}\noptimizer: {offload: cpu}\n")
                .find("needs parallel.zero_stage 3 and optimizer.offload cpu"),
            std::string::npos);
  const std::string ps = Error(train(", precision: fp16") + "parallel: {dp: 2}\noptimizer: {placement: shardserver}\n");
  EXPECT_NE(ps.find("'train.precision' fp16 (loss scaling skips steps) runs with optimizer.placement worker"),
            std::string::npos)
      << ps;
}

// train.grad_reduce_dtype: fp32 by default; bf16 with any precision and layout; anything else
// is an error naming the field; the normalised YAML states it and reads it back.
TEST(JobSpecTest, GradReduceDtypeIsFp32OrBf16AndRoundTrips) {
  auto d = ParseJobSpec(kMinimal);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->train.grad_reduce_dtype, "fp32");
  EXPECT_NE(ToYaml(*d).find("grad_reduce_dtype: fp32"), std::string::npos) << "every field stated:\n" << ToYaml(*d);
  const std::string base = R"(
model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8}
data: {train: t.bin}
)";
  auto train = [&](const std::string& extra) { return base + "train: {steps: 10, micro_batch: 2, lr: 1.0e-3" + extra + "}\n"; };
  for (const char* p : {"fp32", "bf16", "fp16"}) {
    SCOPED_TRACE(p);
    auto s = ParseJobSpec(train(absl::StrCat(", precision: ", p, ", grad_reduce_dtype: bf16")) +
                          "parallel: {dp: 2, zero_stage: 3}\n");
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->train.grad_reduce_dtype, "bf16");
    auto back = ParseJobSpec(ToYaml(*s));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->train.grad_reduce_dtype, "bf16");
    EXPECT_TRUE(*back == *s);
  }
  for (const char* bad : {"fp16", "BF16", "float32"}) {
    EXPECT_NE(Error(train(absl::StrCat(", grad_reduce_dtype: ", bad)))
                  .find(absl::StrCat("field 'train.grad_reduce_dtype' is '", bad, "': fp32 or bf16")),
              std::string::npos)
        << bad;
  }
  EXPECT_NE(Error(train(", grad_reduce_dtype: [bf16]")).find("'train.grad_reduce_dtype' must be a string"),
            std::string::npos);
}

// train.deterministic: true by default (cuDNN's deterministic attention backward); false is
// read, stated in the normalised YAML and read back; anything but a boolean names the field.
TEST(JobSpecTest, DeterministicIsABooleanTrueByDefaultAndRoundTrips) {
  auto d = ParseJobSpec(kMinimal);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->train.deterministic);
  EXPECT_NE(ToYaml(*d).find("deterministic: true"), std::string::npos) << ToYaml(*d);
  const std::string base = R"(
model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8}
data: {train: t.bin}
)";
  auto s = ParseJobSpec(base + "train: {steps: 10, micro_batch: 2, lr: 1.0e-3, deterministic: false}\n");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->train.deterministic);
  auto back = ParseJobSpec(ToYaml(*s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->train.deterministic);
  EXPECT_TRUE(*back == *s);
  EXPECT_NE(Error(base + "train: {steps: 10, micro_batch: 2, lr: 1.0e-3, deterministic: maybe}\n")
                .find("train.deterministic"),
            std::string::npos);
}

// train.classifier_rows: 0 by default (the whole classifier at once); a count of rows is read,
// stated in the normalised YAML and read back, and the planner lays the blocks out; a negative
// count or a non-integer names the field.
TEST(JobSpecTest, ClassifierRowsIsACountOfRowsZeroByDefaultAndRoundTrips) {
  auto d = ParseJobSpec(kMinimal);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->train.classifier_rows, 0);
  EXPECT_NE(ToYaml(*d).find("classifier_rows: 0"), std::string::npos) << ToYaml(*d);
  const std::string base = R"(
model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8}
data: {train: t.bin}
)";
  auto s = ParseJobSpec(base + "train: {steps: 10, micro_batch: 2, lr: 1.0e-3, classifier_rows: 4}\n");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->train.classifier_rows, 4);
  auto back = ParseJobSpec(ToYaml(*s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == *s);
  EXPECT_EQ(PlanOfSpec(*s).classifier_rows, 4);
  EXPECT_NE(Error(base + "train: {steps: 10, micro_batch: 2, lr: 1.0e-3, classifier_rows: -1}\n")
                .find("field 'train.classifier_rows' must be >= 0"),
            std::string::npos);
  EXPECT_NE(Error(base + "train: {steps: 10, micro_batch: 2, lr: 1.0e-3, classifier_rows: many}\n")
                .find("train.classifier_rows"),
            std::string::npos);
}

TEST(JobSpecTest, SchedulingAndElasticSectionsParseAndAreChecked) {
  const std::string base = R"(
model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8}
data: {train: t.bin}
train: {steps: 10, micro_batch: 2, global_batch: 24, lr: 1.0e-3}
parallel: {dp: 2}
)";
  auto e = ParseJobSpec(base + "scheduling: {priority: 7, max_restarts: 0}\nelastic: {min_dp: 1, max_dp: 4}\n");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->scheduling.priority, 7);
  EXPECT_EQ(e->scheduling.max_restarts, 0);
  EXPECT_EQ(e->DpChoices(), (std::vector<int>{1, 2, 3, 4})) << "24 = 2 x 12: every dp from 1 to 4 divides";
  auto odd = ParseJobSpec(base + "elastic: {min_dp: 2, max_dp: 5}\n");
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_EQ(odd->DpChoices(), (std::vector<int>{2, 3, 4})) << "2 x 5 does not divide 24";
  EXPECT_EQ(ParseJobSpec(base)->DpChoices(), (std::vector<int>{2})) << "not elastic: dp alone";
  EXPECT_NE(Error(base + "elastic: {min_dp: 3, max_dp: 2}\n").find("field 'elastic.max_dp' must be >= elastic.min_dp (3)"),
            std::string::npos);
  EXPECT_NE(Error(base + "elastic: {min_dp: 3, max_dp: 4}\n").find("field 'parallel.dp' must be within [elastic.min_dp, elastic.max_dp] = [3, 4], not 2"),
            std::string::npos);
  EXPECT_NE(Error(base + "scheduling: {max_restarts: -1}\n").find("scheduling.max_restarts"), std::string::npos);
  // Preemption: preemptible by default, the grace period the coordinator's unless given.
  EXPECT_TRUE(e->scheduling.preemptible);
  EXPECT_EQ(e->scheduling.preemption_grace_s, 0);
  auto p = ParseJobSpec(base + "scheduling: {preemptible: false, preemption_grace_s: 30}\n");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->scheduling.preemptible);
  EXPECT_EQ(p->scheduling.preemption_grace_s, 30);
  auto back = ParseJobSpec(ToYaml(*p));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->scheduling.preemptible) << "the normalised form keeps it";
  EXPECT_EQ(back->scheduling.preemption_grace_s, 30);
  EXPECT_NE(Error(base + "scheduling: {preemption_grace_s: -1}\n").find("field 'scheduling.preemption_grace_s' must be >= 0"),
            std::string::npos);
  EXPECT_NE(Error(base + "scheduling: {preemptible: maybe}\n").find("scheduling.preemptible"), std::string::npos);
}

// The coordinator's normalised form: every field stated, and read back to the same spec.
TEST(JobSpecTest, NormalisedYamlReadsBackToTheSameSpec) {
  std::vector<std::string> specs = {
      kMinimal,
      R"(
name: "odd: name # with 'quotes'"
model: {n_layer: 4, n_head: 4, n_embd: 32, vocab_size: 300, seq_len: 16, max_seq_len: 64}
data: {train: "a b.bin", val: v.bin, shuffle: true}
train: {steps: 7, micro_batch: 3, global_batch: 24, lr: 3.0000000000000001e-4, warmup: 2, min_lr_ratio: 0.1,
        beta1: 0.85, beta2: 0.95, eps: 1.0e-7, weight_decay: 0.123456789, grad_clip: 0, seed: 18446744073709551615,
        recompute: selective, precision: fp16, loss_scale: 1024, loss_scale_window: 50, grad_reduce_dtype: bf16}
eval: {every: 3, batches: 2}
checkpoint: {every: 2, keep: 1, host_budget_mb: 0.5, dir: /tmp/x, resume_from: j-000001@40}
parallel: {dp: 2, tp: 2, pp: 2, zero_stage: 1, bucket_mb: 1.5, timeout_s: 30, schedule: gpipe}
scheduling: {priority: -3, max_restarts: 0}
elastic: {min_dp: 1, max_dp: 4}
)",
      // Strings that plain YAML would change: a CR at a path's end (job_spec_fuzz found it),
      // a tab inside, edge spaces.
      "model: {n_layer: 1, n_head: 1, n_embd: 8, vocab_size: 16, seq_len: 8}\n"
      "data: {train: \"a.bin\\r\", val: \" v\\tw.bin \"}\n"
      "train: {steps: 10, micro_batch: 1, global_batch: 12, lr: 0.01}\n"
      "parallel: {dp: 2}\nelastic: {min_dp: 1, max_dp: 4}\n",
      R"(
model: {arch: llama, n_layer: 2, n_head: 6, n_kv_head: 2, n_embd: 48, ffn_hidden: 136, vocab_size: 300, seq_len: 16,
        max_seq_len: 128, rope_theta: 500000.5, norm_eps: 1.0000000000000001e-6}
data: {train: t.bin}
train: {steps: 10, micro_batch: 2, lr: 1.0e-3}
parallel: {tp: 2}
)",
      R"(
model: {arch: llama, n_layer: 2, n_head: 4, n_embd: 32, vocab_size: 256, seq_len: 8}
data: {train: t.bin}
train: {steps: 10, micro_batch: 2, lr: 1.0e-3}
)"};
  auto demo = ReadFileToString(testing::SourcePath("configs/demo.yaml"));
  ASSERT_TRUE(demo.ok()) << demo.status();
  specs.push_back(*demo);
  for (const auto& text : specs) {
    auto s = ParseJobSpec(text);
    ASSERT_TRUE(s.ok()) << s.status() << "\n" << text;
    const std::string normal = ToYaml(*s);
    auto back = ParseJobSpec(normal);
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << normal;
    EXPECT_TRUE(*back == *s) << normal;
    EXPECT_EQ(ToYaml(*back), normal) << "normalising is idempotent";
  }
  auto s = ParseJobSpec(kMinimal);
  ASSERT_TRUE(s.ok());
  auto changed = *s;
  changed.train.eps = 1.0000000000000002e-8;  // one ulp away: doubles are written exactly
  EXPECT_FALSE(*ParseJobSpec(ToYaml(changed)) == *s);
}

TEST(JobSpecTest, PlacementTakesTheWorldOrTheLargestElasticDpThatFits) {
  const std::string base = R"(
model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8}
data: {train: t.bin}
train: {steps: 10, micro_batch: 2, global_batch: 24, lr: 1.0e-3}
)";
  auto fixed = ParseJobSpec(base + "parallel: {dp: 2, tp: 2}\n");
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(fixed->MinWorld(), 4);
  EXPECT_EQ(fixed->WorldFor(3), 0);
  EXPECT_EQ(fixed->WorldFor(4), 4);
  EXPECT_EQ(fixed->WorldFor(9), 4) << "not elastic: its world, however many are idle";
  auto elastic = ParseJobSpec(base + "parallel: {dp: 2, pp: 2}\nelastic: {min_dp: 2, max_dp: 5}\n");
  ASSERT_TRUE(elastic.ok()) << elastic.status();
  EXPECT_EQ(elastic->MinWorld(), 4) << "dp 2 x pp 2";
  EXPECT_EQ(elastic->WorldFor(3), 0);
  EXPECT_EQ(elastic->WorldFor(7), 6) << "dp 3";
  EXPECT_EQ(elastic->WorldFor(100), 8) << "dp 4: 2 x 5 does not divide 24";
}

// parallel.virtual_stages (the interleaved 1F1B schedule): parsed, kept by the normal form, and
// refused with the reason where the schedule cannot run: under 1, pp 1, GPipe, micro-batches a
// step that pp does not divide, more chunks than layers; with it stage_layers gives each
// chunk's layers (pp x virtual_stages entries), and an elastic job runs only at the dp that
// leave a multiple of pp micro-batches a step.
TEST(JobSpecTest, VirtualStagesAreValidatedWithTheReason) {
  const std::string m = R"(
model: {n_layer: 6, n_head: 4, n_embd: 16, vocab_size: 256, seq_len: 8}
data: {train: t.bin}
train: {steps: 10, micro_batch: 2, global_batch: 12, lr: 1.0e-3}
)";
  auto ok = ParseJobSpec(m + "parallel: {pp: 3, virtual_stages: 2}\n");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->parallel.virtual_stages, 2);
  EXPECT_EQ(ParseJobSpec(kMinimal)->parallel.virtual_stages, 1) << "the default: plain 1F1B";
  auto again = ParseJobSpec(ToYaml(*ok));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->parallel, ok->parallel) << "the normal form keeps virtual_stages";
  EXPECT_TRUE(ParseJobSpec(m + "parallel: {pp: 2, virtual_stages: 3, stage_layers: [1, 1, 1, 1, 1, 1]}\n").ok());
  const std::pair<std::string, std::string> refused[] = {
      {"parallel: {pp: 3, virtual_stages: 0}", "field 'parallel.virtual_stages' is 0: must be >= 1"},
      {"parallel: {pp: 1, virtual_stages: 2}", "field 'parallel.virtual_stages' is 2 with pp 1: model chunks interleave"},
      {"parallel: {pp: 3, virtual_stages: 2, schedule: gpipe}", "parallel.schedule is gpipe"},
      {"parallel: {pp: 4, virtual_stages: 2}", "(6 = global_batch / (micro_batch x dp)) in groups of pp: pp 4 must divide them"},
      {"parallel: {pp: 3, virtual_stages: 3}", "field 'parallel.virtual_stages' is 3 with pp 3: 9 chunks of one layer at least, and model.n_layer is 6"},
      {"parallel: {pp: 2, virtual_stages: 2, stage_layers: [3, 3]}", "field 'parallel.stage_layers' gives 2 stages' layers; with virtual_stages 2 it gives each chunk's: pp x virtual_stages = 4 entries"},
  };
  for (const auto& [parallel, why] : refused) {
    const std::string e = Error(m + parallel + "\n");
    EXPECT_NE(e.find(why), std::string::npos) << parallel << ": " << e;
  }
  // dp 1: 6 micro-batches, dp 2: 3, dp 3: 2 (not a multiple of pp 3).
  auto elastic = ParseJobSpec(m + "parallel: {pp: 3, virtual_stages: 2}\nelastic: {min_dp: 1, max_dp: 3}\n");
  ASSERT_TRUE(elastic.ok()) << elastic.status();
  EXPECT_EQ(elastic->DpChoices(), (std::vector<int>{1, 2}));
}

// parallel.cp (context parallelism): parsed, 1 by default, kept by the normal form, a factor of
// the world as the other degrees are (placement and elastic dp included); seq_len must be a
// multiple of 2·cp, and each combination not wired yet is refused naming itself; cuda and
// cuda-emulated take it (heads up to 128 wide).
TEST(JobSpecTest, ContextParallelIsAFactorOfTheWorldAndRefusesWhatIsNotWired) {
  const std::string m = R"(
model: {n_layer: 2, n_head: 4, n_embd: 16, vocab_size: 256, seq_len: 16}
data: {train: t.bin}
train: {steps: 10, micro_batch: 2, global_batch: 8, lr: 1.0e-3}
)";
  EXPECT_EQ(ParseJobSpec(kMinimal)->parallel.cp, 1) << "the default";
  auto ok = ParseJobSpec(m + "parallel: {dp: 2, cp: 4, zero_stage: 3}\n");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->parallel.cp, 4);
  EXPECT_EQ(ok->world_size(), 8);
  EXPECT_EQ(ok->grad_accum(), 2) << "cp does not split the batch: global = micro x accum x dp";
  EXPECT_EQ(ok->WorldFor(8), 8);
  EXPECT_EQ(ok->WorldFor(7), 0);
  auto again = ParseJobSpec(ToYaml(*ok));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->parallel, ok->parallel) << "the normal form keeps cp";
  auto elastic = ParseJobSpec(m + "parallel: {dp: 1, cp: 2}\nelastic: {min_dp: 1, max_dp: 4}\n");
  ASSERT_TRUE(elastic.ok()) << elastic.status();
  EXPECT_EQ(elastic->MinWorld(), 2);
  EXPECT_EQ(elastic->WorldFor(5), 4) << "dp 2 x cp 2";
  const std::pair<std::string, std::string> refused[] = {
      {"parallel: {cp: 0}", "field 'parallel.cp' must be >= 1"},
      {"parallel: {cp: 3}", "field 'parallel.cp' 3 needs model.seq_len a multiple of 2·cp = 6, not 16"},
      {"parallel: {cp: 2}\noptimizer: {placement: shardserver}", "with optimizer.placement shardserver is not supported"},
      {"parallel: {cp: 2, dp: 2}\nresources: {workers: 2}", "need dp 2 x cp 2 x tp 1 x pp 1 = 4"},
  };
  for (const auto& [parallel, why] : refused) {
    std::string spec = m + parallel + "\n";
    const std::string e = Error(spec);
    EXPECT_NE(e.find(why), std::string::npos) << parallel << ": " << e;
  }
  // The device path (the backend's block ops): cuda and cuda-emulated, heads up to 128 wide.
  for (const char* device : {"cuda", "cuda-emulated"}) {
    auto on_device = ParseJobSpec(m + "parallel: {cp: 2}\nresources: {device: " + device + "}\n");
    EXPECT_TRUE(on_device.ok()) << device << ": " << on_device.status();
  }
  const std::string wide = R"(
model: {n_layer: 2, n_head: 1, n_embd: 256, vocab_size: 256, seq_len: 16}
data: {train: t.bin}
train: {steps: 10, micro_batch: 2, global_batch: 8, lr: 1.0e-3}
parallel: {cp: 2}
resources: {device: cuda}
)";
  EXPECT_NE(Error(wide).find("field 'parallel.cp' 2 with resources.device cuda and a head size of 256 is not supported "
                             "yet: the device's block attention kernels take head sizes up to 128"),
            std::string::npos)
      << Error(wide);
  const std::string moe = R"(
model: {n_layer: 2, n_head: 4, n_embd: 16, vocab_size: 256, seq_len: 16, moe: {num_experts: 2}}
data: {train: t.bin}
train: {steps: 10, micro_batch: 2, global_batch: 8, lr: 1.0e-3}
parallel: {cp: 2}
)";
  // MoE: its load-balancing loss reduced over the cp group (model/moe_layer.h), with ep too.
  EXPECT_TRUE(ParseJobSpec(moe).ok()) << ParseJobSpec(moe).status();
  auto with_ep = ParseJobSpec(absl::StrReplaceAll(moe, {{"parallel: {cp: 2}", "parallel: {cp: 2, dp: 2, ep: 2, zero_stage: 1}"}}));
  ASSERT_TRUE(with_ep.ok()) << with_ep.status();
  EXPECT_EQ(with_ep->world_size(), 4);
  // Sequence parallelism splits a cp rank's rows over tp: 1 x 12 / 2 = 6 rows, which tp 4 does not divide.
  const std::string sp = R"(
model: {n_layer: 2, n_head: 4, n_embd: 16, vocab_size: 256, seq_len: 12}
data: {train: t.bin}
train: {steps: 10, micro_batch: 1, global_batch: 4, lr: 1.0e-3}
parallel: {cp: 2, tp: 4, sequence_parallel: true}
)";
  EXPECT_NE(Error(sp).find("field 'parallel.sequence_parallel' needs tp 4 to divide a cp rank's rows, micro_batch x "
                           "seq_len / cp = 6"),
            std::string::npos)
      << Error(sp);
  EXPECT_TRUE(ParseJobSpec(m + "parallel: {cp: 2, tp: 2, sequence_parallel: true}\n").ok()) << "tp and sp with cp";
}

TEST(JobSpecTest, TensorAndPipelineDegreesMustDivideHeadsAndLayers) {
  const std::string m = R"(
model: {n_layer: 6, n_head: 4, n_embd: 16, vocab_size: 256, seq_len: 8}
data: {train: t.bin}
train: {steps: 10, micro_batch: 2, lr: 1.0e-3}
)";
  auto ok = ParseJobSpec(m + "parallel: {dp: 2, tp: 2, pp: 3}\n");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->world_size(), 12);
  EXPECT_NE(Error(m + "parallel: {tp: 3}\n").find("field 'parallel.tp' 3 does not divide model.n_head 4"), std::string::npos);
  // Stages need not take as many layers (BalanceStages splits them by cost); each takes one.
  EXPECT_TRUE(ParseJobSpec(m + "parallel: {pp: 4}\n").ok());
  // Or the spec gives each stage's layers: pp of them, one at least each, n_layer in all.
  auto given = ParseJobSpec(m + "parallel: {pp: 3, stage_layers: [1, 3, 2]}\n");
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(given->parallel.stage_layers, (std::vector<int>{1, 3, 2}));
  auto again = ParseJobSpec(ToYaml(*given));
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << ToYaml(*given);
  EXPECT_EQ(again->parallel, given->parallel) << "the normal form keeps stage_layers";
  EXPECT_NE(Error(m + "parallel: {pp: 3, stage_layers: [1, 5]}\n")
                .find("field 'parallel.stage_layers' gives 2 stages' layers for pp 3 stages"),
            std::string::npos);
  EXPECT_NE(Error(m + "parallel: {pp: 3, stage_layers: [0, 4, 2]}\n")
                .find("field 'parallel.stage_layers' gives stage 0 0 layers (one at least)"),
            std::string::npos);
  EXPECT_NE(Error(m + "parallel: {pp: 3, stage_layers: [1, 1, 2]}\n")
                .find("field 'parallel.stage_layers' gives 4 layers in all, the model has 6"),
            std::string::npos);
  EXPECT_NE(Error(m + "parallel: {pp: 2, stage_layers: 3}\n").find("field 'parallel.stage_layers' must be a list"),
            std::string::npos);
  EXPECT_NE(Error(m + "parallel: {pp: 2, stage_layers: [3, x]}\n")
                .find("field 'parallel.stage_layers[1]' must be an integer"),
            std::string::npos);
  EXPECT_NE(Error(m + "parallel: {pp: 7}\n").find("field 'parallel.pp' 7 stages for model.n_layer 6 layers"),
            std::string::npos);
  EXPECT_NE(Error(m + "parallel: {dp: 2, tp: 2}\nresources: {workers: 2}\n").find("dp 2 x tp 2 x pp 1 = 4"),
            std::string::npos);
}

// model.arch and the Llama keys: parsed, defaults resolved by the config, and written by ToYaml
// (resolved: every field stated) so that the normalised spec reads back equal.
TEST(JobSpecTest, LlamaModelKeysParseAndRoundTrip) {
  const std::string text = R"(
model: {arch: llama, n_layer: 2, n_head: 6, n_kv_head: 2, n_embd: 48, ffn_hidden: 136, vocab_size: 300, seq_len: 16,
        rope_theta: 500000, norm_eps: 1.0e-6}
data: {train: t.bin}
train: {steps: 10, micro_batch: 2, lr: 1.0e-3}
)";
  auto s = ParseJobSpec(text);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->model.arch, Arch::kLlama);
  EXPECT_EQ(s->model.kv_heads(), 2);
  EXPECT_EQ(s->model.ffn(), 136);
  EXPECT_EQ(s->model.rope_theta, 500000.0);
  EXPECT_EQ(s->model.norm_eps, 1e-6);
  const std::string y = ToYaml(*s);
  for (const char* line : {"arch: llama", "n_kv_head: 2", "ffn_hidden: 136", "rope_theta: 500000", "norm_eps: "}) {
    EXPECT_NE(y.find(line), std::string::npos) << line << " in\n" << y;
  }
  auto back = ParseJobSpec(y);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << y;
  EXPECT_TRUE(*back == *s) << y;
  // Each Llama key changed by a little is a different spec (written exactly).
  for (auto change : std::vector<std::function<void(GPTConfig&)>>{
           [](GPTConfig& c) { c.n_kv_head = 3; }, [](GPTConfig& c) { c.ffn_hidden = 144; },
           [](GPTConfig& c) { c.rope_theta = 500000.00000000006; },
           [](GPTConfig& c) { c.norm_eps = 1.0000000000000002e-6; },
           [](GPTConfig& c) { c.arch = Arch::kGpt2, c.n_kv_head = 0, c.ffn_hidden = 0, c.norm_eps = 1e-5; }}) {
    JobSpec other = *s;
    change(other.model);
    auto o = ParseJobSpec(ToYaml(other));
    ASSERT_TRUE(o.ok()) << o.status() << "\n" << ToYaml(other);
    EXPECT_TRUE(*o == other);
    EXPECT_FALSE(*o == *s) << ToYaml(other);
  }
  // Defaults: gpt2; Llama's n_kv_head n_head and ffn_hidden 8/3 n_embd rounded up to 256.
  auto d = ParseJobSpec(kMinimal);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->model.arch, Arch::kGpt2);
  EXPECT_NE(ToYaml(*d).find("arch: gpt2"), std::string::npos);
  EXPECT_EQ(ToYaml(*d).find("rope_theta"), std::string::npos) << "GPT-2 has no RoPE:\n" << ToYaml(*d);
  auto l = ParseJobSpec("model: {arch: llama, n_layer: 2, n_head: 4, n_embd: 96, vocab_size: 256, seq_len: 8}\n"
                   "data: {train: t.bin}\ntrain: {steps: 10, micro_batch: 2, lr: 1.0e-3}\n");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->model.kv_heads(), 4);
  EXPECT_EQ(l->model.ffn(), 256);
  EXPECT_EQ(l->model.rope_theta, 10000.0);
  EXPECT_EQ(l->model.norm_eps, 1e-5);
}

TEST(JobSpecTest, ArchIsGpt2OrLlamaAndGpt2RefusesLlamaKnobs) {
  const std::string m = "data: {train: t.bin}\ntrain: {steps: 10, micro_batch: 2, lr: 1.0e-3}\n";
  auto model = [&](const std::string& extra) {
    return "model: {n_layer: 2, n_head: 4, n_embd: 32, vocab_size: 256, seq_len: 8" + extra + "}\n" + m;
  };
  EXPECT_NE(Error(model(", arch: bert")).find("field 'model.arch' is 'bert': gpt2 or llama"), std::string::npos);
  EXPECT_NE(Error(model(", arch: Llama")).find("field 'model.arch' is 'Llama': gpt2 or llama"), std::string::npos);
  EXPECT_NE(Error(model(", arch: [llama]")).find("'model.arch' must be a string"), std::string::npos);
  EXPECT_NE(Error(model(", rope_theta: 10000")).find("field 'model.rope_theta' applies to arch llama"), std::string::npos);
  EXPECT_NE(Error(model(", n_kv_head: 2")).find("field 'model.n_kv_head' 2: GPT-2 has n_head key/value heads"),
            std::string::npos)
      << Error(model(", n_kv_head: 2"));
  EXPECT_NE(Error(model(", ffn_hidden: 100")).find("field 'model.ffn_hidden'"), std::string::npos);
  EXPECT_NE(Error(model(", norm_eps: 1.0e-6")).find("field 'model.norm_eps'"), std::string::npos);
  EXPECT_NE(Error(model(", n_kv_head: two")).find("'model.n_kv_head' must be an integer, got 'two'"), std::string::npos);
  EXPECT_NE(Error(model(", arch: llama, rope_theta: x")).find("'model.rope_theta' must be a number, got 'x'"),
            std::string::npos);
  // GPT-2's own values may be stated.
  EXPECT_TRUE(ParseJobSpec(model(", arch: gpt2, n_kv_head: 4, ffn_hidden: 128, norm_eps: 1.0e-5")).ok());
  // The config's own checks name their field.
  EXPECT_NE(Error(model(", arch: llama, n_kv_head: 3")).find("field 'model.n_kv_head' 3 does not divide n_head 4"),
            std::string::npos)
      << Error(model(", arch: llama, n_kv_head: 3"));
  EXPECT_NE(Error(model(", arch: llama, rope_theta: 0.5")).find("field 'model.rope_theta'"), std::string::npos);
}

TEST(JobSpecTest, TensorParallelDegreeMustDivideKeyValueHeadsAndTheMlp) {
  const std::string m = "data: {train: t.bin}\ntrain: {steps: 10, micro_batch: 2, lr: 1.0e-3}\n";
  auto spec = [&](const std::string& model, int tp) {
    return "model: {arch: llama, n_layer: 2, n_head: 8, n_embd: 64, vocab_size: 256, seq_len: 8" + model + "}\n" + m +
           "parallel: {tp: " + std::to_string(tp) + "}\n";
  };
  EXPECT_TRUE(ParseJobSpec(spec(", n_kv_head: 2", 2)).ok());
  EXPECT_NE(Error(spec(", n_kv_head: 2", 4))
                .find("field 'parallel.tp' 4 does not divide model.n_kv_head 2 (each tensor-parallel rank takes whole "
                      "key/value heads with their query heads)"),
            std::string::npos)
      << Error(spec(", n_kv_head: 2", 4));
  EXPECT_TRUE(ParseJobSpec(spec(", ffn_hidden: 42", 2)).ok());
  EXPECT_NE(Error(spec(", ffn_hidden: 42", 4)).find("field 'parallel.tp' 4 does not divide model.ffn_hidden 42"),
            std::string::npos)
      << Error(spec(", ffn_hidden: 42", 4));
  EXPECT_NE(Error(spec("", 3)).find("field 'parallel.tp' 3 does not divide model.n_head 8"), std::string::npos);
  // tp 1 takes anything.
  EXPECT_TRUE(ParseJobSpec(spec(", n_kv_head: 1, ffn_hidden: 41", 1)).ok());
}

TEST(JobSpecTest, SequenceParallelNeedsTensorParallelRowsItDividesAndRoundTrips) {
  auto s = ParseJobSpec(With("parallel: {tp: 2, sequence_parallel: true}\n"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->parallel.sequence_parallel);
  auto again = ParseJobSpec(ToYaml(*s));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *s);
  EXPECT_FALSE(ParseJobSpec(kMinimal)->parallel.sequence_parallel) << "off by default";
  EXPECT_NE(Error(With("parallel: {sequence_parallel: true}\n"))
                .find("field 'parallel.sequence_parallel' needs tp > 1"),
            std::string::npos);
  // Each rank holds B·T/tp rows: 1 x 7 rows do not divide over 2.
  const std::string odd = "model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 7}\n"
                          "data: {train: t.bin}\ntrain: {steps: 10, micro_batch: 1, lr: 1.0e-3}\n"
                          "parallel: {tp: 2, sequence_parallel: true}\n";
  EXPECT_NE(Error(odd).find("needs tp 2 to divide micro_batch x seq_len = 7"), std::string::npos) << Error(odd);
}

TEST(JobSpecTest, MoeSectionParsesIsCheckedAndRoundTrips) {
  auto s = ParseJobSpec(std::string(R"(
model: {n_layer: 4, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8,
        moe: {num_experts: 8, top_k: 2, capacity_factor: 1.5, aux_loss_coeff: 0.02, z_loss_coeff: 0.001, every_n_layers: 2}}
data: {train: t.bin}
train: {steps: 10, micro_batch: 2, lr: 1.0e-3}
)"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->model.moe, (MoeConfig{8, 2, 1.5, 0.02, 0.001, 2}));
  EXPECT_EQ(s->model.moe_layers(), 2);
  auto again = ParseJobSpec(ToYaml(*s));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *s);
  const std::string m = "model: {n_layer: 4, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8, moe: {";
  const std::string rest = "}}\ndata: {train: t.bin}\ntrain: {steps: 10, micro_batch: 2, lr: 1.0e-3}\n";
  EXPECT_NE(Error(m + "num_experts: 4, top_k: 5" + rest).find("model.moe.top_k"), std::string::npos);
  EXPECT_NE(Error(m + "num_experts: 4, every_n_layers: 5" + rest).find("model.moe.every_n_layers"), std::string::npos);
  EXPECT_NE(Error(m + "num_experts: 4, capacity_factor: -1" + rest).find("model.moe.capacity_factor"), std::string::npos);
  EXPECT_NE(Error(m + "num_experts: 4, top_kk: 1" + rest).find("unknown field 'model.moe.top_kk'"), std::string::npos);
  EXPECT_NE(Error(m + "num_experts: 4" + "}}\ndata: {train: t.bin}\ntrain: {steps: 10, micro_batch: 2, lr: 1.0e-3, "
                                         "precision: bf16}\n")
                .find("field 'model.moe' runs in fp32"),
            std::string::npos);
}

// parallel.ep: a divisor of dp and of the experts, on a MoE model, with ZeRO 0 or 1 and AdamW on
// the workers; each wrong combination names the field and why.
TEST(JobSpecTest, ExpertParallelismIsCheckedAndRoundTrips) {
  auto spec = [](const std::string& moe, const std::string& parallel, const std::string& optimizer = "") {
    return "model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8" + moe +
           "}\ndata: {train: t.bin}\ntrain: {steps: 10, micro_batch: 2, global_batch: 8, lr: 1.0e-3}\nparallel: {" +
           parallel + "}\n" + optimizer;
  };
  const std::string moe = ", moe: {num_experts: 4, top_k: 2}";
  auto s = ParseJobSpec(spec(moe, "dp: 4, ep: 2, zero_stage: 1"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->parallel.ep, 2);
  EXPECT_EQ(s->world_size(), 4) << "ep adds no ranks";
  auto again = ParseJobSpec(ToYaml(*s));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *s);
  EXPECT_EQ(ParseJobSpec(spec(moe, "dp: 2"))->parallel.ep, 1) << "off by default";
  struct Bad {
    std::string text, want;
  };
  for (const Bad& b : {Bad{spec("", "dp: 2, ep: 2"), "field 'parallel.ep' splits a mixture-of-experts model's experts"},
                       Bad{spec(moe, "dp: 2, ep: 4"), "field 'parallel.ep' 4 does not divide parallel.dp 2"},
                       Bad{spec(", moe: {num_experts: 6}", "dp: 4, ep: 4"),
                           "field 'parallel.ep' 4 does not divide model.moe.num_experts 6"},
                       Bad{spec(moe, "dp: 2, ep: 0"), "field 'parallel.ep' must be >= 1"},
                       Bad{spec(moe, "dp: 2, ep: 2, zero_stage: 2"), "field 'parallel.ep' runs with ZeRO 0 or 1"},
                       Bad{spec(moe, "dp: 2, ep: 2, zero_stage: 1", "optimizer: {offload: cpu}\n"),
                           "field 'parallel.ep' runs AdamW on the workers' memory"}}) {
    EXPECT_NE(Error(b.text).find(b.want), std::string::npos) << Error(b.text);
  }
}

GPTConfig LlamaFrom() {
  GPTConfig c;
  c.arch = Arch::kLlama;
  c.max_seq_len = 128, c.vocab_size = 300, c.n_layer = 2, c.n_head = 6, c.n_embd = 48;
  c.n_kv_head = 2, c.ffn_hidden = 136, c.rope_theta = 500000, c.norm_eps = 1e-6;
  return c;
}

// --init-from: the spec's model is the config's; what the spec states must agree with it.
TEST(JobSpecTest, InitFromTakesTheModelFromTheConfigAndChecksWhatTheSpecStates) {
  const GPTConfig from = LlamaFrom();
  const std::string rest = "data: {train: t.bin}\ntrain: {steps: 10, micro_batch: 2, lr: 1.0e-3}\n";
  auto parse = [&](const std::string& model) { return ParseJobSpec("model: {" + model + "}\n" + rest, &from, "D/config.json"); };
  auto error = [&](const std::string& model) {
    auto s = parse(model);
    EXPECT_FALSE(s.ok()) << model;
    return s.ok() ? std::string() : std::string(s.status().message());
  };
  auto s = parse("seq_len: 32");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->model == from);
  EXPECT_EQ(s->model.max_seq_len, 128) << "the config's n_positions, not seq_len";
  EXPECT_EQ(s->seq_len, 32);
  auto back = ParseJobSpec(ToYaml(*s));  // the normalised spec stands alone
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == *s);
  // Stated and agreeing (defaults resolved: n_kv_head 2 is the config's 2).
  auto agree = parse("arch: llama, n_layer: 2, n_head: 6, n_kv_head: 2, n_embd: 48, ffn_hidden: 136, vocab_size: 300, "
                     "seq_len: 16, max_seq_len: 128, rope_theta: 500000, norm_eps: 1.0e-6");
  ASSERT_TRUE(agree.ok()) << agree.status();
  EXPECT_TRUE(agree->model == from);
  // Each key stated otherwise is named, with the config's value.
  EXPECT_NE(error("seq_len: 16, n_head: 4").find("job spec: field 'model.n_head' is 4 but D/config.json says 6"),
            std::string::npos)
      << error("seq_len: 16, n_head: 4");
  EXPECT_NE(error("seq_len: 16, arch: gpt2").find("field 'model.arch' is gpt2 but D/config.json says llama"),
            std::string::npos);
  EXPECT_NE(error("seq_len: 16, n_kv_head: 0").find("field 'model.n_kv_head' is 0 (n_head, 6) but D/config.json says 2"),
            std::string::npos)
      << error("seq_len: 16, n_kv_head: 0");
  EXPECT_NE(error("seq_len: 16, ffn_hidden: 128").find("field 'model.ffn_hidden' is 128 but D/config.json says 136"),
            std::string::npos);
  EXPECT_NE(error("seq_len: 16, max_seq_len: 64").find("field 'model.max_seq_len' is 64 but D/config.json says 128"),
            std::string::npos);
  EXPECT_NE(error("seq_len: 16, rope_theta: 10000").find("field 'model.rope_theta' is 10000 but D/config.json says 500000"),
            std::string::npos);
  EXPECT_NE(error("seq_len: 16, norm_eps: 1.0e-5").find("field 'model.norm_eps' is 1e-05 but D/config.json says 1e-06"),
            std::string::npos)
      << error("seq_len: 16, norm_eps: 1.0e-5");
  for (const char* k : {"n_layer: 3", "n_embd: 96", "vocab_size: 256"}) {
    const std::string key = std::string(k).substr(0, std::string(k).find(':'));
    EXPECT_NE(error(std::string("seq_len: 16, ") + k).find("field 'model." + key + "' is"), std::string::npos) << k;
  }
  // Every disagreement, not only the first.
  const std::string two = error("seq_len: 16, n_layer: 3, vocab_size: 256");
  EXPECT_NE(two.find("'model.n_layer' is 3"), std::string::npos) << two;
  EXPECT_NE(two.find("'model.vocab_size' is 256"), std::string::npos) << two;
  // seq_len is still the spec's, and within the model's positions.
  EXPECT_NE(error("n_layer: 2").find("field 'model.seq_len' is required"), std::string::npos);
  EXPECT_NE(error("seq_len: 129").find("field 'model.seq_len' 129 exceeds model.max_seq_len 128"), std::string::npos);
  // The spec's other checks still hold, against the config's shape.
  EXPECT_NE(ParseJobSpec("model: {seq_len: 8}\n" + rest + "parallel: {tp: 4}\n", &from, "D/config.json")
                .status()
                .message()
                .find("field 'parallel.tp' 4 does not divide model.n_head 6"),
            std::string::npos);
  // Without a model to start from, the shape is required as before.
  EXPECT_NE(Error("model: {seq_len: 8}\n" + rest).find("field 'model.n_layer' is required"), std::string::npos);
  // A GPT-2 config: rope_theta has no place.
  GPTConfig gpt2{64, 256, 2, 2, 16};
  auto g = ParseJobSpec("model: {seq_len: 8}\n" + rest, &gpt2, "G/config.json");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->model == gpt2);
  EXPECT_EQ(g->model.max_seq_len, 64);
  EXPECT_NE(ParseJobSpec("model: {seq_len: 8, rope_theta: 10000}\n" + rest, &gpt2, "G/config.json")
                .status()
                .message()
                .find("'model.rope_theta' applies to arch llama"),
            std::string::npos);
}

TEST(JobSpecTest, LoadJobSpecTakesTheModelToStartFrom) {
  testing::TempDir d;
  ASSERT_TRUE(WriteFileAtomic(d.File("job.yaml"), "model: {seq_len: 8, n_head: 4}\ndata: {train: t.bin}\n"
                                                  "train: {steps: 10, micro_batch: 2, lr: 1.0e-3}\n")
                  .ok());
  const GPTConfig from = LlamaFrom();
  auto s = LoadJobSpec(d.File("job.yaml"), &from, "D/config.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("job.yaml"), std::string::npos) << s.status();
  EXPECT_NE(s.status().message().find("field 'model.n_head' is 4 but D/config.json says 6"), std::string::npos)
      << s.status();
  ASSERT_TRUE(WriteFileAtomic(d.File("job.yaml"), "model: {seq_len: 8}\ndata: {train: t.bin}\n"
                                                  "train: {steps: 10, micro_batch: 2, lr: 1.0e-3}\n")
                  .ok());
  s = LoadJobSpec(d.File("job.yaml"), &from, "D/config.json");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->model == from);
  EXPECT_FALSE(LoadJobSpec(d.File("job.yaml")).ok()) << "without a model, the shape is required";
}

TEST(JobSpecTest, ModelDifferencesNameEveryFieldThatDiffers) {
  GPTConfig a{16, 256, 2, 2, 16};
  EXPECT_EQ(DescribeModel(a), "n_layer 2, n_head 2, n_embd 16, vocab_size 256, max_seq_len 16");
  GPTConfig b = a;
  b.n_kv_head = 2, b.ffn_hidden = 64;  // GPT-2's own values: the same model
  EXPECT_EQ(ModelDifferences(a, "A", b, "B"), "");
  b.n_embd = 32;
  EXPECT_EQ(ModelDifferences(a, "A", b, "B"), "n_embd (A 16, B 32)");
  GPTConfig l = LlamaFrom(), m = LlamaFrom();
  EXPECT_EQ(DescribeModel(l), "n_layer 2, n_head 6, n_embd 48, vocab_size 300, max_seq_len 128, arch llama, "
                              "n_kv_head 2, ffn_hidden 136, rope_theta 500000, norm_eps 1e-06");
  m.n_kv_head = 3, m.ffn_hidden = 0, m.rope_theta = 10000, m.norm_eps = 1e-5;
  EXPECT_EQ(ModelDifferences(l, "checkpoint", m, "job spec"),
            "n_kv_head (checkpoint 2, job spec 3), ffn_hidden (checkpoint 136, job spec 256), rope_theta (checkpoint "
            "500000, job spec 10000), norm_eps (checkpoint 1e-06, job spec 1e-05)");
  EXPECT_EQ(ModelDifferences(l, "A", a, "B"),
            "n_head (A 6, B 2), n_embd (A 48, B 16), vocab_size (A 300, B 256), max_seq_len (A 128, B 16), arch (A llama, "
            "B gpt2), ffn_hidden (A 136, B 64), norm_eps (A 1e-06, B 1e-05)")
      << ModelDifferences(l, "A", a, "B");
}

// Found by tests/fuzz/job_spec_fuzz: a mapping key that is not a scalar (YAML's complex keys,
// "? [a]: 1") threw yaml-cpp's TypedBadConversion out of ParseJobSpec, and through SubmitJob
// ended the coordinator. Now an error naming the section that holds the key.
TEST(JobSpecTest, AKeyThatIsNotANameIsRefusedNamingItsSection) {
  const std::string rest = "data: {train: t.bin}\ntrain: {steps: 10, micro_batch: 2, lr: 1.0e-3}\n";
  EXPECT_EQ(Error("model:\n  ? [a]\n  : 1\n" + rest),
            "job spec: field 'model' has a key that is not a name (a sequence)");
  EXPECT_EQ(Error("model: {n_layer: 2, ? [n_head]: 2, n_embd: 16, vocab_size: 256, seq_len: 8}\n" + rest),
            "job spec: field 'model' has a key that is not a name (a sequence)");
  EXPECT_EQ(Error("model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8, moe: {? {a: 1}: 2}}\n" +
                  rest),
            "job spec: field 'model.moe' has a key that is not a name (a mapping)");
  EXPECT_EQ(Error("? {a: 1}\n: 2\n"), "job spec: field '(top level)' has a key that is not a name (a mapping)");
}

// Found by tests/fuzz/job_spec_fuzz: products of sizes overflowed int (undefined behaviour):
// the default global_batch (micro_batch x dp), micro_batch x dp in the global batch's check
// (it wrapped to 0 and divided by it), dp x tp x pp, an elastic job's dp choices. They are
// taken in 64 bits now, and a job of more than 2^20 ranks is refused.
TEST(JobSpecTest, SizeProductsAreTakenIn64BitsOrRefusedByName) {
  auto spec = [](const std::string& model, const std::string& train, const std::string& rest) {
    return "model: {n_layer: 2, vocab_size: 256, seq_len: 8, " + model + "}\ndata: {train: t.bin}\n" +
           "train: {steps: 10, lr: 1.0e-3, " + train + "}\n" + rest;
  };
  const std::string m = "n_head: 2, n_embd: 16";
  // The default global batch: micro_batch x dp past 2^31 - 1 is refused, not wrapped to -2.
  EXPECT_EQ(Error(spec(m, "micro_batch: 2147483647", "parallel: {dp: 2}\n")),
            "job spec: field 'train.global_batch' defaults to micro_batch x dp = 4294967294, past 2^31 - 1");
  auto most = ParseJobSpec(spec(m, "micro_batch: 2147483647", ""));
  ASSERT_TRUE(most.ok()) << most.status();
  EXPECT_EQ(most->train.global_batch, 2147483647);
  EXPECT_EQ(most->grad_accum(), 1);
  // micro_batch x dp = 2^32 (0 in int): the arithmetic in the error is the 64-bit product.
  EXPECT_EQ(Error(spec(m, "micro_batch: 65536, global_batch: 65536", "parallel: {dp: 65536}\n")),
            "job spec: field 'train.global_batch' must equal micro_batch x grad_accum x dp: 65536 is not a multiple of "
            "micro_batch 65536 x dp 65536 = 4294967296");
  // dp x tp x pp = 2^32 ranks (0 in int), the model dividing over tp: refused; 2^20 is the most.
  EXPECT_EQ(Error(spec("n_head: 65536, n_embd: 65536", "micro_batch: 2", "parallel: {dp: 65536, tp: 65536}\n")),
            "job spec: field 'parallel' dp x tp x pp = 4294967296 ranks, more than 1048576");
  EXPECT_EQ(Error(spec("n_head: 1024, n_embd: 1024", "micro_batch: 1", "parallel: {dp: 1024, tp: 1024, pp: 2}\n")),
            "job spec: field 'parallel' dp x tp x pp = 2097152 ranks, more than 1048576");
  auto widest = ParseJobSpec(spec("n_head: 1024, n_embd: 1024", "micro_batch: 1", "parallel: {dp: 1024, tp: 1024}\n"));
  ASSERT_TRUE(widest.ok()) << widest.status();
  EXPECT_EQ(widest->world_size(), 1 << 20);
  // Elastic: every dp up to max_dp is tried (DpChoices) and multiplied by tp x pp.
  EXPECT_EQ(Error(spec(m, "micro_batch: 2", "elastic: {min_dp: 1, max_dp: 2147483647}\n")),
            "job spec: field 'elastic.max_dp' 2147483647 x tp x pp is more than 1048576 ranks");
  EXPECT_EQ(Error(spec(m, "micro_batch: 2", "parallel: {tp: 2}\nelastic: {min_dp: 1, max_dp: 524289}\n")),
            "job spec: field 'elastic.max_dp' 524289 x tp x pp is more than 1048576 ranks");
  // At the bound, micro_batch 4096 x dp reaches 2^32 (0 in int, a division by zero) at dp 2^20.
  auto elastic = ParseJobSpec(spec(m, "micro_batch: 4096, global_batch: 1073741824",
                                   "elastic: {min_dp: 1, max_dp: 1048576}\n"));
  ASSERT_TRUE(elastic.ok()) << elastic.status();
  std::vector<int> powers;  // 4096 x dp divides 2^30: dp a power of 2 up to 2^18
  for (int d = 1; d <= (1 << 18); d *= 2) powers.push_back(d);
  EXPECT_EQ(elastic->DpChoices(), powers);
  EXPECT_EQ(elastic->MinWorld(), 1);
  EXPECT_EQ(elastic->WorldFor(1 << 20), 1 << 18);
}

// Found by tests/fuzz/job_spec_fuzz: moe keys stated with num_experts 0 made a model unequal to
// its own normal form and config.json (which state none without experts): the workers' spec
// was another model, and resuming from the job's own checkpoint was refused with an empty
// list of differences. The MoE knobs count only where there are experts.
TEST(JobSpecTest, MoeKeysWithoutExpertsAreTheDenseModelTheNormalFormAndConfigJsonDescribe) {
  auto s = ParseJobSpec("model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8,\n"
                        "        moe: {num_experts: 0, top_k: 2, capacity_factor: 2.0, aux_loss_coeff: 0.5, "
                        "z_loss_coeff: 0.25, every_n_layers: 2}}\n"
                        "data: {train: t.bin}\ntrain: {steps: 10, micro_batch: 2, lr: 1.0e-3}\n");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->model.moe_layers(), 0);
  const std::string normal = ToYaml(*s);
  EXPECT_EQ(normal.find("moe"), std::string::npos) << "no experts, no moe keys:\n" << normal;
  auto back = ParseJobSpec(normal);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << normal;
  EXPECT_TRUE(back->model == s->model) << normal;
  EXPECT_TRUE(*back == *s) << normal;
  // With experts, the knobs still tell models apart.
  GPTConfig a = s->model, b = s->model;
  a.moe.num_experts = b.moe.num_experts = 4;
  b.moe.top_k = 1;
  EXPECT_FALSE(a == b);
}

// parallel: auto (jobspec/auto_layout.h): the layout is the coordinator's at placement.
constexpr char kAuto[] = R"(
model: {n_layer: 4, n_head: 4, n_embd: 32, vocab_size: 256, seq_len: 16}
data: {train: t.bin}
train: {steps: 10, global_batch: 8, lr: 1.0e-3}
)";

TEST(JobSpecTest, ParallelAutoKeepsAutoAndWhatIsStatedThroughTheNormalForm) {
  auto s = ParseJobSpec(std::string(kAuto) + "parallel: auto\n");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->auto_layout());
  EXPECT_EQ(s->parallel.auto_layout, (AutoLayout{.enabled = true}));  // nothing stated: everything the planner's
  const std::string yaml = ToYaml(*s);
  EXPECT_NE(yaml.find("auto: true"), std::string::npos) << yaml;
  for (const char* chosen : {"dp:", "tp:", "pp:", "zero_stage:", "micro_batch:", "recompute:", "sequence_parallel:"}) {
    EXPECT_EQ(yaml.find(chosen), std::string::npos) << chosen << " is the planner's until placement:\n" << yaml;
  }
  auto again = ParseJobSpec(yaml);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << yaml;
  EXPECT_EQ(*again, *s);
  // The mapping form: what is stated beside auto is kept, and the bounds.
  auto m = ParseJobSpec(
      "model: {n_layer: 4, n_head: 4, n_embd: 32, vocab_size: 256, seq_len: 16}\ndata: {train: t.bin}\n"
      "train: {steps: 10, global_batch: 8, micro_batch: 2, recompute: full, lr: 1.0e-3}\n"
      "parallel: {auto: true, zero_stage: 1, max_tp: 2, bucket_mb: 5}\nresources: {workers: 4}\n");
  ASSERT_TRUE(m.ok()) << m.status();
  const AutoLayout& a = m->parallel.auto_layout;
  EXPECT_TRUE(a.enabled && a.zero_stage && a.micro_batch && a.recompute);
  EXPECT_FALSE(a.tp || a.pp || a.sequence_parallel);
  EXPECT_EQ(a.max_tp, 2);
  EXPECT_EQ(m->parallel.zero_stage, 1);
  EXPECT_EQ(m->train.micro_batch, 2);
  const std::string myaml = ToYaml(*m);
  for (const char* kept : {"auto: true", "max_tp: 2", "zero_stage: 1", "micro_batch: 2", "recompute: full", "workers: 4"}) {
    EXPECT_NE(myaml.find(kept), std::string::npos) << kept << "\n" << myaml;
  }
  auto m2 = ParseJobSpec(myaml);
  ASSERT_TRUE(m2.ok()) << m2.status();
  EXPECT_EQ(*m2, *m);
  // auto: false is a spec like any other.
  auto off = ParseJobSpec(With("parallel: {auto: false, dp: 2}\n"));
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->auto_layout());
  EXPECT_EQ(off->parallel.dp, 2);
  // Placement: resources.workers when stated, else whatever is idle (at least one).
  EXPECT_EQ(s->MinWorld(), 1);
  EXPECT_EQ(s->WorldFor(6), 6);
  EXPECT_EQ(s->WorldFor(0), 0);
  EXPECT_EQ(m->MinWorld(), 4);
  EXPECT_EQ(m->WorldFor(3), 0);
  EXPECT_EQ(m->WorldFor(9), 4);
}

TEST(JobSpecTest, ParallelAutoRefusesContradictionsNamingTheField) {
  const std::string a = kAuto;
  auto has = [](const std::string& err, const std::string& what) {
    EXPECT_NE(err.find(what), std::string::npos) << err;
  };
  has(Error(a + "parallel: {auto: true, dp: 2}\n"), "field 'parallel.dp' is the planner's with parallel: auto");
  has(Error(a + "parallel: auto\nelastic: {min_dp: 1, max_dp: 4}\n"), "field 'elastic' does not combine with parallel: auto");
  has(Error(a + "parallel: manual\n"), "field 'parallel' is 'manual': auto, or a mapping");
  has(Error(With("parallel: {dp: 2, max_tp: 2}\n")), "field 'parallel.max_tp' bounds the planner's choice: it applies with parallel: auto");
  has(Error(a + "parallel: {auto: true, tp: 2, max_tp: 4}\n"), "field 'parallel.max_tp' bounds the planner's degree, but parallel.tp is stated (2)");
  has(Error(a + "parallel: {auto: true, max_pp: 0}\n"), "field 'parallel.max_pp' must be >= 1");
  has(Error(a + "parallel: {auto: true, tp: 4}\nresources: {workers: 6}\n"),
      "field 'resources.workers' 6 is not a multiple of the stated tp x pp = 4");
  has(Error(a + "parallel: {auto: true, sequence_parallel: true, max_tp: 1}\n"),
      "field 'parallel.sequence_parallel' needs tp > 1, but parallel.max_tp is 1");
  has(Error(a + "parallel: {auto: true, tp: 3}\n"), "field 'parallel.tp' 3 does not divide model.n_head 4");
  has(Error("model: {n_layer: 4, n_head: 4, n_embd: 32, vocab_size: 256, seq_len: 16}\ndata: {train: t.bin}\n"
            "train: {steps: 10, micro_batch: 2, lr: 1.0e-3}\nparallel: auto\n"),
      "field 'train.global_batch' is required with parallel: auto");
  has(Error("model: {n_layer: 4, n_head: 4, n_embd: 32, vocab_size: 256, seq_len: 16}\ndata: {train: t.bin}\n"
            "train: {steps: 10, global_batch: 12, micro_batch: 3, lr: 1.0e-3}\nparallel: auto\n"),
      "field 'train.micro_batch' is 3: with parallel: auto a stated micro_batch is one the planner considers");
  has(Error("model: {n_layer: 4, n_head: 4, n_embd: 32, vocab_size: 256, seq_len: 16}\ndata: {train: t.bin}\n"
            "train: {steps: 10, global_batch: 8, micro_batch: 16, lr: 1.0e-3}\nparallel: auto\n"),
      "field 'train.global_batch' must equal micro_batch x grad_accum x dp");
  // What the planner chooses is not held against the rules that need its choice: ZeRO for
  // offload, dp for ep, tp for sequence parallelism.
  EXPECT_TRUE(ParseJobSpec(a + "parallel: auto\noptimizer: {offload: cpu}\n").ok());
  EXPECT_TRUE(ParseJobSpec(a + "parallel: {auto: true, sequence_parallel: true}\n").ok());
  EXPECT_TRUE(ParseJobSpec(a + "parallel: auto\nresources: {workers: 8, device: cuda}\n").ok());
  // ... but what is stated is: ZeRO 0 stated with offload is refused as without auto.
  has(Error(a + "parallel: {auto: true, zero_stage: 0}\noptimizer: {offload: cpu}\n"), "field 'optimizer.offload'");
}

// ApplyLayout: the one place a placement's layout meets a spec (the worker's, and the planner's
// before it offers a layout). It changes only what the spec leaves to the placement.
TEST(ApplyLayoutTest, AFixedSpecTakesItsOwnLayoutAndRefusesAnyOther) {
  auto s = ParseJobSpec(With("parallel: {dp: 2, zero_stage: 1}\n"));
  ASSERT_TRUE(s.ok()) << s.status();
  auto same = ApplyLayout(*s, LayoutOf(*s));
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(*same, *s) << "its own layout changes nothing";
  auto refused = [&](const PlacedLayout& l, const std::string& what) {
    auto r = ApplyLayout(*s, l);
    ASSERT_FALSE(r.ok()) << "accepted: " << what;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status();
  };
  PlacedLayout l = LayoutOf(*s);
  l.dp = 1;
  refused(l, "field 'parallel.dp' is 2 in the spec, but the placement's layout has 1");
  l = LayoutOf(*s);
  l.zero_stage = 2;
  refused(l, "field 'parallel.zero_stage' is 1 in the spec, but the placement's layout has 2");
  l = LayoutOf(*s);
  l.sequence_parallel = true;
  refused(l, "field 'parallel.sequence_parallel' is false in the spec, but the placement's layout has true");
  l = LayoutOf(*s);
  l.recompute = "full";
  refused(l, "field 'train.recompute' is none in the spec, but the placement's layout has full");
}

TEST(ApplyLayoutTest, AnElasticJobTakesThePlacementsDpAmongItsChoices) {
  auto s = ParseJobSpec(
      "model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8}\ndata: {train: t.bin}\n"
      "train: {steps: 10, micro_batch: 2, global_batch: 8, lr: 1.0e-3}\n"
      "parallel: {dp: 4}\nelastic: {min_dp: 1, max_dp: 4}\ncheckpoint: {every: 5, dir: x}\n");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->grad_accum(), 1);
  PlacedLayout l = LayoutOf(*s);
  l.dp = 2;
  auto placed = ApplyLayout(*s, l);
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->parallel.dp, 2);
  EXPECT_EQ(placed->grad_accum(), 2) << "the global batch is the spec's: more accumulation at a smaller dp";
  EXPECT_EQ(placed->train.global_batch, 8);
  EXPECT_EQ(placed->elastic, s->elastic);
  l.dp = 3;  // 8 sequences do not split over 3 replicas of 2
  auto three = ApplyLayout(*s, l);
  ASSERT_FALSE(three.ok());
  EXPECT_NE(three.status().message().find("field 'parallel.dp' is 3 in the placement's layout, not one of the elastic "
                                          "job's dp choices (1, 2, 4)"),
            std::string::npos)
      << three.status();
}

TEST(ApplyLayoutTest, ParallelAutoIsResolvedKeepingWhatIsStatedBesideAuto) {
  auto s = ParseJobSpec(std::string(kAuto) + "parallel: {auto: true, zero_stage: 1, max_tp: 2}\n");
  ASSERT_TRUE(s.ok()) << s.status();
  PlacedLayout l;
  l.dp = 2, l.tp = 2, l.pp = 1, l.zero_stage = 1, l.micro_batch = 2, l.recompute = "selective";
  l.sequence_parallel = true;
  auto placed = ApplyLayout(*s, l);
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_FALSE(placed->auto_layout()) << "resolved";
  EXPECT_EQ(LayoutOf(*placed), l);
  EXPECT_EQ(placed->world_size(), 4);
  EXPECT_EQ(placed->grad_accum(), 2);
  // The placed spec is one its normal form reads back: what the spec's own validation accepts.
  auto back = ParseJobSpec(ToYaml(*placed));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *placed);
  auto refused = [&](const PlacedLayout& bad, const std::string& what) {
    auto r = ApplyLayout(*s, bad);
    ASSERT_FALSE(r.ok()) << "accepted: " << what;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status();
  };
  PlacedLayout zero = l;
  zero.zero_stage = 2;
  refused(zero, "field 'parallel.zero_stage' is 1 in the spec");  // stated beside auto: kept
  PlacedLayout wide = l;
  wide.tp = 4, wide.dp = 1;
  refused(wide, "field 'parallel.max_tp' is 2, but the placement's layout has tp 4");
  PlacedLayout odd = l;
  odd.tp = 1, odd.dp = 3, odd.sequence_parallel = false;  // the spec's own rules, on the placed spec
  refused(odd, "field 'train.global_batch'");
}

TEST(LearningRateTest, ConstantWithoutWarmupOrDecay) {
  TrainSpec t;
  t.steps = 100;
  t.lr = 0.5;
  for (int64_t s : {0, 1, 50, 99}) EXPECT_DOUBLE_EQ(LearningRate(t, s), 0.5);
}

TEST(LearningRateTest, WarmupThenCosineToMinimum) {
  TrainSpec t;
  t.steps = 110;
  t.lr = 1.0;
  t.warmup = 10;
  t.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(LearningRate(t, 0), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(t, 9), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(t, 10), 1.0);
  EXPECT_NEAR(LearningRate(t, 10 + 99), 0.1, 1e-12);
  EXPECT_NEAR(LearningRate(t, 10 + 49.5), 0.55, 0.01);
  for (int64_t s = 11; s < 110; ++s) EXPECT_LE(LearningRate(t, s), LearningRate(t, s - 1));
}

}  // namespace
}  // namespace gantry::jobspec
