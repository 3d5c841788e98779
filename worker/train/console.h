// The trainer's terminal: lines on its output (the step line: common/console.h) and a
// progress bar redrawn on stderr under them. Thread-safe: the checkpoint writer prints too.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace gantry::train {

class Console {
 public:
  // speaker: this rank prints (rank 0 speaks for the job); progress: draw the bar.
  Console(FILE* out, bool speaker, bool progress) : out_(out), speaker_(speaker), progress_(progress) {}
  void Print(const std::string& line);
  // done of total steps, `did` of them in this run taking `elapsed` seconds (for the ETA).
  void Progress(int64_t done, int64_t total, int64_t did, double elapsed);
  void ClearProgress();

 private:
  FILE* const out_;
  const bool speaker_, progress_;
  std::mutex mu_;
  bool bar_shown_ = false;
};

}  // namespace gantry::train
