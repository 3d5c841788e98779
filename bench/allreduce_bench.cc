// All-reduce bus bandwidth of gantry's Communicator against Gloo's allreduce called
// directly, same sizes (4 KB to 256 MB), same ranks, same run (the method:
// bench/paired_collective.h). Ranks are threads of this process over loopback TCP.
//   allreduce_bench [--ranks N] [--max-mb M] [--iters I]
// Bus bandwidth = 2(n-1)/n x bytes / time. Target: Communicator >= 0.95x Gloo from 1 MB up,
// on the median of paired, alternated runs.
#include <gloo/allreduce.h>

#include <cstring>

#include "bench/paired_collective.h"

int main(int argc, char** argv) {
  int ranks = 2, max_mb = 256, iters = 41;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--ranks")) ranks = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--max-mb")) max_mb = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[i + 1]);
  }
  const auto rows = gantry::bench::RunPairs(
      ranks, gantry::bench::SizesBy4(4096, static_cast<size_t>(max_mb) << 20), iters,
      [](gantry::comm::Communicator& comm, const std::shared_ptr<gloo::Context>& ctx, uint32_t* next_tag,
         size_t bytes) {
        const size_t n = bytes / sizeof(float);
        // (grows by a factor of ranks per call: stays finite)
        auto buf = std::make_shared<std::vector<float>>(n, 1.0f);
        gantry::bench::Sides sides;
        sides.ours = [&comm, buf] { (void)comm.AllReduceSum(buf->data(), buf->size()); };
        sides.direct = [ctx, buf, next_tag] {
          gloo::AllreduceOptions o(ctx);
          o.setOutput(buf->data(), buf->size());
          o.setReduceFunction(&gantry::comm::SumFloats);
          o.setTag((*next_tag)++);
          gloo::allreduce(o);
        };
        return sides;
      });
  std::printf("all-reduce, %d ranks (threads, loopback TCP), %d to 200 alternated pairs per size, slowest rank\n",
              ranks, iters);
  gantry::bench::PrintRows(
      rows, [&](size_t bytes) { return 2.0 * (ranks - 1) / ranks * static_cast<double>(bytes); }, 0.95, 1u << 20);
  return 0;
}
