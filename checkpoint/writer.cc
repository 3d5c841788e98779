#include "checkpoint/writer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace gantry::checkpoint {

CheckpointWriter::~CheckpointWriter() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;  // the loop finishes what is queued first
  }
  cv_.notify_all();
  thread_.join();
}

absl::Status CheckpointWriter::Snapshot(int64_t step, const std::vector<CheckpointPiece>& live) {
  size_t n = 0;
  for (const auto& p : live) n += p.flat_end - p.flat_begin;
  const size_t bytes = 3 * n * sizeof(float);
  if (static_cast<double>(bytes) > budget_) {  // no room for a copy: write from the live buffers, now
    RETURN_IF_ERROR(Flush());
    return write_(step, live);
  }
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return static_cast<double>(queued_bytes_ + bytes) <= budget_ || !status_.ok(); });
    RETURN_IF_ERROR(status_);  // an earlier write failed: say so now
  }
  Copy copy;
  copy.step = step;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (spare_.size() == 3 * n) copy.data = std::move(spare_);  // its pages are already mapped
  }
  if (copy.data.size() != 3 * n) copy.data.Assign(3 * n);
  float* at = copy.data.data();
  for (const auto& p : live) {
    const size_t len = p.flat_end - p.flat_begin;
    std::copy(p.params, p.params + len, at);
    std::copy(p.m, p.m + len, at + len);
    std::copy(p.v, p.v + len, at + 2 * len);
    copy.pieces.push_back({p.flat_begin, p.flat_end, at, at + len, at + 2 * len});
    at += 3 * len;
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  {
    std::lock_guard<std::mutex> l(mu_);
    queued_bytes_ += bytes;
    queue_.push_back(std::move(copy));
  }
  cv_.notify_all();
  return absl::OkStatus();
}

void CheckpointWriter::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;
    Copy copy = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    const bool failed = !status_.ok();
    l.unlock();
    absl::Status s = failed ? absl::OkStatus() : write_(copy.step, copy.pieces);
    const size_t bytes = copy.data.size() * sizeof(float);
    l.lock();
    spare_ = std::move(copy.data);  // kept for the next copy (one, outside the budget)
    queued_bytes_ -= bytes;
    busy_ = false;
    if (!s.ok() && status_.ok()) status_ = Annotate(s, absl::StrCat("writing the checkpoint of step ", copy.step));
    cv_.notify_all();
  }
}

absl::Status CheckpointWriter::Flush() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return queue_.empty() && !busy_; });
  return status_;
}

}  // namespace gantry::checkpoint
