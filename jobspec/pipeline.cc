#include "jobspec/pipeline.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gantry::jobspec {

absl::StatusOr<Schedule> ParseSchedule(const std::string& name) {
  if (name == "1f1b") return Schedule::k1F1B;
  if (name == "gpipe") return Schedule::kGPipe;
  return absl::InvalidArgumentError(absl::StrCat("parallel.schedule: '", name, "' is not 1f1b or gpipe"));
}

std::vector<PipeOp> PipelineOps(Schedule schedule, int p, int s, int m) {
  std::vector<PipeOp> ops;
  auto forward = [&](int i, bool send = true) {
    if (s > 0) ops.push_back({PipeOp::kRecvAct, i});
    ops.push_back({PipeOp::kForward, i});
    if (send && s < p - 1) ops.push_back({PipeOp::kSendAct, i});
  };
  auto backward = [&](int i, bool recv = true) {
    if (recv && s < p - 1) ops.push_back({PipeOp::kRecvGrad, i});
    ops.push_back({PipeOp::kBackward, i});
    if (s > 0) ops.push_back({PipeOp::kSendGrad, i});
  };
  if (schedule == Schedule::kGPipe) {
    for (int i = 0; i < m; ++i) forward(i);
    for (int i = 0; i < m; ++i) backward(i);
    return ops;
  }
  const int warm = std::min(p - s - 1, m);
  for (int i = 0; i < warm; ++i) forward(i);
  for (int i = 0; i < m - warm; ++i) {
    // Steady state: forward the newest, receive the oldest's gradient, then send the
    // newest's activation (after the receive: see the header), then the oldest's backward.
    const int newest = warm + i;
    forward(newest, /*send=*/false);
    if (s < p - 1) {
      ops.push_back({PipeOp::kRecvGrad, i});
      ops.push_back({PipeOp::kSendAct, newest});
    }
    backward(i, /*recv=*/false);
  }
  for (int i = m - warm; i < m; ++i) backward(i);
  return ops;
}

int PipelineSlots(Schedule schedule, int p, int s, int m) {
  return schedule == Schedule::kGPipe ? m : std::max(1, std::min(p - s, m));
}

double IdealBubble(int p, int m) { return static_cast<double>(p - 1) / (m + p - 1); }

}  // namespace gantry::jobspec
