// A rank's process groups (comm/groups.h): a data-parallel job's over one communicator
// (DataParallelGroups) place the rank as MakeGroups places it, with that one group as dp and
// world; each rank a thread of this process over Gloo on loopback.
#include "comm/groups.h"

#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "comm/comm_thread.h"
#include "comm/gloo/gloo_communicator.h"

namespace gantry::comm {
namespace {

TEST(DataParallelGroupsTest, OneCommunicatorIsTheDpGroupAndTheWorldAndPlacesTheRankAsMakeGroups) {
  constexpr int kRanks = 3;
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<std::unique_ptr<Communicator>> comms(kRanks);
  std::vector<std::unique_ptr<Groups>> made(kRanks);
  std::vector<absl::Status> status(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      auto c = GlooCommunicator::Create(r, kRanks, store, {});
      if (!c.ok()) {
        status[r] = c.status();
        return;
      }
      comms[r] = std::move(*c);
      auto g = MakeGroups(r, {kRanks}, GlooGroups(store, {}));
      if (!g.ok()) {
        status[r] = g.status();
        return;
      }
      made[r] = std::move(*g);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    const std::unique_ptr<Groups> g = DataParallelGroups(comms[r].get());
    EXPECT_EQ(g->rank, r);
    EXPECT_EQ(g->layout.dp, kRanks);
    EXPECT_EQ(g->layout.world(), kRanks);
    // Where MakeGroups of the same layout puts the rank.
    EXPECT_EQ(g->rank, made[r]->rank);
    EXPECT_EQ(g->me.replica, made[r]->me.replica);
    EXPECT_EQ(g->me.tp_rank, made[r]->me.tp_rank);
    EXPECT_EQ(g->me.stage, made[r]->me.stage);
    EXPECT_EQ(g->me.cp_rank, made[r]->me.cp_rank);
    // One group for the batch, the gradients and the barriers; none inside a replica.
    EXPECT_EQ(g->dp, comms[r].get());
    EXPECT_EQ(g->world, comms[r].get());
    EXPECT_EQ(g->grads(), comms[r].get());
    for (Communicator* none : {g->tp, g->pp, g->emb, g->mp, g->ep, g->edp, g->cp, g->dp_cp}) EXPECT_EQ(none, nullptr);
    for (Communicator* none : {made[r]->tp, made[r]->pp, made[r]->emb, made[r]->mp, made[r]->ep, made[r]->edp,
                               made[r]->cp, made[r]->dp_cp}) {
      EXPECT_EQ(none, nullptr) << "MakeGroups of a data-parallel layout makes none either";
    }
    EXPECT_TRUE(g->owned.empty()) << "the caller owns the communicator";
  }
}

TEST(DataParallelGroupsTest, NoCommunicatorOrAGroupOfOneIsOneRankAlone) {
  SoloCommunicator solo;
  for (Communicator* c : {static_cast<Communicator*>(nullptr), static_cast<Communicator*>(&solo)}) {
    const std::unique_ptr<Groups> g = DataParallelGroups(c);
    EXPECT_EQ(g->rank, 0);
    EXPECT_EQ(g->layout.world(), 1);
    EXPECT_EQ(g->dp, nullptr) << "a group of one is null, as MakeGroups leaves it";
    EXPECT_EQ(g->world, nullptr);
    EXPECT_EQ(g->grads(), nullptr);
  }
}

}  // namespace
}  // namespace gantry::comm
