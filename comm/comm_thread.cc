#include "comm/comm_thread.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"

namespace gantry::comm {

CommThread::CommThread(Communicator* comm) : comm_(comm), thread_([this] { Loop(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

uint64_t CommThread::Submit(Op op) {
  std::lock_guard<std::mutex> l(mu_);
  queue_.emplace_back(++submitted_, std::move(op));
  cv_.notify_all();
  return submitted_;
}

void CommThread::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    auto [ticket, op] = std::move(queue_.front());
    queue_.pop_front();
    const bool failed = !error_.ok();
    l.unlock();
    absl::Status s;
    double secs = 0;
    if (!failed) {
      const auto t0 = std::chrono::steady_clock::now();
      s = op(*comm_);
      secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    l.lock();
    busy_ += secs;
    if (!s.ok() && error_.ok()) error_ = s;
    done_ = ticket;
    cv_.notify_all();
  }
}

absl::Status CommThread::Wait(uint64_t ticket) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return done_ >= ticket; });
  return error_;
}

absl::Status CommThread::WaitAll() {
  uint64_t last;
  {
    std::lock_guard<std::mutex> l(mu_);
    last = submitted_;
  }
  return Wait(last);
}

double CommThread::TakeBusySeconds() {
  std::lock_guard<std::mutex> l(mu_);
  const double b = busy_;
  busy_ = 0;
  return b;
}

absl::Status SoloCommunicator::AllToAllV(const float* in, const std::vector<size_t>& send_counts, float* out,
                                         const std::vector<size_t>& recv_counts) {
  if (absl::Status s = CheckAllToAllCounts(0, 1, send_counts, recv_counts); !s.ok()) return s;
  return Copy(in, out, send_counts[0]);
}

absl::Status SoloCommunicator::Broadcast(float*, size_t, int root) {
  if (root != 0) return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " in a group of 1"));
  return Next();
}

absl::Status SoloCommunicator::Send(const float*, size_t, int peer) {
  return absl::InvalidArgumentError(absl::StrCat("send to rank ", peer, " in a group of 1"));
}

absl::Status SoloCommunicator::Recv(float*, size_t, int peer) {
  return absl::InvalidArgumentError(absl::StrCat("recv from rank ", peer, " in a group of 1"));
}

}  // namespace gantry::comm
