// Context parallelism wired into training (parallel.cp): the rank layout and groups, and a few
// steps at cp 2 (and cp 2 x dp 2) against one process, every rank a thread of this process
// with Gloo communicators over loopback. (tests/model/context_parallel_test.cc checks the ring
// attention itself against the unsplit attention.)
#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "comm/comm_thread.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/groups.h"
#include "jobspec/ranks.h"

namespace gantry::train {
namespace {

// Megatron-Core's order: tp innermost, then cp, then dp, pp outermost. With dp 2, cp 2, tp 2,
// pp 2 (16 ranks) every rank's cp group is its (stage, replica, tp rank)'s cp ranks in cp
// order, its dp_cp group the dp x cp ranks of its (stage, tp rank), and the groups inside a
// replica (tp, pp, mp) stay within one cp rank.
TEST(CpGroupsTest, RanksPutCpBetweenTpAndDpAndTheGroupsFollow) {
  const jobspec::Layout l{2, 2, 2, 1, 2};
  ASSERT_EQ(l.world(), 16);
  for (int r = 0; r < l.world(); ++r) {
    const jobspec::Coords c = jobspec::CoordsOf(r, l);
    EXPECT_EQ(jobspec::RankOf(c, l), r);
    EXPECT_EQ(r, ((c.stage * 2 + c.replica) * 2 + c.cp_rank) * 2 + c.tp_rank);
    std::map<std::string, std::vector<int>> made;
    auto g = comm::MakeGroups(r, l, [&](const std::string& name, const std::vector<int>& members, int index)
                                          -> absl::StatusOr<std::unique_ptr<comm::Communicator>> {
      EXPECT_EQ(members[static_cast<size_t>(index)], r) << name;
      EXPECT_EQ(made.count(name.substr(0, name.find('/'))), 0u) << name;
      made[name.substr(0, name.find('/'))] = members;
      return std::make_unique<comm::SoloCommunicator>();
    });
    ASSERT_TRUE(g.ok()) << g.status();
    auto at = [&](int replica, int tp_rank, int stage, int cp_rank) {
      return jobspec::RankOf({replica, tp_rank, stage, cp_rank}, l);
    };
    EXPECT_EQ(made["cp"], (std::vector<int>{at(c.replica, c.tp_rank, c.stage, 0), at(c.replica, c.tp_rank, c.stage, 1)}))
        << "rank " << r;
    EXPECT_EQ(made["dpcp"], (std::vector<int>{at(0, c.tp_rank, c.stage, 0), at(0, c.tp_rank, c.stage, 1),
                                              at(1, c.tp_rank, c.stage, 0), at(1, c.tp_rank, c.stage, 1)}))
        << "rank " << r;
    EXPECT_EQ(made["dp"], (std::vector<int>{at(0, c.tp_rank, c.stage, c.cp_rank), at(1, c.tp_rank, c.stage, c.cp_rank)}));
    EXPECT_EQ(made["tp"], (std::vector<int>{at(c.replica, 0, c.stage, c.cp_rank), at(c.replica, 1, c.stage, c.cp_rank)}));
    EXPECT_EQ(made["pp"], (std::vector<int>{at(c.replica, c.tp_rank, 0, c.cp_rank), at(c.replica, c.tp_rank, 1, c.cp_rank)}));
    EXPECT_EQ(made["mp"].size(), 4u);
    for (int m : made["mp"]) EXPECT_EQ(jobspec::CoordsOf(m, l).cp_rank, c.cp_rank);
    EXPECT_EQ((*g)->cp->size(), 1) << "(the fake factory's communicators are groups of one)";
    EXPECT_EQ((*g)->grads(), (*g)->dp_cp);
  }
  // cp 1: no cp or dp_cp group, and the ranks as they always were.
  const jobspec::Layout flat{2, 2, 2};
  for (int r = 0; r < flat.world(); ++r) {
    const jobspec::Coords c = jobspec::CoordsOf(r, flat);
    EXPECT_EQ(r, (c.stage * 2 + c.replica) * 2 + c.tp_rank);
    EXPECT_EQ(c.cp_rank, 0);
  }
  std::vector<std::string> names;
  auto g = comm::MakeGroups(5, flat, [&](const std::string& name, const std::vector<int>&, int)
                                         -> absl::StatusOr<std::unique_ptr<comm::Communicator>> {
    names.push_back(name);
    return std::make_unique<comm::SoloCommunicator>();
  });
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->cp, nullptr);
  EXPECT_EQ((*g)->dp_cp, nullptr);
  EXPECT_EQ((*g)->grads(), (*g)->dp);
  EXPECT_EQ(names, (std::vector<std::string>{"world", "dp/s1/t1", "tp/s1/r0", "pp/r0/t1", "emb/r0/t1", "mp/r0"}))
      << "cp 1 keeps its groups' names";
  EXPECT_FALSE(comm::MakeGroups(0, {1, 1, 1, 1, 0}, nullptr).ok()) << "cp 0";
}

}  // namespace
}  // namespace gantry::train
