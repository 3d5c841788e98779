// The principals file (common/principals.h): what it names and how a token finds its
// identity (SHA-256, every identity compared whichever matches); each kind of bad file
// refused with its line and field, never showing a token; a reload that fails leaves the
// previous file in force and is logged; a token revoked by a reload is refused from then on.
#include "common/principals.h"

#include <glog/logging.h>
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/file_util.h"
#include "tests/test_util.h"

namespace gantry {
namespace {

constexpr char kAliceToken[] = "alice-3f9c2b7a51e04d8c";
constexpr char kBobToken[] = "bob-8d1e6a0c47f2b935";
constexpr char kPoolToken[] = "pool-a-0b5c9e2f7a13d648";
constexpr char kShardToken[] = "shard-1-e47a2c90d1b35f86";

// The example of principals.h, with real hashes. Line numbers matter to the tests below.
std::string ExampleFile() {
  return absl::StrCat(                                    // line
      "users:\n",                                         // 1
      "  - name: alice\n",                                // 2
      "    team: vision\n",                               // 3
      "    role: user\n",                                 // 4
      "    token_sha256: ", Sha256Hex(kAliceToken), "\n",  // 5
      "  - name: bob\n",                                  // 6
      "    role: admin\n",                                // 7
      "    token_sha256: ", Sha256Hex(kBobToken), "\n",   // 8
      "    certificate: bob.ops.example.org\n",           // 9
      "  - name: carol\n",                                // 10
      "    team: nlp\n",                                  // 11
      "    role: viewer\n",                               // 12
      "    certificate: gantry client\n",                 // 13
      "services:\n",                                      // 14
      "  - name: gpu-pool-a\n",                           // 15
      "    kind: worker\n",                               // 16
      "    token_sha256: ", Sha256Hex(kPoolToken), "\n",  // 17
      "  - name: shard-1\n",                              // 18
      "    kind: shardserver\n",                          // 19
      "    token_sha256: ", Sha256Hex(kShardToken), "\n");  // 20
}

absl::StatusOr<PrincipalSet> Parse(const std::string& text) { return PrincipalSet::Parse(text, "p.yaml"); }

// The error of a file that must be refused ("" and a failure if it is accepted).
std::string Refusal(const std::string& text) {
  auto set = Parse(text);
  EXPECT_FALSE(set.ok()) << "accepted:\n" << text;
  if (set.ok()) return "";
  EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument) << set.status();
  return std::string(set.status().message());
}

TEST(Sha256Test, MatchesTheStandardVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_TRUE(SameDigest(Sha256("abc"), Sha256("abc")));
  EXPECT_FALSE(SameDigest(Sha256("abc"), Sha256("abd")));
}

TEST(PrincipalSetTest, EachTokenFindsItsIdentity) {
  auto set = Parse(ExampleFile());
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->size(), 5u);
  EXPECT_EQ(set->with_certificate(), 2u);

  const Principal* alice = set->FindByToken(kAliceToken);
  ASSERT_NE(alice, nullptr);
  EXPECT_EQ(alice->name, "alice");
  EXPECT_EQ(alice->team, "vision");
  EXPECT_EQ(alice->kind, PrincipalKind::kUser);
  EXPECT_EQ(alice->role, Role::kUser);
  EXPECT_EQ(alice->via, "token");
  EXPECT_FALSE(alice->is_admin());
  EXPECT_EQ(alice->Describe(), "user alice (team vision, role user)");

  const Principal* bob = set->FindByToken(kBobToken);
  ASSERT_NE(bob, nullptr);
  EXPECT_EQ(bob->name, "bob");
  EXPECT_TRUE(bob->is_admin());
  EXPECT_EQ(bob->Describe(), "user bob (role admin)");

