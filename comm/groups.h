// The process groups of a 4D (data x pipeline x context x tensor parallel) job. Ranks are
// numbered as the coordinator assigns them (jobspec/ranks.h): rank = ((stage * dp + replica) *
// cp + cp_rank) * tp + tp_rank, so a tensor-parallel group is tp consecutive ranks (one host).
// A "replica" below is one (replica, cp_rank) pair where cp > 1: the groups inside a model
// replica (tp, pp, emb, mp, ep) join ranks of one cp rank; edp, like dp_cp, every cp rank.
//
//   dp   the replicas of one (stage, tp_rank, cp_rank) shard: the batch's split (the data
//        loader); with cp 1 also gradient reduction and ZeRO
//   cp   the context-parallel ranks of one (stage, replica, tp_rank): ring attention's K/V
//        exchanges (null for cp 1)
//   dp_cp  the dp x cp ranks of one (stage, tp_rank), which hold the same parameters: gradient
//        reduction, ZeRO's shards and the loss's mean where cp > 1 (null for cp 1: dp serves)
//   tp   the tensor-parallel ranks of one (stage, replica): the all-reduces inside a layer
//   pp   the stages of one (replica, tp_rank): activations and their gradients, point to point
//   emb  the first and last stage of one (replica, tp_rank), pp > 1: the tied wte's gradient
//   mp   every (stage, tp_rank) of one replica: the gradient norm and the loss
//   world every rank: barriers around checkpoints (DataParallelGroups: the dp group itself)
//   ep   the ep replicas of one expert-parallel group (same stage and tp_rank): the MoE
//        layers' all-to-all dispatch and combine
//   edp  the dp/ep replicas with this rank's experts (same ep rank, stage and tp_rank), each
//        with its cp ranks: the experts' gradient reduction
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "jobspec/ranks.h"
#include "comm/communicator.h"

namespace gantry::comm {

struct Groups {
  jobspec::Layout layout;
  jobspec::Coords me;
  int rank = 0;
  // Null where the group would be this rank alone (emb: also where pp is 1 or the stage is
  // in the middle).
  Communicator* dp = nullptr;
  Communicator* tp = nullptr;
  Communicator* pp = nullptr;
  Communicator* emb = nullptr;
  Communicator* mp = nullptr;
  Communicator* world = nullptr;
  Communicator* ep = nullptr;
  Communicator* edp = nullptr;
  Communicator* cp = nullptr;
  Communicator* dp_cp = nullptr;
  // The group that holds this rank's parameters whole between them: gradients are averaged
  // and ZeRO shards over it (dp x cp ranks; dp where cp is 1). Null where it is this rank alone.
  Communicator* grads() const { return layout.cp > 1 ? dp_cp : dp; }
  std::vector<std::unique_ptr<Communicator>> owned;
};

// Makes a group: `name` is the same on every member, `members` the world ranks in group
// order, `index` this rank's place among them.
using GroupFactory = std::function<absl::StatusOr<std::unique_ptr<Communicator>>(
    const std::string& name, const std::vector<int>& members, int index)>;

// Every rank creates its groups in the same order (world, dp, tp, pp, emb, mp, ep, edp, cp,
// dp_cp), so the
// joins never wait on one another in a cycle. Groups of one are not created.
absl::StatusOr<std::unique_ptr<Groups>> MakeGroups(int rank, const jobspec::Layout& layout, const GroupFactory& factory);

// Whether the group named so (MakeGroups' names) transfers point to point: the pipeline's
// stages (pp) and context parallelism's ring (cp). A transport may prepare such a group for
// it (GlooOptions::shared_memory).
bool PointToPointGroup(const std::string& name);

// The groups of a job that only splits its batch (tp, pp, cp and ep 1) over one communicator
// of all its ranks, which the caller owns: that group is both dp and world (MakeGroups would
// join a second group of the same ranks for world). Null: one rank alone (every group null).
std::unique_ptr<Groups> DataParallelGroups(Communicator* dp);

}  // namespace gantry::comm
