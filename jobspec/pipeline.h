// Pipeline schedules: the order of one stage's work and transfers in a step of m
// micro-batches over p stages.
//
//   GPipe  every forward, then every backward (m activation sets kept)
//   1F1B   p - s - 1 forwards to fill the pipe, then one forward and one backward in turn,
//          then the remaining backwards (at most p - s activation sets kept)
//
// Transfers are blocking and rendezvous (a send completes when the peer receives), so the
// order matters: in 1F1B's steady state a stage receives the gradient of its oldest
// micro-batch before it sends the activation of its newest, which keeps every pair of
// neighbours in step (pipeline_test checks every p <= 8, m <= 16 against a rendezvous
// simulation). Both schedules leave (p - 1) / (m + p - 1) of a step idle on balanced stages.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gantry::jobspec {

enum class Schedule { k1F1B, kGPipe };
absl::StatusOr<Schedule> ParseSchedule(const std::string& name);  // "1f1b", "gpipe"

struct PipeOp {
  enum Kind { kRecvAct, kForward, kSendAct, kRecvGrad, kBackward, kSendGrad } kind;
  int micro;
  bool operator==(const PipeOp&) const = default;
};

std::vector<PipeOp> PipelineOps(Schedule schedule, int p, int s, int m);
// Activation sets stage s keeps at once.
int PipelineSlots(Schedule schedule, int p, int s, int m);
// The idle fraction of balanced stages: (p - 1) / (m + p - 1).
double IdealBubble(int p, int m);

}  // namespace gantry::jobspec
