#include "worker/parallel/failure_report.h"

#include <gloo/rendezvous/store.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gantry::parallel {

std::string ReportFailureAndFindMissing(gloo::rendezvous::Store& store, int rank, int size, uint64_t seq,
                                        std::chrono::milliseconds grace) {
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
    const auto left = std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                 deadline - std::chrono::steady_clock::now()));
    try {
      store.wait({key(r)}, left);
    } catch (const std::exception&) {
      missing.push_back(r);
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

}  // namespace gantry::parallel
