// The checkpoint writer (checkpoint/writer.h): copies taken at Snapshot, written in step order
// on its thread, within a byte budget; a failure reported at the next checkpoint; nothing
// queued lost at destruction. Waits are on latches the test releases, never on time.
#include "checkpoint/writer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace gantry::checkpoint {
namespace {

// One rank's live state: two pieces of a flat buffer (params, m, v each).
struct Live {
  std::vector<float> params, m, v;
  explicit Live(size_t n) : params(n), m(n), v(n) { Fill(0); }
  void Fill(float base) {
    for (size_t i = 0; i < params.size(); ++i) {
      params[i] = base + static_cast<float>(i);
      m[i] = base + 1000.0f + static_cast<float>(i);
      v[i] = base + 2000.0f + static_cast<float>(i);
    }
  }
  // [0, cut) and [cut, n) as two pieces.
  std::vector<CheckpointPiece> Pieces(size_t cut) const {
    const size_t n = params.size();
    return {{0, cut, params.data(), m.data(), v.data()},
            {cut, n, params.data() + cut, m.data() + cut, v.data() + cut}};
  }
  size_t Bytes() const { return 3 * params.size() * sizeof(float); }
};

// What a write saw: its step and the values of every piece, in order.
struct Written {
  int64_t step;
  std::vector<float> values;  // params, m, v of each piece, piece after piece
  std::thread::id thread;
};

std::vector<float> Flatten(const std::vector<CheckpointPiece>& pieces) {
  std::vector<float> out;
  for (const auto& p : pieces) {
    const size_t len = p.flat_end - p.flat_begin;
    out.insert(out.end(), p.params, p.params + len);
    out.insert(out.end(), p.m, p.m + len);
    out.insert(out.end(), p.v, p.v + len);
  }
  return out;
}

class Recorder {
 public:
  CheckpointWriter::WriteFn Fn() {
    return [this](int64_t step, const std::vector<CheckpointPiece>& pieces) {
      std::lock_guard<std::mutex> l(mu_);
      written_.push_back({step, Flatten(pieces), std::this_thread::get_id()});
      return absl::OkStatus();
    };
  }
  std::vector<Written> written() {
    std::lock_guard<std::mutex> l(mu_);
    return written_;
  }

 private:
  std::mutex mu_;
  std::vector<Written> written_;
};

TEST(CheckpointWriterTest, WritesACopySoTheStepLoopMayChangeItsBuffersAtOnce) {
  Live live(64);
  const std::vector<float> at_snapshot = Flatten(live.Pieces(40));
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::vector<Written> written;
  {
    CheckpointWriter writer(10 * live.Bytes(), [&](int64_t step, const std::vector<CheckpointPiece>& pieces) {
      released.wait();  // the write starts only after the live buffers have changed
      written.push_back({step, Flatten(pieces), std::this_thread::get_id()});
      return absl::OkStatus();
    });
    ASSERT_TRUE(writer.Snapshot(7, live.Pieces(40)).ok());
    live.Fill(5000);  // the next steps overwrite the state
    release.set_value();
    ASSERT_TRUE(writer.Flush().ok());
  }
  ASSERT_EQ(written.size(), 1u);
  EXPECT_EQ(written[0].step, 7);
  EXPECT_EQ(written[0].values, at_snapshot);
  EXPECT_NE(written[0].thread, std::this_thread::get_id()) << "the copy is written on the writer's thread";
}

TEST(CheckpointWriterTest, WritesInStepOrderAndFlushWaitsForEveryOne) {
  Live live(32);
  Recorder rec;
  CheckpointWriter writer(100 * live.Bytes(), rec.Fn());
  std::vector<std::vector<float>> expected;
  for (int64_t step = 1; step <= 5; ++step) {
    live.Fill(static_cast<float>(step) * 100);
    expected.push_back(Flatten(live.Pieces(8)));
    ASSERT_TRUE(writer.Snapshot(step, live.Pieces(8)).ok());
  }
  ASSERT_TRUE(writer.Flush().ok());
  const auto w = rec.written();
  ASSERT_EQ(w.size(), 5u);
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(w[i].step, i + 1);
    EXPECT_EQ(w[i].values, expected[i]) << "step " << i + 1;
  }
}

