// GPU_RETURN_IF_ERROR (common/gpu_check.h) over a stand-in library's result type: a failure
// returns INTERNAL naming file:line, the call and the library's words; the second argument
// (GpuErrorAs, or any function of the Status) chooses the code, the context and a clean-up.
#include "common/gpu_check.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/status/statusor.h"

namespace gantry::fakelib {
namespace {

enum Result { kSuccess, kBusy };
bool GpuOk(Result r) { return r == kSuccess; }
std::string GpuErrorText(Result r) { return r == kSuccess ? "success" : "kBusy (the device is busy)"; }
Result Call(bool fails) { return fails ? kBusy : kSuccess; }

absl::Status Plain(bool fails) {
  GPU_RETURN_IF_ERROR(Call(fails));
  return absl::OkStatus();
}

absl::StatusOr<int> WithContext(bool fails) {
  GPU_RETURN_IF_ERROR(Call(fails), GpuErrorAs(absl::StatusCode::kUnavailable, "rank 1 of 2"));
  return 7;
}

TEST(GpuCheckTest, AFailedCallNamesWhereTheCallAndTheLibrarysWords) {
  EXPECT_TRUE(Plain(false).ok());
  const absl::Status s = Plain(true);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("gpu_check_test.cc:"), std::string::npos) << s;
  EXPECT_NE(s.message().find("Call(fails) failed: kBusy (the device is busy)"), std::string::npos) << s;
}

TEST(GpuCheckTest, TheSecondArgumentChoosesTheCodeAndTheContext) {
  EXPECT_EQ(WithContext(false).value(), 7);
  const absl::Status s = WithContext(true).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message().substr(0, 13), "rank 1 of 2: ") << s;
  EXPECT_NE(s.message().find("Call(fails) failed: kBusy (the device is busy)"), std::string::npos) << s;
}

TEST(GpuCheckTest, TheSecondArgumentRunsOnlyOnAFailureAndMayCleanUpFirst) {
  int cleaned = 0;
  auto abort_first = [&](const absl::Status& s) {
    ++cleaned;
    return absl::AbortedError(absl::StrCat("aborted: ", s.message()));
  };
  auto run = [&](bool fails) -> absl::Status {
    GPU_RETURN_IF_ERROR(Call(fails), abort_first);
    return absl::OkStatus();
  };
  EXPECT_TRUE(run(false).ok());
  EXPECT_EQ(cleaned, 0);
  const absl::Status s = run(true);
  EXPECT_EQ(cleaned, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_NE(s.message().find("kBusy"), std::string::npos) << s;
}

}  // namespace
}  // namespace gantry::fakelib
