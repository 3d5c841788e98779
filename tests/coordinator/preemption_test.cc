// Which running jobs a preemption takes (coordinator/preemption.h), case by case, and who may
// submit a job that cannot be preempted (quota.h's NotPreemptibleRefusal).
#include "coordinator/preemption.h"

#include <gtest/gtest.h>

#include "coordinator/quota.h"

namespace gantry::coordinator {
namespace {

using preemption::Candidate;

struct VictimCase {
  const char* name;
  std::vector<Candidate> running;
  int64_t need, idle;
  std::vector<std::string> want;  // the victims, in the order chosen
};

// job_id, slots, steps since its checkpoint, submit time; priority 0 and no team unless set.
Candidate C(const std::string& id, int64_t slots, int64_t work = 0, int64_t submitted = 0, int32_t priority = 0) {
  return {id, "", priority, slots, work, submitted};
}

std::vector<VictimCase> VictimCases() {
  return {
      {"the fewest slots freed in excess", {C("j-1", 4), C("j-2", 2), C("j-3", 3)}, 2, 0, {"j-2"}},
      {"idle slots count toward the need", {C("j-1", 4), C("j-2", 2), C("j-3", 1)}, 3, 2, {"j-3"}},
      {"nothing when the idle slots already do", {C("j-1", 1)}, 2, 2, {}},
      {"nothing when all of them would not be enough", {C("j-1", 1), C("j-2", 1)}, 4, 1, {}},
      {"equal excess: the least work since its checkpoint", {C("j-1", 2, 9), C("j-2", 2, 3), C("j-3", 2, 5)}, 2, 0,
       {"j-2"}},
      {"equal work: the youngest", {C("j-1", 2, 3, 100), C("j-2", 2, 3, 300), C("j-3", 2, 3, 200)}, 2, 0, {"j-2"}},
      {"equal age: the later id", {C("j-9", 1), C("j-10", 1)}, 1, 0, {"j-10"}},
      {"before work: the lower priority", {C("j-1", 2, 0, 0, 3), C("j-2", 2, 50, 0, 1)}, 2, 0, {"j-2"}},
      {"none covers alone: the largest first, then the best fit", {C("j-1", 1, 0), C("j-2", 3, 9), C("j-3", 2, 1)}, 5, 0,
       {"j-2", "j-3"}},
      {"several small ones: the least work first", {C("j-1", 1, 7), C("j-2", 1, 2), C("j-3", 1, 4)}, 2, 0,
       {"j-2", "j-3"}},
  };
}

void PrintTo(const VictimCase& c, std::ostream* os) { *os << c.name; }

class ChooseVictimsTest : public ::testing::TestWithParam<VictimCase> {};

TEST_P(ChooseVictimsTest, TheStatedRulePicksThem) {
  const VictimCase& c = GetParam();
  std::vector<std::string> got;
  for (const Candidate& v : preemption::ChooseVictims(c.running, c.need, c.idle, nullptr)) got.push_back(v.job_id);
  EXPECT_EQ(got, c.want) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Cases, ChooseVictimsTest, ::testing::ValuesIn(VictimCases()),
                         [](const ::testing::TestParamInfo<VictimCase>& i) { return std::to_string(i.index); });

TEST(ChooseVictimsTest, OnlyWhatTheCallerAdmitsIsTakenAndAllOfItMustCoverTheNeed) {
  const std::vector<Candidate> running = {C("j-1", 1), C("j-2", 2), C("j-3", 4)};
  // A caller that reclaims borrowed capacity passes its own predicate: here, not j-2.
  auto not_j2 = [](const Candidate& c) { return c.job_id != "j-2"; };
  std::vector<std::string> got;
  for (const Candidate& v : preemption::ChooseVictims(running, 2, 0, not_j2)) got.push_back(v.job_id);
  EXPECT_EQ(got, std::vector<std::string>{"j-3"}) << "j-2 fits best but is not admitted";
  EXPECT_TRUE(preemption::ChooseVictims(running, 2, 0, [](const Candidate& c) { return c.slots == 1; }).empty())
      << "what it admits (1 slot) cannot cover 2: nothing is preempted for nothing";
}

TEST(NotPreemptibleTest, AdmittedOnlyWithinTheTeamsNominalQuota) {
  TeamQuotas q;
  q["vision"].team = "vision";
  q["vision"].nominal = {{"cpu", 4}};
  EXPECT_EQ(quota::NotPreemptibleRefusal(q, "vision", "cpu", 4, 0), "");
  EXPECT_EQ(quota::NotPreemptibleRefusal(q, "vision", "cpu", 3, 1), "");
  EXPECT_EQ(quota::NotPreemptibleRefusal(q, "vision", "cpu", 3, 2),
            "scheduling.preemptible: false is admitted only within the team's nominal quota: team vision's is 4 cpu "
            "slots, its other non-preemptible jobs hold 2 and this job needs 3 (set scheduling.preemptible: true, or "
            "ask for a larger quota)");
  EXPECT_EQ(quota::NotPreemptibleRefusal(q, "vision", "cuda", 1, 0),
            "scheduling.preemptible: false is admitted only within the team's nominal quota: team vision has no quota "
            "of GPUs");
  EXPECT_EQ(quota::NotPreemptibleRefusal(q, "speech", "cpu", 1, 0),
            "scheduling.preemptible: false is admitted only within the team's nominal quota: team speech has no quota "
            "of cpu slots");
  EXPECT_NE(quota::NotPreemptibleRefusal(q, "", "cpu", 1, 0).find("the job has no team"), std::string::npos);
}

}  // namespace
}  // namespace gantry::coordinator