  const Principal* pool = set->FindByToken(kPoolToken);
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->kind, PrincipalKind::kWorker);
  EXPECT_EQ(pool->role, Role::kNone);
  EXPECT_FALSE(pool->is_admin());
  EXPECT_EQ(pool->Describe(), "worker gpu-pool-a");
  const Principal* shard = set->FindByToken(kShardToken);
  ASSERT_NE(shard, nullptr);
  EXPECT_EQ(shard->kind, PrincipalKind::kShardServer);

  EXPECT_EQ(set->FindByToken("not-a-token"), nullptr);
  EXPECT_EQ(set->FindByToken(""), nullptr);
  EXPECT_EQ(set->FindByToken(Sha256Hex(kAliceToken)), nullptr) << "the hash itself is not the token";

  // Certificates: by the name in the file, exactly.
  const Principal* carol = set->FindByCertificateName("gantry client");
  ASSERT_NE(carol, nullptr);
  EXPECT_EQ(carol->name, "carol");
  EXPECT_EQ(carol->role, Role::kViewer);
  EXPECT_EQ(carol->via, "certificate");
  ASSERT_NE(set->FindByCertificateName("bob.ops.example.org"), nullptr);
  EXPECT_EQ(set->FindByCertificateName("bob.ops.example.org")->name, "bob");
  EXPECT_EQ(set->FindByCertificateName("bob"), nullptr) << "a principal's name is not its certificate name";
  EXPECT_EQ(set->FindByCertificateName("Gantry Client"), nullptr);
}

TEST(PrincipalSetTest, EveryTokenIsComparedWhicheverMatches) {
  // Constant time in which identity matches (CRYPTO_memcmp per comparison, no early exit):
  // the first, the last and no identity all cost the same comparisons.
  auto set = Parse(ExampleFile());
  ASSERT_TRUE(set.ok()) << set.status();
  for (const char* token : {kAliceToken, kShardToken, "unknown"}) {
    int compared = -1;
    (void)set->FindByToken(token, &compared);
    EXPECT_EQ(compared, 4) << token << ": the four identities with a token, each compared";
  }
}

TEST(PrincipalSetTest, SectionsInEitherOrderHexInEitherCase) {
  std::string text = ExampleFile();
  const size_t services = text.find("services:");
  text = text.substr(services) + text.substr(0, services);  // services first
  const std::string lower = Sha256Hex(kAliceToken);
  std::string upper = lower;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  text = absl::StrReplaceAll(text, {{lower, upper}});
  auto set = Parse(text);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_NE(set->FindByToken(kAliceToken), nullptr);
  EXPECT_EQ(set->principals().front().name, "alice") << "users first";
}

TEST(PrincipalSetTest, YamlThatDoesNotParseNamesItsLine) {
  const std::string msg = Refusal("users:\n  - name: alice\n    role: user\n   team: [vision\n");
  EXPECT_NE(msg.find("p.yaml:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not valid YAML"), std::string::npos) << msg;
  const std::string msg2 = Refusal("users:\n  - name: alice\n    role: {admin\n");
  EXPECT_NE(msg2.find("p.yaml:"), std::string::npos) << msg2;
}

TEST(PrincipalSetTest, AnUnknownRoleIsRefusedWithItsLineAndField) {
  const std::string text = absl::StrReplaceAll(ExampleFile(), {{"    role: admin\n", "    role: superuser\n"}});
  EXPECT_EQ(Refusal(text), "p.yaml:7: users[1].role: unknown role 'superuser' (admin, user, viewer)");
}

TEST(PrincipalSetTest, AnUnknownKindOrFieldIsRefusedWithItsLine) {
  EXPECT_EQ(Refusal(absl::StrReplaceAll(ExampleFile(), {{"kind: shardserver", "kind: shard"}})),
            "p.yaml:19: services[1].kind: unknown kind 'shard' (worker, shardserver)");
  EXPECT_EQ(Refusal(absl::StrReplaceAll(ExampleFile(), {{"    team: nlp\n", "    teem: nlp\n"}})),
            "p.yaml:11: users[2].teem: unknown field (known: name, team, role, token_sha256, certificate)");
  EXPECT_EQ(Refusal(absl::StrReplaceAll(ExampleFile(), {{"    kind: worker\n", "    kind: worker\n    team: x\n"}})),
            "p.yaml:17: services[0].team: unknown field (known: name, kind, token_sha256, certificate)");
  EXPECT_EQ(Refusal("users: []\ngroups: []\n"), "p.yaml:2: groups: unknown field (known: services, teams, users)");
  EXPECT_EQ(Refusal(absl::StrReplaceAll(ExampleFile(), {{"    role: viewer\n", "    role: viewer\n    role: admin\n"}})),
            "p.yaml:13: users[2].role: appears twice");
}

