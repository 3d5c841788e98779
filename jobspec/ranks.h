// Ranks of a 3D (data x pipeline x tensor parallel) job, as the coordinator assigns them:
// rank = (stage * dp + replica) * tp + tp_rank, so a tensor-parallel group is tp consecutive
// ranks (one host). The coordinator, the planner and the worker's process groups share it.
#pragma once

namespace gantry::jobspec {

// ep (expert parallelism) divides dp: replicas [g·ep, (g+1)·ep) form expert-parallel group g,
// and a replica's place in its group is replica % ep. It adds no ranks.
struct Layout {
  int dp = 1, tp = 1, pp = 1;
  int ep = 1;
  int world() const { return dp * tp * pp; }
};

struct Coords {
  int replica = 0, tp_rank = 0, stage = 0;
};

inline Coords CoordsOf(int rank, const Layout& l) {
  return {(rank / l.tp) % l.dp, rank % l.tp, rank / (l.tp * l.dp)};
}
inline int EpRankOf(const Coords& c, const Layout& l) { return c.replica % l.ep; }
inline int RankOf(const Coords& c, const Layout& l) { return (c.stage * l.dp + c.replica) * l.tp + c.tp_rank; }

}  // namespace gantry::jobspec
