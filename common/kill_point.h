// Named kill points for crash tests (the pattern of RocksDB's TEST_KILL_RANDOM): a process
// armed for a kill point dies by SIGKILL when it reaches it, so that a test can stop a
// daemon between any two durable writes of a commit, exactly as a crash would, and check
// what a restart finds.
//
//   // at namespace scope: defines and registers the point
//   const KillPoint kAfterRecord("shard.commit.after_record", KillPoint::kAfterCommit,
//                                "the commit record is durable, the reply not sent");
//   ...
//   RETURN_IF_ERROR(db.Write(batch));
//   kAfterRecord.Reach();
//
// Nothing is armed unless a daemon calls ArmKillPointsFromEnv() (GANTRY_KILL_AT=NAME, or
// NAME@N to die the N-th time the point is reached). An unarmed Reach() is one atomic load.
// KillPoints() lists every point linked into the binary (`--list_kill_points` on the
// daemons), so that a crash test iterates over all of them and cannot miss a new one.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gantry {

class KillPoint {
 public:
  // Where the point sits relative to the commit point of the operation it interrupts: the
  // operation is durable (visible after a restart) only from kAfterCommit points on. The
  // crash test checks exactly that.
  enum Phase { kBeforeCommit, kAfterCommit };

  // For objects of static storage duration only (namespace scope): registers the point.
  // Two points of one name in one binary abort at start.
  KillPoint(const char* name, Phase phase, const char* description);
  KillPoint(const KillPoint&) = delete;
  KillPoint& operator=(const KillPoint&) = delete;

  // Dies here (a line on stderr, then SIGKILL) when the process is armed for this point and
  // this is the armed hit; otherwise returns at once.
  void Reach() const;

  const char* name() const { return name_; }
  Phase phase() const { return phase_; }
  const char* description() const { return description_; }

 private:
  friend absl::Status ArmKillPoints(absl::string_view spec);
  const char* name_;
  Phase phase_;
  const char* description_;
  mutable std::atomic<int64_t> hits_{0};  // counted only while armed for this point
};

// Every kill point of this binary, by name.
std::vector<const KillPoint*> KillPoints();

// Arms the process: "NAME" dies the first time NAME is reached, "NAME@N" the N-th time; ""
// disarms. An unknown name or a bad count is INVALID_ARGUMENT naming the known points.
absl::Status ArmKillPoints(absl::string_view spec);
// ArmKillPoints($GANTRY_KILL_AT), an unset variable arming nothing.
absl::Status ArmKillPointsFromEnv();
constexpr char kKillPointEnv[] = "GANTRY_KILL_AT";

// One line per point: "NAME<TAB>before-commit|after-commit<TAB>DESCRIPTION".
std::string KillPointTable();

}  // namespace gantry