TEST(PrincipalSetTest, MissingFieldsAreNamed) {
  EXPECT_EQ(Refusal(absl::StrReplaceAll(ExampleFile(), {{"    role: user\n", ""}})),
            "p.yaml:2: users[0].role: is required (admin, user, viewer)");
  EXPECT_EQ(Refusal(absl::StrReplaceAll(ExampleFile(), {{"    team: vision\n", ""}})),
            "p.yaml:2: users[0].team: is required for role user");
  EXPECT_EQ(Refusal(absl::StrReplaceAll(ExampleFile(), {{"    kind: worker\n", ""}})),
            "p.yaml:15: services[0].kind: is required (worker, shardserver)");
  EXPECT_EQ(Refusal(absl::StrReplaceAll(ExampleFile(), {{"    certificate: gantry client\n", ""}})),
            "p.yaml:10: users[2]: carol needs token_sha256 or certificate (or both) to be recognised");
  EXPECT_EQ(Refusal("users:\n  - team: x\n    role: admin\n    certificate: c\n"), "p.yaml:2: users[0].name: is required");
}

TEST(PrincipalSetTest, BadValuesAreNamed) {
  EXPECT_EQ(Refusal(absl::StrReplaceAll(ExampleFile(), {{"name: alice", "name: alice/smith"}})),
            "p.yaml:2: users[0].name: 'alice/smith' is not a name (1 to 128 letters, digits, '.', '_', '@', '-')");
  EXPECT_EQ(Refusal(absl::StrReplaceAll(ExampleFile(), {{"team: vision", "team: [vision, nlp]"}})),
            "p.yaml:3: users[0].team: must be a single value, not a sequence");
  EXPECT_EQ(Refusal("users: alice\n"), "p.yaml:1: users: must be a list of identities, not 'alice'");
  EXPECT_EQ(Refusal("users:\n  - alice\n"),
            "p.yaml:2: users[0]: must be a mapping (name, team, role, token_sha256 and/or certificate), not 'alice'");
  EXPECT_EQ(Refusal("- alice\n"), "p.yaml:1: (top level): must be a mapping with users and services, not a sequence");
}

// teams: (the coordinator's quotas): what a good section gives, and each bad entry refused
// with its line and field.
constexpr char kTeams[] =
    "teams:\n"                            // 21
    "  - name: vision\n"                  // 22
    "    quota: {cuda: 16, cpu: 4}\n"     // 23
    "    max_running_jobs: 3\n"           // 24
    "  - name: nlp\n"                     // 25
    "    quota:\n"                        // 26
    "      cuda: 0\n"                     // 27
    "    cohort: research\n";             // 28

TEST(PrincipalSetTest, TeamsGiveQuotasPerDeviceKindAndACap) {
  auto set = Parse(ExampleFile() + kTeams);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->teams().size(), 2u);
  const TeamQuota& vision = set->teams().at("vision");
  EXPECT_EQ(vision.nominal, (std::map<std::string, int64_t>{{"cpu", 4}, {"cuda", 16}}));
  EXPECT_EQ(vision.max_running_jobs, 3);
  EXPECT_EQ(vision.line, 22);
  const TeamQuota& nlp = set->teams().at("nlp");
  EXPECT_EQ(nlp.nominal, (std::map<std::string, int64_t>{{"cuda", 0}}));
  EXPECT_EQ(nlp.max_running_jobs, 0);
  EXPECT_EQ(nlp.cohort, "research");
  EXPECT_EQ(vision.cohort, "") << "no cohort: it neither borrows nor lends";
  // No teams: section: no quotas, and the identities are the same.
  auto plain = Parse(ExampleFile());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(plain->teams().empty());
  EXPECT_EQ(plain->size(), set->size());
}

