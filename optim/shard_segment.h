// A ZeRO rank's runs of the flat parameter buffer. Header only: the checkpoint library reads
// a rank's optimizer state into them without linking the optimizer (or its kernels).
#pragma once

#include <cstddef>

namespace gantry::optim {

// A run of the flat parameter buffer [flat_begin, flat_end) that a rank owns, stored at
// `local` in its compact shard buffers (gradients, m, v and, under ZeRO 3, parameters).
struct ShardSegment {
  size_t flat_begin = 0, flat_end = 0, local = 0;
};

}  // namespace gantry::optim
