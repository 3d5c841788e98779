#include "common/console.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace gantry {

void StepLine::SetMoe(double aux, double z, int64_t dropped, int64_t assignments,
                      const std::vector<int64_t>& tokens_per_expert) {
  moe = true;
  moe_aux = aux;
  moe_z = z;
  moe_dropped_fraction = assignments > 0 ? static_cast<double>(dropped) / static_cast<double>(assignments) : 0;
  int64_t most = 0, all = 0;
  for (int64_t t : tokens_per_expert) {
    most = std::max(most, t);
    all += t;
  }
  moe_load = all > 0 ? static_cast<double>(most) * static_cast<double>(tokens_per_expert.size()) / static_cast<double>(all) : 0;
}

std::string FormatStepLine(const StepLine& s) {
  std::string line = absl::StrFormat(
      "step %5d/%d | loss %.6f | lr %.2e | norm %.4f | %7.1f ms | %.0f tok/s | compute %.1f comm %.1f opt %.1f ms",
      s.step, s.steps, s.loss, s.lr, s.grad_norm, s.seconds * 1e3, s.tokens_per_second, s.compute_seconds * 1e3,
      s.comm_seconds * 1e3, s.optimizer_seconds * 1e3);
  if (s.loss_scale > 0) {
    line += absl::StrFormat(" | scale %g skipped %d%s", s.loss_scale, s.skipped_steps,
                            s.skipped ? " (overflow: step skipped)" : "");
  }
  if (s.offload_bytes > 0) line += absl::StrFormat(" | offload %.1f MB", s.offload_bytes / 1e6);
  if (s.moe) {
    line += absl::StrFormat(" | moe aux %.4g z %.4g dropped %.1f%% load %.2f", s.moe_aux, s.moe_z,
                            100 * s.moe_dropped_fraction, s.moe_load);
  }
  if (!std::isnan(s.val_loss)) line += absl::StrFormat(" | val loss %.4f", s.val_loss);
  for (const std::string& n : s.notes) line += "\n  note: " + n;
  return line;
}

std::string FormatProgressBar(int64_t done, int64_t total, double eta_seconds) {
  const double frac = total > 0 ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total)) : 1.0;
  constexpr int kWidth = 30;
  const int fill = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<size_t>(fill), '=');
  if (fill < kWidth) bar += '>';
  bar.resize(kWidth, ' ');
  const int eta = std::max(0, static_cast<int>(eta_seconds));
  return absl::StrFormat("[%s] %d/%d %3.0f%% ETA %dm%02ds", bar, done, total, frac * 100, eta / 60, eta % 60);
}

}  // namespace gantry
