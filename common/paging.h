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

// A client's read of a paged listing to its end: call(req, &resp) for each page (req's
// page_token set from the previous answer), each answer given to take. Returns the first failed
// call's status (absl::Status or grpc::Status, whatever call returns), else OK.
template <typename Resp, typename Req, typename Call, typename Take>
auto ReadEveryPage(Req req, Call&& call, Take&& take) -> decltype(call(req, static_cast<Resp*>(nullptr))) {
  do {
    Resp resp;
    auto s = call(req, &resp);
    if (!s.ok()) return s;
    take(resp);
    req.set_page_token(resp.next_page_token());
  } while (!req.page_token().empty());
  return {};
}

}  // namespace gantry