TEST(PrincipalSetTest, BadTeamsAreRefusedWithLineAndField) {
  const std::string base = ExampleFile();
  const struct {
    std::string from, to, error;
  } cases[] = {
      {"cuda: 16", "gpu: 16", "p.yaml:23: teams[0].quota.gpu: unknown device kind (cpu, cuda, cuda-emulated)"},
      {"cuda: 16", "cuda: -1", "p.yaml:23: teams[0].quota.cuda: '-1' is not a whole number of 0 or more"},
      {"cuda: 16", "cuda: 1.5", "p.yaml:23: teams[0].quota.cuda: '1.5' is not a whole number of 0 or more"},
      {"cuda: 16", "cuda: lots", "p.yaml:23: teams[0].quota.cuda: 'lots' is not a whole number of 0 or more"},
      {"cpu: 4", "cuda: 4", "p.yaml:23: teams[0].quota.cuda: appears twice"},
      {"max_running_jobs: 3", "max_running_jobs: 0",
       "p.yaml:24: teams[0].max_running_jobs: '0' is not a whole number of 1 or more"},
      {"max_running_jobs: 3", "max_jobs: 3",
       "p.yaml:24: teams[0].max_jobs: unknown field (known: name, quota, max_running_jobs, cohort, borrowing_limit, "
       "lending_limit)"},
      {"cohort: research", "cohort: re/search",
       "p.yaml:28: teams[1].cohort: 're/search' is not a cohort name (1 to 128 letters, digits, '.', '_', '@', '-')"},
      {"cohort: research", "cohort: [a, b]", "p.yaml:28: teams[1].cohort: must be a single value, not a sequence"},
      {"quota: {cuda: 16, cpu: 4}", "quota: 16",
       "p.yaml:23: teams[0].quota: must be a mapping of device kind to slots ({cuda: 16, cpu: 4}), not '16'"},
      {"  - name: nlp", "  - name: vision", "p.yaml:25: teams[1].name: team 'vision' is already named at line 22"},
      {"  - name: nlp", "  - name: n/l/p",
       "p.yaml:25: teams[1].name: 'n/l/p' is not a team name (1 to 128 letters, digits, '.', '_', '@', '-')"},
      {"  - name: nlp\n    quota:\n      cuda: 0\n    cohort: research\n", "  - name: nlp\n",
       "p.yaml:25: teams[1]: team nlp names neither quota nor max_running_jobs"},
      {"  - name: vision\n    quota: {cuda: 16, cpu: 4}\n    max_running_jobs: 3\n", "  - vision\n",
       "p.yaml:22: teams[0]: must be a mapping (name, quota, max_running_jobs, cohort, borrowing_limit, lending_limit), "
       "not 'vision'"},
  };
  for (const auto& c : cases) {
    const std::string teams = absl::StrReplaceAll(kTeams, {{c.from, c.to}});
    ASSERT_NE(teams, kTeams) << c.from;
    EXPECT_EQ(Refusal(base + teams), c.error) << c.from << " -> " << c.to;
  }
  EXPECT_EQ(Refusal(base + "teams: vision\n"), "p.yaml:21: teams: must be a list of teams, not 'vision'");
  EXPECT_EQ(Refusal(base + "teams:\n  - quota: {cpu: 1}\n"), "p.yaml:22: teams[0].name: is required");
  // Teams alone name no identity.
  EXPECT_EQ(Refusal(kTeams), "p.yaml:1: (top level): the file names no identity (users, services)");
}

// Per-cohort limits (Kueue's borrowingLimit and lendingLimit): per kind of the team's quota, in
// a cohort, a lending limit no more than the quota; each bad one refused with its line and field.
constexpr char kLimits[] =
    "teams:\n"                              // 21
    "  - name: vision\n"                    // 22
    "    quota: {cuda: 16, cpu: 4}\n"       // 23
    "    cohort: research\n"                // 24
    "    borrowing_limit: {cuda: 4}\n"      // 25
    "    lending_limit: {cuda: 8, cpu: 4}\n"  // 26
    "  - name: nlp\n"                       // 27
    "    quota: {cuda: 8}\n"                // 28
    "    cohort: research\n";               // 29

