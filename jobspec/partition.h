// Parameter-server mode's partition map: which shard server steps which range of the flat
// parameter buffer.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace gantry::jobspec {

struct ParamRangeOf {
  std::string shard_server;
  size_t begin = 0, end = 0;
  std::string data_address;  // the server's raw TCP data port: pushes and pulls go there (else gRPC)
};

// The partition map: [0, num_params) split over the servers in order, balanced by bytes,
// the cuts aligned to `align` elements (1 MiB of fp32 by default; 4 KiB for a model too
// small to give each server a block). A server may get an empty range when there are more
// servers than blocks.
std::vector<ParamRangeOf> PartitionParams(size_t num_params, const std::vector<std::string>& servers,
                                          size_t align = size_t{1} << 18);


}  // namespace gantry::jobspec
