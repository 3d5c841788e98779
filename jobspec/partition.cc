#include "jobspec/partition.h"

#include <algorithm>

namespace gantry::jobspec {

std::vector<ParamRangeOf> PartitionParams(size_t num_params, const std::vector<std::string>& servers, size_t align) {
  std::vector<ParamRangeOf> out;
  if (servers.empty()) return out;
  // A model too small to give every server a whole block of `align` is cut at 4 KiB instead.
  if (num_params < align * servers.size()) align = std::min<size_t>(align, 1024);
  const size_t blocks = (num_params + align - 1) / align;
  const size_t per = blocks / servers.size(), extra = blocks % servers.size();
  size_t at = 0;
  for (size_t i = 0; i < servers.size(); ++i) {
    const size_t take = (per + (i < extra ? 1 : 0)) * align;
    const size_t end = std::min(num_params, at + take);
    out.push_back({servers[i], at, end});
    at = end;
  }
  return out;
}

}  // namespace gantry::jobspec
