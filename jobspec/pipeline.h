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
//
//   interleaved 1F1B (Narayanan et al. 2021, v > 1 model chunks a stage; m a multiple of p)
//          stage s holds virtual stages s, s + p, ..., s + (v-1)p of p·v. Its k-th forward is
//          chunk (k / p) % v of micro-batch (k / (p·v))·p + k % p, its k-th backward the same
//          with the chunks reversed; (p - s - 1)·2 + (v - 1)·p forwards warm up, then one
//          forward and one backward in turn, then the remaining backwards. Transfers run round
//          the ring (stage p - 1's chunk c feeds stage 0's chunk c + 1). Each op carries its
//          chunk and the activation set (slot) it uses. The bubble falls to (p - 1) / (v·m + p - 1)
//          of a step: (p - 1) / (v·m) of the compute.
//
// The interleaved transfers are placed by simulating every stage at once (a forward takes 1, a
// backward 2, a transfer 0), each transfer run as a matched pair the moment both ends reach it:
// every stage's order is then a projection of one global order of matched pairs, so rendezvous
// transfers cannot deadlock, and between two neighbours messages go in the order they are
// received. A stage may send a result after later ops and receive an input up to two computes
// before the one that needs it: each waits in its micro-batch's slot (its mailbox,
// jobspec::ChunkedActivations), so that neither neighbour of an exchange waits for the other's
// next compute.
//
// Exchanges (every schedule, PairExchanges in pipeline.cc): where a stage's order has a send and
// a receive next to each other with one peer, and the peer's order has the two transfers that
// match them next to each other too, in the same order, both run as one
// `Communicator::SendRecv` (the first op's `joint`): one rendezvous of the two stages where there
// were two, as Megatron's send_forward_recv_backward and send_backward_recv_forward. A pair is
// formed on both sides or on neither (a SendRecv meets a SendRecv), and only where the two
// transfers were already consecutive matched pairs in the one global order, so the schedule stays
// deadlock-free and its timing (transfers free) is unchanged. 1F1B's steady state pairs each
// gradient received with the activation sent beside it. The interleaved schedule pairs what its
// simulation put side by side, and then defers a transfer left alone to the next transfer the
// other way between the same two stages where its receiver does not need it before (no stage
// reaches a rendezvous later; the slots, counted after, came out as before wherever compared:
// decisions.md): at p 2, v 2 every steady-state transfer pairs. GPipe has no such pairs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gantry::jobspec {

enum class Schedule { k1F1B, kGPipe };
absl::StatusOr<Schedule> ParseSchedule(const std::string& name);  // "1f1b", "gpipe"

struct PipeOp {
  enum Kind { kRecvAct, kForward, kSendAct, kRecvGrad, kBackward, kSendGrad } kind;
  int micro;
  int chunk = 0;   // the stage's model chunk (interleaved; 0 otherwise)
  int slot = -1;   // interleaved: the activation set the op uses; -1: micro % PipelineSlots
  // This transfer and the next op, a transfer the other way with the same peer, run together as
  // one Communicator::SendRecv, which the peer runs for the two that match them (pipeline.h's
  // exchanges). Set on the first of the two only.
  bool joint = false;
  bool operator==(const PipeOp&) const = default;
};

// v: model chunks a stage (parallel.virtual_stages); v > 1 runs the interleaved 1F1B (schedule
// k1F1B, m a multiple of p: CheckInterleaved).
std::vector<PipeOp> PipelineOps(Schedule schedule, int p, int s, int m, int v = 1);
// The blocking transfers (rendezvous with a neighbour) in a stage's ops: each transfer, a joint
// pair counted once.
int PipelineRendezvous(const std::vector<PipeOp>& ops);
// Activation sets stage s keeps at once.
int PipelineSlots(Schedule schedule, int p, int s, int m, int v = 1);
// The idle fraction of balanced stages: (p - 1) / (v·m + p - 1) ((p - 1) / (m + p - 1) for v 1).
double IdealBubble(int p, int m, int v = 1);

// The stages' ops run as the trainer runs them, with rendezvous transfers: a transfer completes
// only with the peer's matching one (the same micro-batch, the next or previous virtual stage's
// chunk round the ring), an exchange (a joint op and the next, one SendRecv) only with the
// peer's exchange of the two transfers that match them, both stages leaving it at the later of
// their arrivals plus `rendezvous_seconds`. Compute op i of stage s takes seconds(s, i).
struct PipelineRun {
  double span = 0;                // the pipeline's time: the last stage to finish
  std::vector<double> idle;       // each stage's idle fraction of the span
  double bubble = 0;              // their mean
  std::vector<int> rendezvous;    // each stage's blocking transfers
};
// FAILED_PRECONDITION naming the stages' positions when the ops deadlock.
absl::StatusOr<PipelineRun> SimulatePipeline(const std::vector<std::vector<PipeOp>>& ops,
                                             const std::function<double(int s, size_t i)>& seconds,
                                             double rendezvous_seconds = 0);
// Whether the interleaved schedule takes p stages of v chunks and m micro-batches; the error
// names what is wrong (as parallel.virtual_stages' validation words it).
absl::Status CheckInterleaved(Schedule schedule, int p, int m, int v);

}  // namespace gantry::jobspec
