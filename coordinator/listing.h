// Paging of the coordinator's listings (Google's AIP-158): a request's page_size (0: the most
// a page holds) and an opaque page_token, which names the listing it continues (jobs of one
// state, workers) and the key of the last item the previous page returned. A token from
// another listing, or one this coordinator did not make, is INVALID_ARGUMENT.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace gantry::coordinator {

constexpr int32_t kMaxPageSize = 1000;

// The page size a request asks for: 0 or more than kMaxPageSize give kMaxPageSize.
absl::StatusOr<size_t> PageSize(int32_t requested);
std::string PageToken(const std::string& listing, const std::string& last_key);
// The last key `token` names; INVALID_ARGUMENT unless it is a token of `listing`.
absl::StatusOr<std::string> PageTokenKey(const std::string& token, const std::string& listing);

}  // namespace gantry::coordinator
