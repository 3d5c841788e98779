// All-to-all bus bandwidth of gantry's Communicator against Gloo's alltoall called directly,
// same sizes (64 KiB to 64 MiB sent per rank, all chunks together), same ranks and buffers,
// same run (the method: bench/paired_collective.h). Ranks are threads of this process over
// loopback TCP. With --v, AllToAllV against gloo::alltoallv, equal counts.
//   alltoall_bench [--ranks N] [--max-mb M] [--iters I] [--v]
// Bus bandwidth = bytes sent per rank x (n-1)/n / time (the chunk a rank keeps does not
// cross the wire). Target: Communicator >= 0.9x Gloo at every size, on the paired ratio.
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>

#include <cstring>

#include "bench/paired_collective.h"

int main(int argc, char** argv) {
  int ranks = 2, max_mb = 64, iters = 41;
  bool v = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--v")) v = true;
    if (i + 1 < argc && !std::strcmp(argv[i], "--ranks")) ranks = std::atoi(argv[i + 1]);
    if (i + 1 < argc && !std::strcmp(argv[i], "--max-mb")) max_mb = std::atoi(argv[i + 1]);
    if (i + 1 < argc && !std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[i + 1]);
  }
  using gantry::comm::Communicator;
  const auto rows = gantry::bench::RunPairs(
      ranks, gantry::bench::SizesBy4(64 << 10, static_cast<size_t>(max_mb) << 20), iters,
      [&](Communicator& comm, const std::shared_ptr<gloo::Context>& ctx, uint32_t* next_tag, size_t bytes) {
        const size_t n = bytes / sizeof(float) / static_cast<size_t>(ranks);  // one chunk
        const size_t total = n * static_cast<size_t>(ranks);
        auto in = std::make_shared<std::vector<float>>(total, static_cast<float>(comm.rank()));
        auto out = std::make_shared<std::vector<float>>(total);
        gantry::bench::Sides sides;
        if (!v) {
          sides.ours = [&comm, in, out, n] { (void)comm.AllToAll(in->data(), out->data(), n); };
          sides.direct = [ctx, in, out, next_tag] {
            gloo::AlltoallOptions o(ctx);
            o.setInput(in->data(), in->size());
            o.setOutput(out->data(), out->size());
            o.setTag((*next_tag)++);
            gloo::alltoall(o);
          };
        } else {
          const std::vector<size_t> counts(static_cast<size_t>(ranks), n);
          sides.ours = [&comm, in, out, counts] { (void)comm.AllToAllV(in->data(), counts, out->data(), counts); };
          sides.direct = [ctx, in, out, next_tag, counts] {
            gloo::AlltoallvOptions o(ctx);
            const std::vector<int64_t> elements(counts.begin(), counts.end());
            o.setInput(in->data(), elements);
            o.setOutput(out->data(), elements);
            o.setTag((*next_tag)++);
            gloo::alltoallv(o);
          };
        }
        return sides;
      },
      /*batch_bytes=*/size_t{1} << 20);
  std::printf("%s, %d ranks (threads, loopback TCP), %d to 200 alternated pairs per size, slowest rank\n",
              v ? "all-to-all-v (equal counts)" : "all-to-all", ranks, iters);
  gantry::bench::PrintRows(
      rows, [&](size_t bytes) { return static_cast<double>(bytes) * (ranks - 1) / ranks; }, 0.9, 0);
  return 0;
}
