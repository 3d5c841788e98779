// The job spec parser (jobspec/job_spec.h) on arbitrary text, as the coordinator's SubmitJob
// and gantry-train read a spec: ParseJobSpec, then what is derived from an accepted spec
// (the normalised YAML the workers are sent, the plan, the elastic dp choices, the learning
// rate schedule).
//
// Beyond "no crash": an accepted spec's normal form (ToYaml) must parse back to an equal
// spec, because the workers parse that text, not the one submitted; a refused spec's error
// names the job spec. The normal form is checked for valid UTF-8 specs only: those are what
// the coordinator receives (SubmitJobRequest.spec_yaml is a proto3 string, which protobuf
// refuses to parse otherwise), and yaml-cpp's emitter writes U+FFFD for a stray byte in a
// string it quotes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "jobspec/job_spec.h"
#include "jobspec/planner.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

[[noreturn]] void Fail(const std::string& what, const std::string& text) {
  std::fprintf(stderr, "job_spec_fuzz: %s\n--- spec ---\n%s\n------------\n", what.c_str(), text.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gantry;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto spec = jobspec::ParseJobSpec(text);
  if (!spec.ok()) {
    if (spec.status().code() != absl::StatusCode::kInvalidArgument ||
        spec.status().message().substr(0, 9) != "job spec:") {
      Fail("a refused spec's error is not INVALID_ARGUMENT 'job spec: ...': " + spec.status().ToString(), text);
    }
    return 0;
  }
  if (!fuzz::ValidUtf8(text)) return 0;
  const std::string normal = jobspec::ToYaml(*spec);
  auto again = jobspec::ParseJobSpec(normal);
  if (!again.ok()) Fail("the normal form does not parse: " + again.status().ToString() + "\n" + normal, text);
  if (!(*again == *spec)) Fail("the normal form parses to another spec:\n" + normal, text);
  if (jobspec::ToYaml(*again) != normal) Fail("the normal form is not a fixed point:\n" + normal, text);

  // The coordinator plans every accepted spec (SubmitJob) and places it by these.
  (void)jobspec::MakePlan(jobspec::PlanOfSpec(*spec));
  const std::vector<int> choices = spec->DpChoices();
  (void)spec->MinWorld();
  for (int available : {0, 1, 7, 64, 1 << 20}) (void)spec->WorldFor(available);
  (void)spec->grad_accum();
  for (int64_t step : {int64_t{0}, spec->train.warmup, spec->train.steps - 1}) {
    (void)jobspec::LearningRate(spec->train, step);
  }
  (void)choices;
  return 0;
}
