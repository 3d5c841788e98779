// Ranks of a 4D (data x pipeline x context x tensor parallel) job, as the coordinator assigns
// them: rank = ((stage * dp + replica) * cp + cp_rank) * tp + tp_rank, Megatron-Core's order
// (tp innermost, then cp, then dp, pp outermost), so a tensor-parallel group is tp consecutive
// ranks (one host) and a context-parallel group the next nearest (its ring moves a K/V block a
// layer). With cp 1 this is (stage * dp + replica) * tp + tp_rank. The coordinator, the
// planner and the worker's process groups share it.
#pragma once

namespace gantry::jobspec {

// ep (expert parallelism) divides dp: replicas [g·ep, (g+1)·ep) form expert-parallel group g,
// and a replica's place in its group is replica % ep. It adds no ranks.
// cp (context parallelism) splits each sequence over cp ranks that hold the same parameters
// and read the same sequences (model/context_parallel.h).
struct Layout {
  int dp = 1, tp = 1, pp = 1;
  int ep = 1;
  int cp = 1;
  int world() const { return dp * cp * tp * pp; }
};

struct Coords {
  int replica = 0, tp_rank = 0, stage = 0;
  int cp_rank = 0;
};

inline Coords CoordsOf(int rank, const Layout& l) {
  return {(rank / (l.tp * l.cp)) % l.dp, rank % l.tp, rank / (l.tp * l.cp * l.dp), (rank / l.tp) % l.cp};
}
inline int EpRankOf(const Coords& c, const Layout& l) { return c.replica % l.ep; }
inline int RankOf(const Coords& c, const Layout& l) {
  return ((c.stage * l.dp + c.replica) * l.cp + c.cp_rank) * l.tp + c.tp_rank;
}

}  // namespace gantry::jobspec
