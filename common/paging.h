// Paging of the daemons' listings (Google's AIP-158): a request's page_size (0: the most a
// page holds) and an opaque page_token, which names the listing it continues (the
// coordinator's jobs of one state, its workers; a shard server's checkpoints of a job) and the
// key of the last item the previous page returned. A token from another listing, or one no
// Gantry daemon made, is INVALID_ARGUMENT.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace gantry {

constexpr int32_t kMaxPageSize = 1000;

// The page size a request asks for: 0 or more than kMaxPageSize give kMaxPageSize.
absl::StatusOr<size_t> PageSize(int32_t requested);
std::string PageToken(const std::string& listing, const std::string& last_key);
// The last key `token` names; INVALID_ARGUMENT unless it is a token of `listing`.
absl::StatusOr<std::string> PageTokenKey(const std::string& token, const std::string& listing);

}  // namespace gantry
