// Status helpers shared by every Gantry library: absl::Status through library code, with
// RETURN_IF_ERROR / ASSIGN_OR_RETURN macros. Library code never exits the process.
#pragma once

#include "absl/strings/string_view.h"
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define GANTRY_CONCAT_INNER(a, b) a##b
#define GANTRY_CONCAT(a, b) GANTRY_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                       \
  do {                                              \
    ::absl::Status gantry_status_ = (expr);         \
    if (!gantry_status_.ok()) return gantry_status_; \
  } while (0)

#define GANTRY_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  GANTRY_ASSIGN_OR_RETURN_IMPL(GANTRY_CONCAT(gantry_statusor_, __LINE__), lhs, expr)

namespace gantry {

// Prefixes a status message with context ("reading x.bin: ..."), keeping the code.
inline absl::Status Annotate(const absl::Status& s, absl::string_view context) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

}  // namespace gantry
