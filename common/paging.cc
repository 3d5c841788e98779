// Paging of listings (paging.h).
#include "common/paging.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace gantry {

absl::StatusOr<size_t> PageSize(int32_t requested) {
  if (requested < 0) return absl::InvalidArgumentError(absl::StrCat("page_size ", requested, " is negative"));
  return static_cast<size_t>(requested == 0 || requested > kMaxPageSize ? kMaxPageSize : requested);
}

std::string PageToken(const std::string& listing, const std::string& last_key) {
  return absl::WebSafeBase64Escape(absl::StrCat("gantry1|", listing, "|", last_key));
}

absl::StatusOr<std::string> PageTokenKey(const std::string& token, const std::string& listing) {
  std::string text;
  const std::string prefix = absl::StrCat("gantry1|", listing, "|");
  if (!absl::WebSafeBase64Unescape(token, &text) || text.rfind("gantry1|", 0) != 0) {
    return absl::InvalidArgumentError("page_token is not one a Gantry daemon gave (take next_page_token as it is)");
  }
  if (text.rfind(prefix, 0) != 0 || text.size() == prefix.size()) {
    return absl::InvalidArgumentError(
        "page_token continues another listing: ask with the same filter as the request that returned it");
  }
  return text.substr(prefix.size());
}

}  // namespace gantry
