#include "bench/load/shard_streams.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/grpc_util.h"
#include "common/security.h"
#include "shardserver/client/shard_client.h"

namespace gantry::load {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Stream k's bytes: a shared incompressible buffer XORed with k's own key, made as they are
// read (every stream differs, and a mix-up between two shows at read-back).
class KeyedSource final : public ByteSource {
 public:
  KeyedSource(const std::string* base, uint64_t key) : base_(base), key_(key) {}
  size_t size() const override { return base_->size(); }
  absl::Status ReadAt(size_t offset, size_t n, void* out) const override {
    if (offset + n > base_->size()) return absl::OutOfRangeError("read past the end");
    char* dst = static_cast<char*>(out);
    for (size_t i = 0; i < n; ++i) {
      const size_t at = offset + i;
      dst[i] = static_cast<char>((*base_)[at] ^ static_cast<char>(key_ >> (8 * (at % 8))));
    }
    return absl::OkStatus();
  }

 private:
  const std::string* base_;
  uint64_t key_;
};

uint64_t KeyOf(int k) { return 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(k + 1) | 1; }
std::string JobOf(int k) { return absl::StrFormat("stream-%03d", k); }
constexpr char kPart[] = "part-00000.safetensors";

// Stream k: its part written (one WriteChunks stream) and its checkpoint committed.
absl::Status WriteOne(const std::string& address, const std::string& base, int k) {
  KeyedSource src(&base, KeyOf(k));
  auto n = shardserver::UploadSources(address, JobOf(k), 1, {{kPart, &src}});
  if (!n.ok()) return n.status();
  if (*n != static_cast<int64_t>(base.size())) {
    return absl::DataLossError(absl::StrCat(JobOf(k), ": the server took ", *n, " of ", base.size(), " bytes"));
  }
  return shardserver::CommitCheckpoint(address, JobOf(k), 1, {kPart}, "{\"parts\": []}");
}

// Reads stream k's committed part back and compares every byte.
absl::StatusOr<int64_t> Verify(v1::ShardServer::Stub& stub, const std::string& address, const std::string& base, int k) {
  KeyedSource src(&base, KeyOf(k));
  std::string want(base.size(), '\0');
  if (auto s = src.ReadAt(0, want.size(), want.data()); !s.ok()) return s;
  int64_t at = 0;
  bool same = true;
  auto n = shardserver::ReadRange(stub, address, JobOf(k), 1, kPart, 0, 0, [&](const std::string& d) {
    if (static_cast<size_t>(at) + d.size() > want.size() || std::memcmp(want.data() + at, d.data(), d.size()) != 0) {
      same = false;
    }
    at += static_cast<int64_t>(d.size());
  });
  if (!n.ok()) return n.status();
  if (!same || at != static_cast<int64_t>(want.size())) {
    return absl::DataLossError(absl::StrCat(JobOf(k), ": ", at, " bytes read back, not those written"));
  }
  return at;
}

absl::StatusOr<DaemonProcess> FreshServer(const ShardStreamOptions& o, const std::string& dir, const std::string& name) {
  auto d = SpawnDaemon(name, o.shardserver_bin,
                       {"--listen", "127.0.0.1:0", "--metrics_listen", "127.0.0.1:0", "--data_dir",
                        (fs::path(dir) / name).string()},
                       dir);
  if (!d.ok()) return d.status();
  if (auto s = WaitReady(*d); !s.ok()) {
    KillDaemon(*d);
    return s;
  }
  return d;
}

}  // namespace

