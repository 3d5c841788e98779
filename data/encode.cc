#include "data/encode.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace gantry::data {

std::vector<std::vector<uint32_t>> EncodeDocuments(const Tokenizer& tokenizer, const std::vector<absl::string_view>& docs,
                                                   int threads, const std::function<void(size_t)>& progress,
                                                   size_t cache_words) {
  std::vector<std::vector<uint32_t>> out(docs.size());
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), std::max<size_t>(1, docs.size())));
  std::atomic<size_t> next{0}, bytes{0};
  std::atomic<int> running{threads};
  std::mutex mu;
  std::condition_variable done;
  auto work = [&] {
    EncodeCache cache(cache_words);
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < docs.size();) {
      tokenizer.Encode(docs[i], &out[i], cache_words > 0 ? &cache : nullptr);
      bytes.fetch_add(docs[i].size(), std::memory_order_relaxed);
    }
    if (running.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> l(mu);
      done.notify_all();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  if (progress == nullptr) {
    work();
  } else {  // the calling thread reports while the pool encodes
    pool.emplace_back(work);
    std::unique_lock<std::mutex> l(mu);
    while (!done.wait_for(l, std::chrono::milliseconds(100), [&] { return running.load() == 0; })) {
      progress(bytes.load(std::memory_order_relaxed));
    }
    progress(bytes.load());
  }
  for (auto& t : pool) t.join();
  return out;
}

}  // namespace gantry::data
