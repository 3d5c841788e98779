#include "comm/gloo/failure_report.h"

#include <gloo/rendezvous/store.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gantry::comm {

std::string ReportFailureAndFindMissing(gloo::rendezvous::Store& store, int rank, int size, uint64_t seq,
                                        std::chrono::milliseconds grace, const std::atomic<bool>* stop) {
  const auto key = [](int r) { return absl::StrCat("gantry/failed/", r); };
  const std::string mine = std::to_string(seq);
  try {
    store.set(key(rank), std::vector<char>(mine.begin(), mine.end()));
  } catch (const std::exception& e) {
    return absl::StrCat("the store is unreachable too (", e.what(), "), so the missing ranks are unknown");
  }
  std::vector<int> missing;
  const auto deadline = std::chrono::steady_clock::now() + grace;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    // In slices, so that an abort is noticed within one.
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (stop != nullptr && stop->load()) return "the job's placement was aborted while waiting for the other ranks' reports";
      try {
        store.wait({key(r)}, std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(200)));
        break;
      } catch (const std::exception&) {
        if (left <= std::chrono::milliseconds(200)) {
          missing.push_back(r);
          break;
        }
      }
    }
  }
  if (missing.empty()) return "every rank reported the failure (a network fault, or a peer's own error)";
  std::string names;
  for (int r : missing) absl::StrAppend(&names, names.empty() ? "" : ", ", r);
  return absl::StrCat(missing.size() == 1 ? "rank " : "ranks ", names, " did not arrive (no failure report within ",
                      grace.count(), " ms)");
}

std::chrono::milliseconds DefaultFailureGrace(std::chrono::milliseconds timeout) {
  return timeout + std::min(timeout / 2, std::chrono::milliseconds(10000));
}

}  // namespace gantry::comm