absl::StatusOr<ShardStreamReport> RunShardStreams(const ShardStreamOptions& o) {
  ShardStreamReport rep;
  rep.options = o;
  if (o.streams < 1 || o.bytes < 1) return absl::InvalidArgumentError("streams and bytes must be positive");
  std::string dir = o.dir;
  const bool own_dir = dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/shard_streams.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return absl::UnavailableError("mkdtemp failed");
    dir = tmpl;
  }
  std::vector<DaemonProcess> servers;
  struct Cleanup {
    std::vector<DaemonProcess>* servers;
    std::string dir;
    bool remove;
    ~Cleanup() {
      for (auto& d : *servers) KillDaemon(d);
      std::error_code ec;
      if (remove) fs::remove_all(dir, ec);
    }
  } cleanup{&servers, dir, own_dir};

  std::string base(static_cast<size_t>(o.bytes), '\0');
  uint64_t x = 0x2545f4914f6cdd1dull;
  for (size_t i = 0; i < base.size(); ++i) {
    if (i % 8 == 0) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
    }
    base[i] = static_cast<char>(x >> (8 * (i % 8)));
  }
  const double total_mb = static_cast<double>(o.bytes) * o.streams / 1e6;

  // One stream at a time, on a server of its own.
  {
    auto d = FreshServer(o, dir, "shardserver-sequential");
    if (!d.ok()) return d.status();
    servers.push_back(*d);
    const std::string address = servers.back().address();
    const auto t0 = Clock::now();
    for (int k = 0; k < o.streams; ++k) {
      if (auto s = WriteOne(address, base, k); !s.ok()) return s;
      if (k == 0) rep.first_seconds = Seconds(Clock::now() - t0);
    }
    rep.sequential_seconds = Seconds(Clock::now() - t0);
    {
      auto stub = v1::ShardServer::NewStub(MakeChannel(address));
      for (int k = 0; k < o.streams; ++k) {
        auto n = Verify(*stub, address, base, k);
        if (!n.ok()) {
          rep.errors.push_back(absl::StrCat("sequential: ", n.status().message()));
        } else {
          rep.bytes_verified += *n;
        }
      }
    }  // the channel closed: a server stops at once with no connection open
    StopDaemon(servers.back());
  }
  // All at once, on a fresh server: released together once every thread is ready.
  {
    auto d = FreshServer(o, dir, "shardserver-concurrent");
    if (!d.ok()) return d.status();
    servers.push_back(*d);
    const std::string address = servers.back().address();
    std::mutex mu;
    std::condition_variable cv;
    int ready = 0;
    bool go = false;
    Clock::time_point t0;
    std::vector<absl::Status> results(static_cast<size_t>(o.streams));
    std::vector<std::thread> threads;
    for (int k = 0; k < o.streams; ++k) {
      threads.emplace_back([&, k] {
        {
          std::unique_lock<std::mutex> l(mu);
          ++ready;
          cv.notify_all();
          cv.wait(l, [&] { return go; });
        }
        results[static_cast<size_t>(k)] = WriteOne(address, base, k);
      });
    }
    {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return ready == o.streams; });
      go = true;
      t0 = Clock::now();
    }
    cv.notify_all();
    for (auto& t : threads) t.join();
    rep.concurrent_seconds = Seconds(Clock::now() - t0);
    rep.server_memory = MemoryOf(servers.back().pid);
    {
      auto stub = v1::ShardServer::NewStub(MakeChannel(address));
      for (int k = 0; k < o.streams; ++k) {
        if (!results[static_cast<size_t>(k)].ok()) {
          rep.errors.push_back(absl::StrCat("concurrent: ", JobOf(k), ": ", results[static_cast<size_t>(k)].message()));
          continue;
        }
        ++rep.committed;
        auto n = Verify(*stub, address, base, k);
        if (!n.ok()) {
          rep.errors.push_back(absl::StrCat("concurrent: ", n.status().message()));
        } else {
          rep.bytes_verified += *n;
        }
      }
    }
    StopDaemon(servers.back());
  }
  rep.first_mb_s = static_cast<double>(o.bytes) / 1e6 / rep.first_seconds;
  rep.sequential_mb_s = total_mb / rep.sequential_seconds;
  rep.concurrent_mb_s = total_mb / rep.concurrent_seconds;
  rep.ratio = rep.concurrent_mb_s / rep.sequential_mb_s;
  return rep;
}

bool TargetsMet(const ShardStreamReport& r) {
  return r.errors.empty() && r.committed == r.options.streams &&
         r.bytes_verified == 2 * r.options.bytes * r.options.streams && r.ratio >= 0.7;
}

std::string FormatReport(const ShardStreamReport& r) {
  const auto& o = r.options;
  const double mb = static_cast<double>(o.bytes) / (1 << 20);
  std::string out = absl::StrFormat(
      "shard server: %d checkpoint streams of %.0f MB (write + commit each), a fresh server per phase\n", o.streams, mb);
  absl::StrAppend(&out, absl::StrFormat("  %-36s %9s %10s\n", "phase", "seconds", "MB/s"));
  absl::StrAppend(&out, absl::StrFormat("  %-36s %9.2f %10.1f\n", "the first stream alone", r.first_seconds, r.first_mb_s));
  absl::StrAppend(&out, absl::StrFormat("  %-36s %9.2f %10.1f\n", absl::StrCat(o.streams, " streams one at a time"),
                                        r.sequential_seconds, r.sequential_mb_s));
  absl::StrAppend(&out, absl::StrFormat("  %-36s %9.2f %10.1f\n", absl::StrCat(o.streams, " streams at once"),
                                        r.concurrent_seconds, r.concurrent_mb_s));
  absl::StrAppend(&out, absl::StrFormat(
      "  at once / one at a time: %.2fx (target >= 0.70x: %s); %d of %d committed; %.1f MB read back identical; "
      "server rss %.0f MB (peak %.0f MB)\n",
      r.ratio, r.ratio >= 0.7 ? "met" : "NOT met", r.committed, o.streams, static_cast<double>(r.bytes_verified) / 1e6,
      static_cast<double>(r.server_memory.rss) / 1e6, static_cast<double>(r.server_memory.peak) / 1e6));
  for (const auto& e : r.errors) absl::StrAppend(&out, "  ERROR: ", e, "\n");
  return out;
}

}  // namespace gantry::load
