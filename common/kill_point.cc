#include "common/kill_point.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gantry {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<const KillPoint*> points;
};
Registry& Points() {
  static Registry* r = new Registry;  // never destroyed: points outlive static destruction order
  return *r;
}

std::atomic<const KillPoint*> g_armed{nullptr};
std::atomic<int64_t> g_armed_hit{0};

}  // namespace

KillPoint::KillPoint(const char* name, Phase phase, const char* description)
    : name_(name), phase_(phase), description_(description) {
  Registry& r = Points();
  std::lock_guard<std::mutex> l(r.mu);
  for (const KillPoint* p : r.points) {
    if (std::strcmp(p->name(), name) == 0) {  // a programming error, found at static init
      std::fprintf(stderr, "kill point '%s' is defined twice\n", name);
      std::abort();
    }
  }
  r.points.push_back(this);
}

void KillPoint::Reach() const {
  if (g_armed.load(std::memory_order_acquire) != this) return;
  const int64_t hit = hits_.fetch_add(1) + 1;
  if (hit != g_armed_hit.load()) return;
  // No logging library here: its buffers may hold locks or be mid-flush on another thread.
  const std::string line = absl::StrCat("kill point ", name_, " reached (hit ", hit, "): SIGKILL\n");
  (void)!::write(STDERR_FILENO, line.data(), line.size());
  ::kill(::getpid(), SIGKILL);
  ::_exit(137);  // not reached: SIGKILL cannot be caught
}

std::vector<const KillPoint*> KillPoints() {
  Registry& r = Points();
  std::lock_guard<std::mutex> l(r.mu);
  std::vector<const KillPoint*> out = r.points;
  std::sort(out.begin(), out.end(), [](const KillPoint* a, const KillPoint* b) { return std::strcmp(a->name(), b->name()) < 0; });
  return out;
}

absl::Status ArmKillPoints(absl::string_view spec) {
  if (spec.empty()) {
    g_armed.store(nullptr, std::memory_order_release);
    return absl::OkStatus();
  }
  absl::string_view name = spec;
  int64_t hit = 1;
  if (const size_t at = spec.rfind('@'); at != absl::string_view::npos) {
    name = spec.substr(0, at);
    if (!absl::SimpleAtoi(spec.substr(at + 1), &hit) || hit < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(kKillPointEnv, "='", spec, "': the count after '@' must be a whole number >= 1"));
    }
  }
  std::vector<std::string> names;
  for (const KillPoint* p : KillPoints()) {
    if (name == p->name()) {
      p->hits_.store(0);
      g_armed_hit.store(hit);
      g_armed.store(p, std::memory_order_release);
      return absl::OkStatus();
    }
    names.emplace_back(p->name());
  }
  return absl::InvalidArgumentError(absl::StrCat(kKillPointEnv, "='", spec, "' names no kill point of this program (it has: ",
                                                 names.empty() ? "none" : absl::StrJoin(names, ", "), ")"));
}

absl::Status ArmKillPointsFromEnv() {
  const char* spec = std::getenv(kKillPointEnv);
  return ArmKillPoints(spec == nullptr ? "" : spec);
}

std::string KillPointTable() {
  std::string out;
  for (const KillPoint* p : KillPoints()) {
    absl::StrAppend(&out, p->name(), "\t", p->phase() == KillPoint::kBeforeCommit ? "before-commit" : "after-commit", "\t",
                    p->description(), "\n");
  }
  return out;
}

}  // namespace gantry
