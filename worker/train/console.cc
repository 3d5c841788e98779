#include "worker/train/console.h"

#include "common/console.h"

namespace gantry::train {

void Console::Print(const std::string& line) {
  if (!speaker_) return;
  std::lock_guard<std::mutex> l(mu_);
  if (bar_shown_) {
    std::fputs("\r\033[K", stderr);
    bar_shown_ = false;
  }
  std::fputs(line.c_str(), out_);
  std::fputc('\n', out_);
  std::fflush(out_);
}

void Console::Progress(int64_t done, int64_t total, int64_t did, double elapsed) {
  if (!progress_ || !speaker_) return;
  std::lock_guard<std::mutex> l(mu_);
  const double eta = did > 0 ? elapsed / static_cast<double>(did) * static_cast<double>(total - done) : 0.0;
  std::fprintf(stderr, "\r\033[K%s", FormatProgressBar(done, total, eta).c_str());
  std::fflush(stderr);
  bar_shown_ = true;
}

void Console::ClearProgress() {
  std::lock_guard<std::mutex> l(mu_);
  if (!bar_shown_) return;
  std::fputs("\r\033[K", stderr);
  bar_shown_ = false;
}

}  // namespace gantry::train