TEST(CheckpointWriterTest, ACheckpointLargerThanTheBudgetIsWrittenFromTheLiveBuffersNow) {
  Live live(16);
  Recorder rec;
  CheckpointWriter writer(live.Bytes() - 1, rec.Fn());
  ASSERT_TRUE(writer.Snapshot(3, live.Pieces(5)).ok());
  const auto w = rec.written();  // no Flush: the write has happened within Snapshot
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].step, 3);
  EXPECT_EQ(w[0].thread, std::this_thread::get_id());
  EXPECT_EQ(w[0].values, Flatten(live.Pieces(5)));
}

TEST(CheckpointWriterTest, WithRoomForOneCopyTheNextSnapshotWaitsForTheEarlierWrite) {
  Live live(16);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> first_written{false};
  std::vector<int64_t> steps;
  CheckpointWriter writer(1.5 * live.Bytes(), [&](int64_t step, const std::vector<CheckpointPiece>&) {
    if (step == 1) {
      released.wait();
      first_written = true;
    }
    steps.push_back(step);
    return absl::OkStatus();
  });
  ASSERT_TRUE(writer.Snapshot(1, live.Pieces(4)).ok());
  std::atomic<bool> second_snapshot_returned{false};
  bool first_written_when_second_returned = false;
  std::thread second([&] {
    EXPECT_TRUE(writer.Snapshot(2, live.Pieces(4)).ok());
    first_written_when_second_returned = first_written.load();
    second_snapshot_returned = true;
  });
  release.set_value();
  second.join();
  // Two copies do not fit: the second was taken only once the first write had ended.
  EXPECT_TRUE(first_written_when_second_returned);
  ASSERT_TRUE(writer.Flush().ok());
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2}));
}

TEST(CheckpointWriterTest, AFailedWriteIsReportedAtTheNextCheckpointAndLaterCopiesAreNotWritten) {
  Live live(8);
  std::vector<int64_t> attempted;
  CheckpointWriter writer(100 * live.Bytes(), [&](int64_t step, const std::vector<CheckpointPiece>&) {
    attempted.push_back(step);
    return step == 2 ? absl::UnavailableError("shard server 127.0.0.1:1 unreachable") : absl::OkStatus();
  });
  ASSERT_TRUE(writer.Snapshot(1, live.Pieces(3)).ok());
  ASSERT_TRUE(writer.Snapshot(2, live.Pieces(3)).ok());
  const absl::Status flushed = writer.Flush();
  ASSERT_FALSE(flushed.ok());
  EXPECT_EQ(flushed.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(flushed.message().find("step 2"), std::string::npos) << flushed;
  EXPECT_NE(flushed.message().find("unreachable"), std::string::npos) << flushed;
  const absl::Status next = writer.Snapshot(3, live.Pieces(3));
  EXPECT_EQ(next.code(), absl::StatusCode::kUnavailable) << next;
  ASSERT_FALSE(writer.Flush().ok());
  EXPECT_EQ(attempted, (std::vector<int64_t>{1, 2}));
}

TEST(CheckpointWriterTest, DestructionWritesWhatIsQueued) {
  Live live(8);
  Recorder rec;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  {
    CheckpointWriter writer(100 * live.Bytes(), [&](int64_t step, const std::vector<CheckpointPiece>& p) {
      released.wait();
      return rec.Fn()(step, p);
    });
    for (int64_t step = 1; step <= 3; ++step) ASSERT_TRUE(writer.Snapshot(step, live.Pieces(2)).ok());
    release.set_value();
  }  // no Flush
  const auto w = rec.written();
  ASSERT_EQ(w.size(), 3u);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(w[i].step, i + 1);
}

}  // namespace
}  // namespace gantry::checkpoint