TEST(PrincipalSetTest, TeamsMayLimitWhatTheyBorrowAndLend) {
  auto set = Parse(ExampleFile() + kLimits);
  ASSERT_TRUE(set.ok()) << set.status();
  const TeamQuota& vision = set->teams().at("vision");
  EXPECT_EQ(vision.borrowing_limit, (std::map<std::string, int64_t>{{"cuda", 4}}));
  EXPECT_EQ(vision.lending_limit, (std::map<std::string, int64_t>{{"cpu", 4}, {"cuda", 8}}));
  EXPECT_TRUE(set->teams().at("nlp").borrowing_limit.empty()) << "none: it borrows what the cohort leaves";
  EXPECT_TRUE(set->teams().at("nlp").lending_limit.empty()) << "none: it lends all its idle quota";
  const std::string base = ExampleFile();
  const struct {
    std::string from, to, error;
  } cases[] = {
      {"lending_limit: {cuda: 8", "lending_limit: {cuda: 20",
       "p.yaml:26: teams[0].lending_limit.cuda: 20 is more than team vision's quota of 16 (a team lends only of "
       "its own quota)"},
      {"borrowing_limit: {cuda: 4}", "borrowing_limit: {cuda-emulated: 4}",
       "p.yaml:25: teams[0].borrowing_limit.cuda-emulated: team vision's quota does not name cuda-emulated (a kind "
       "without a quota is not limited, and neither borrows nor lends)"},
      {"    cohort: research\n    borrowing_limit", "    borrowing_limit",
       "p.yaml:24: teams[0].borrowing_limit: team vision has no cohort to borrow from (set cohort, or remove "
       "borrowing_limit)"},
      {"    cohort: research\n    borrowing_limit: {cuda: 4}\n", "",
       "p.yaml:24: teams[0].lending_limit: team vision has no cohort to lend to (set cohort, or remove "
       "lending_limit)"},
      {"borrowing_limit: {cuda: 4}", "borrowing_limit: {cuda: -1}",
       "p.yaml:25: teams[0].borrowing_limit.cuda: '-1' is not a whole number of 0 or more"},
      {"borrowing_limit: {cuda: 4}", "borrowing_limit: 4",
       "p.yaml:25: teams[0].borrowing_limit: must be a mapping of device kind to slots ({cuda: 16, cpu: 4}), not "
       "'4'"},
      {"lending_limit: {cuda: 8, cpu: 4}", "lending_limit: {cuda: 8, cuda: 4}",
       "p.yaml:26: teams[0].lending_limit.cuda: appears twice"},
  };
  for (const auto& c : cases) {
    const std::string teams = absl::StrReplaceAll(kLimits, {{c.from, c.to}});
    ASSERT_NE(teams, kLimits) << c.from;
    EXPECT_EQ(Refusal(base + teams), c.error) << c.from << " -> " << c.to;
  }
}

TEST(PrincipalSetTest, AFileThatNamesNobodyIsRefused) {
  EXPECT_EQ(Refusal(""), "p.yaml:1: (top level): the file names no identity (users, services)");
  EXPECT_EQ(Refusal("# nobody yet\n"), "p.yaml:1: (top level): the file names no identity (users, services)");
  EXPECT_EQ(Refusal("users: []\nservices:\n"), "p.yaml:1: (top level): the file names no identity (users, services)");
}

TEST(PrincipalSetTest, ADuplicateTokenIsRefusedAndNotShown) {
  const std::string hash = Sha256Hex(kAliceToken);
  const std::string text = absl::StrReplaceAll(ExampleFile(), {{Sha256Hex(kPoolToken), hash}});
  const std::string msg = Refusal(text);
  EXPECT_EQ(msg, "p.yaml:15: token_sha256: gpu-pool-a has the same token as alice, line 2: each identity needs its own token");
  EXPECT_EQ(msg.find(hash), std::string::npos);
}

TEST(PrincipalSetTest, ADuplicateNameOrCertificateIsRefused) {
  EXPECT_EQ(Refusal(absl::StrReplaceAll(ExampleFile(), {{"name: shard-1", "name: alice"}})),
            "p.yaml:18: name: 'alice' is already the name of the identity at line 2");
  EXPECT_EQ(Refusal(absl::StrReplaceAll(ExampleFile(), {{"certificate: gantry client", "certificate: bob.ops.example.org"}})),
            "p.yaml:10: certificate: carol has the certificate name of bob, line 6: each identity needs its own");
}

TEST(PrincipalSetTest, AMalformedHashIsRefusedWithoutShowingIt) {
  // The commonest mistake: the token itself where its hash goes. It must not reach a log.
  const std::string text = absl::StrReplaceAll(ExampleFile(), {{Sha256Hex(kBobToken), kBobToken}});
  const std::string msg = Refusal(text);
  EXPECT_EQ(msg.rfind("p.yaml:8: users[1].token_sha256: must be the token's SHA-256 as 64 hex digits", 0), 0u) << msg;
  EXPECT_EQ(msg.find(kBobToken), std::string::npos) << msg;
  const std::string short_hash = absl::StrReplaceAll(ExampleFile(), {{Sha256Hex(kBobToken), Sha256Hex(kBobToken).substr(1)}});
  EXPECT_NE(Refusal(short_hash).find("users[1].token_sha256"), std::string::npos);
  const std::string not_hex = absl::StrReplaceAll(ExampleFile(), {{Sha256Hex(kBobToken), std::string(64, 'g')}});
  EXPECT_NE(Refusal(not_hex).find("users[1].token_sha256"), std::string::npos);
}

