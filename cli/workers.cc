// workers: the cluster's workers and their GPUs.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/commands.h"
#include "common/paging.h"

namespace gantry::cli {

// workers
int WorkersCommand(const Options& o) {
  CommandFlags f = CommandFlagsFor(o);
  if (int rc = ParseCommand(f, o); rc >= 0) return rc;
  auto stub = Connect(o);
  // Every worker, page by page (a page holds at most 1000).
  v1::ListWorkersResponse resp;
  const grpc::Status s = ReadEveryPage<v1::ListWorkersResponse>(
      v1::ListWorkersRequest(),
      [&](const v1::ListWorkersRequest& req, v1::ListWorkersResponse* page) {
        return stub->ListWorkers(Ctx(o).get(), req, page);
      },
      [&](v1::ListWorkersResponse& page) {
        for (auto& w : *page.mutable_workers()) *resp.add_workers() = std::move(w);
      });
  if (!s.ok()) return Fail(s);
  if (o.output == "json") {
    std::printf("%s\n", Json(resp).c_str());
    return 0;
  }
  // RANKS: the job's ranks the worker runs, on its GPUs 0, 1, ... in that order. Below a worker
  // whose heartbeats carry GPU metrics, a line per GPU: its utilisation over the last sample
  // period and its memory in use (worker/gpu_metrics).
  std::printf("%-10s %-20s %-8s %-6s %-10s %-8s %-16s %s\n", "WORKER", "HOST", "DEVICE", "STATE", "JOB", "RANKS",
              "LAST HEARTBEAT", "GPU");
  for (const auto& w : resp.workers()) {
    const auto& r = w.resources();
    const std::string gpu = r.device_name().empty()
                                ? "-"
                                : absl::StrFormat("%s, %.1f GB", r.device_name(), r.device_memory_bytes() / 1e9);
    const std::string ranks = w.ranks().empty() ? "-" : absl::StrJoin(w.ranks(), ",");
    std::printf("%-10s %-20s %-8s %-6s %-10s %-8s %-16s %s\n", w.id().c_str(), r.host().c_str(),
                absl::StrCat(r.device_kind(), "x", r.device_count()).c_str(), w.state().c_str(),
                w.job_id().empty() ? "-" : w.job_id().c_str(), ranks.c_str(), When(w.last_heartbeat_unix_ms()).c_str(),
                gpu.c_str());
    for (const auto& g : w.gpus()) {
      const std::string util = g.has_utilization() ? absl::StrFormat("%3.0f%%", 100 * g.utilization()) : "   -";
      const std::string mem = g.has_memory_used_bytes() && g.has_memory_total_bytes()
                                  ? absl::StrFormat("%.1f / %.1f GB", g.memory_used_bytes() / 1e9,
                                                    g.memory_total_bytes() / 1e9)
                                  : "-";
      std::printf("  gpu %-3d  util %s  memory %s\n", g.index(), util.c_str(), mem.c_str());
    }
  }
  return 0;
}

}  // namespace gantry::cli
