#include "comm/groups.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace gantry::comm {

absl::StatusOr<std::unique_ptr<Groups>> MakeGroups(int rank, const jobspec::Layout& l, const GroupFactory& factory) {
  if (l.dp < 1 || l.tp < 1 || l.pp < 1 || l.ep < 1 || l.cp < 1 || l.dp % l.ep != 0 || rank < 0 ||
      rank >= l.world()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of dp ", l.dp, " x cp ", l.cp, " x tp ", l.tp,
                                                   " x pp ", l.pp, " (ep ", l.ep, ")"));
  }
  auto g = std::make_unique<Groups>();
  g->layout = l;
  g->rank = rank;
  g->me = jobspec::CoordsOf(rank, l);
  const jobspec::Coords me = g->me;
  auto make = [&](const std::string& name, const std::vector<int>& members) -> absl::StatusOr<Communicator*> {
    if (members.size() <= 1) return nullptr;
    int index = 0;
    while (members[static_cast<size_t>(index)] != rank) ++index;
    ASSIGN_OR_RETURN(std::unique_ptr<Communicator> c, factory(name, members, index));
    g->owned.push_back(std::move(c));
    return g->owned.back().get();
  };
  std::vector<int> world, dp, tp, pp, mp, cp, dp_cp;
  for (int r = 0; r < l.world(); ++r) {
    const jobspec::Coords c = jobspec::CoordsOf(r, l);
    world.push_back(r);
    const bool same_cp = c.cp_rank == me.cp_rank;
    if (c.stage == me.stage && c.tp_rank == me.tp_rank && same_cp) dp.push_back(r);
    if (c.stage == me.stage && c.replica == me.replica && same_cp) tp.push_back(r);
    if (c.replica == me.replica && c.tp_rank == me.tp_rank && same_cp) pp.push_back(r);
    if (c.stage == me.stage && c.replica == me.replica && c.tp_rank == me.tp_rank) cp.push_back(r);
    if (c.stage == me.stage && c.tp_rank == me.tp_rank) dp_cp.push_back(r);
  }
  // mp in (stage, tp_rank) order
  for (int s = 0; s < l.pp; ++s) {
    for (int t = 0; t < l.tp; ++t) mp.push_back(jobspec::RankOf({me.replica, t, s, me.cp_rank}, l));
  }
  // With cp > 1 the groups inside a replica are per cp rank (the names say which); cp 1 keeps
  // the names it always had.
  const std::string c_tag = l.cp > 1 ? absl::StrCat("/c", me.cp_rank) : "";
  const std::string dp_name = absl::StrCat("dp/s", me.stage, "/t", me.tp_rank, c_tag);
  const std::string tp_name = absl::StrCat("tp/s", me.stage, "/r", me.replica, c_tag);
  const std::string pp_name = absl::StrCat("pp/r", me.replica, "/t", me.tp_rank, c_tag);
  ASSIGN_OR_RETURN(g->world, make("world", world));
  ASSIGN_OR_RETURN(g->dp, make(dp_name, dp));
  ASSIGN_OR_RETURN(g->tp, make(tp_name, tp));
  ASSIGN_OR_RETURN(g->pp, make(pp_name, pp));
  if (l.pp > 1 && (me.stage == 0 || me.stage == l.pp - 1)) {
    ASSIGN_OR_RETURN(g->emb,
                     make(absl::StrCat("emb/r", me.replica, "/t", me.tp_rank, c_tag), {pp.front(), pp.back()}));
  }
  ASSIGN_OR_RETURN(g->mp, make(absl::StrCat("mp/r", me.replica, c_tag), mp));
  if (l.ep > 1) {
    // Replicas are ordered by index in both: the ep group's index is the ep rank.
    const int group = me.replica / l.ep, ep_rank = jobspec::EpRankOf(me, l);
    std::vector<int> ep, edp;
    for (int i = 0; i < l.ep; ++i) ep.push_back(jobspec::RankOf({group * l.ep + i, me.tp_rank, me.stage, me.cp_rank}, l));
    // edp: every cp rank of those replicas (each saw part of the sequences), in rank order.
    for (int i = 0; i < l.dp / l.ep; ++i) {
      for (int c = 0; c < l.cp; ++c) edp.push_back(jobspec::RankOf({i * l.ep + ep_rank, me.tp_rank, me.stage, c}, l));
    }
    ASSIGN_OR_RETURN(g->ep, make(absl::StrCat("ep/s", me.stage, "/t", me.tp_rank, "/g", group, c_tag), ep));
    ASSIGN_OR_RETURN(g->edp, make(absl::StrCat("edp/s", me.stage, "/t", me.tp_rank, "/e", ep_rank), edp));
  }
  if (l.cp > 1) {  // the ring in cp-rank order (its index is the cp rank); dp_cp in rank order
    ASSIGN_OR_RETURN(g->cp, make(absl::StrCat("cp/s", me.stage, "/r", me.replica, "/t", me.tp_rank), cp));
    ASSIGN_OR_RETURN(g->dp_cp, make(absl::StrCat("dpcp/s", me.stage, "/t", me.tp_rank), dp_cp));
  }
  return g;
}

std::unique_ptr<Groups> DataParallelGroups(Communicator* dp) {
  auto g = std::make_unique<Groups>();
  if (dp == nullptr || dp->size() <= 1) return g;  // a group of one is null, as MakeGroups leaves it
  g->layout.dp = dp->size();
  g->rank = dp->rank();
  g->me = jobspec::CoordsOf(g->rank, g->layout);
  g->dp = dp;
  g->world = dp;
  return g;
}

bool PointToPointGroup(const std::string& name) {
  return absl::StartsWith(name, "pp/") || absl::StartsWith(name, "cp/");
}

}  // namespace gantry::comm