TEST(PrincipalSetTest, NoValueThatMightBeATokenIsShown) {
  // A missing colon folds the token into the line above ("name: bob token_sha256 TOKEN"); a
  // token pasted as a role, or as a key. Errors name the line and field, not the value.
  std::string folded =  // indented deeper than the keys: a continuation of bob's name
      absl::StrReplaceAll(ExampleFile(), {{"    token_sha256: " + Sha256Hex(kBobToken) + "\n", ""},
                                          {"  - name: bob\n", absl::StrCat("  - name: bob\n      token_sha256 ", kBobToken, "\n")}});
  std::string msg = Refusal(folded);
  EXPECT_EQ(msg, "p.yaml:6: users[1].name: a value of 37 characters (not shown) is not a name (1 to 128 letters, digits, "
                 "'.', '_', '@', '-')");
  folded = absl::StrReplaceAll(folded, {{"      token_sha256 ", "    token_sha256 "}});  // not YAML then
  msg = Refusal(folded);
  EXPECT_NE(msg.find("not valid YAML"), std::string::npos) << msg;
  EXPECT_EQ(msg.find(kBobToken), std::string::npos) << msg;
  const std::string long_token = "0f3c9a7e21b84d56a1c0e9f27b3d5a48";
  msg = Refusal(absl::StrReplaceAll(ExampleFile(), {{"role: admin", "role: " + long_token}}));
  EXPECT_EQ(msg, "p.yaml:7: users[1].role: unknown role a value of 32 characters (not shown) (admin, user, viewer)");
  msg = Refusal(absl::StrReplaceAll(ExampleFile(), {{"    role: admin\n", "    role: admin\n    " + long_token + ": 1\n"}}));
  EXPECT_EQ(msg, "p.yaml:8: users[1].(a field name of 32 characters, not shown): unknown field (known: name, team, role, "
                 "token_sha256, certificate)");
}

// Keeps what is logged while it lives, every severity.
class LogCapture : public google::LogSink {
 public:
  LogCapture() { google::AddLogSink(this); }
  ~LogCapture() override { google::RemoveLogSink(this); }
  void send(google::LogSeverity severity, const char*, const char*, int, const struct ::tm*, const char* message,
            size_t length) override {
    std::lock_guard<std::mutex> l(mu_);
    lines_.push_back(absl::StrCat(google::GetLogSeverityName(severity), ": ", std::string(message, length)));
  }
  std::string text() {
    std::lock_guard<std::mutex> l(mu_);
    std::string all;
    for (const auto& line : lines_) absl::StrAppend(&all, line, "\n");
    return all;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

class PrincipalsFileTest : public ::testing::Test {
 protected:
  void Write(const std::string& text) { ASSERT_TRUE(WriteFileAtomic(path_, text).ok()); }
  testing::TempDir dir_;
  const std::string path_ = dir_.File("principals.yaml");
};

TEST_F(PrincipalsFileTest, AMissingOrBadFileIsRefusedAtLoad) {
  auto missing = PrincipalsFile::Load(path_);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("principals file " + path_), std::string::npos) << missing.status();
  Write(absl::StrReplaceAll(ExampleFile(), {{"role: viewer", "role: reader"}}));
  auto bad = PrincipalsFile::Load(path_);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), path_ + ":12: users[2].role: unknown role 'reader' (admin, user, viewer)");
}

TEST_F(PrincipalsFileTest, AFailedReloadKeepsThePreviousFileAndIsLogged) {
  Write(ExampleFile());
  auto file = PrincipalsFile::Load(path_);
  ASSERT_TRUE(file.ok()) << file.status();
  LogCapture log;
  for (const std::string& bad :
       {absl::StrReplaceAll(ExampleFile(), {{"role: viewer", "role: reader"}}),                    // unknown role
        absl::StrReplaceAll(ExampleFile(), {{Sha256Hex(kPoolToken), Sha256Hex(kAliceToken)}}),   // duplicate token
        std::string("users:\n  - name: alice\n    role: [admin\n"),                              // malformed
        absl::StrReplaceAll(ExampleFile(), {{Sha256Hex(kBobToken), kBobToken}})}) {              // a token, not a hash
    Write(bad);
    const absl::Status s = (*file)->Reload();
    EXPECT_FALSE(s.ok()) << bad;
    const auto set = (*file)->current();
    ASSERT_NE(set->FindByToken(kAliceToken), nullptr) << "the previous file is still in force after: " << s;
    ASSERT_NE(set->FindByToken(kBobToken), nullptr);
    EXPECT_NE(log.text().find(std::string(s.message())), std::string::npos) << "the error is logged:\n" << log.text();
  }
  EXPECT_NE(log.text().find("ERROR: principals: the reload failed, the previous file stays in force: " + path_ + ":12: "),
            std::string::npos)
      << log.text();
  for (const char* token : {kAliceToken, kBobToken, kPoolToken, kShardToken}) {
    EXPECT_EQ(log.text().find(token), std::string::npos) << "a token was logged:\n" << log.text();
  }
}

TEST_F(PrincipalsFileTest, ATokenRevokedByAReloadIsRefusedFromThenOn) {
  Write(ExampleFile());
  auto file = PrincipalsFile::Load(path_);
  ASSERT_TRUE(file.ok()) << file.status();
  const auto before = (*file)->current();
  ASSERT_NE(before->FindByToken(kAliceToken), nullptr);

  // alice removed; bob's token rotated; a new user dave.
  std::string next = ExampleFile();
  next.erase(next.find("  - name: alice"), next.find("  - name: bob") - next.find("  - name: alice"));
  next = absl::StrReplaceAll(next, {{Sha256Hex(kBobToken), Sha256Hex("bob-rotated")}});
  next = absl::StrReplaceAll(next, {{"services:\n", absl::StrCat("  - name: dave\n    team: nlp\n    role: user\n"
                                                               "    token_sha256: ", Sha256Hex("dave-t"), "\nservices:\n")}});
  Write(next);
  LogCapture log;
  ASSERT_TRUE((*file)->Reload().ok());
  EXPECT_NE(log.text().find("INFO: principals: reloaded " + path_ + ": 5 identities"), std::string::npos) << log.text();
  const auto after = (*file)->current();
  EXPECT_EQ(after->FindByToken(kAliceToken), nullptr) << "revoked";
  EXPECT_EQ(after->FindByToken(kBobToken), nullptr) << "rotated away";
  ASSERT_NE(after->FindByToken("bob-rotated"), nullptr);
  ASSERT_NE(after->FindByToken("dave-t"), nullptr);
  EXPECT_EQ(after->FindByToken("dave-t")->team, "nlp");
  ASSERT_NE(after->FindByToken(kPoolToken), nullptr) << "the others unchanged";
  // A call that began before the reload keeps the set it started with.
  EXPECT_NE(before->FindByToken(kAliceToken), nullptr);
}

}  // namespace
TEST_F(PrincipalsFileTest, QuotasChangeOnReloadAndABadTeamKeepsThePrevious) {
  Write(ExampleFile() + kTeams);
  auto file = PrincipalsFile::Load(path_);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->current()->teams().at("vision").nominal.at("cuda"), 16);
  Write(absl::StrReplaceAll(ExampleFile() + kTeams, {{"cuda: 16", "cuda: 24"}}));
  ASSERT_TRUE((*file)->Reload().ok());
  EXPECT_EQ((*file)->current()->teams().at("vision").nominal.at("cuda"), 24);
  Write(absl::StrReplaceAll(ExampleFile() + kTeams, {{"cuda: 16", "cuda: many"}}));
  EXPECT_FALSE((*file)->Reload().ok());
  EXPECT_EQ((*file)->current()->teams().at("vision").nominal.at("cuda"), 24) << "the previous quotas stay";
  Write(ExampleFile());  // the section removed: no quotas from then on
  ASSERT_TRUE((*file)->Reload().ok());
  EXPECT_TRUE((*file)->current()->teams().empty());
}

}  // namespace gantry
