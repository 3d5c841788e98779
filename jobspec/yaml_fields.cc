#include "jobspec/yaml_fields.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace gantry::jobspec {

absl::Status FieldError(absl::string_view what, absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": field '", field, "' ", why));
}

std::string DescribeNode(const YAML::Node& n) {
  return n.IsScalar() ? n.Scalar() : std::string(n.IsMap() ? "a mapping" : "a sequence");
}

absl::Status ReadSection(absl::string_view what, const YAML::Node& node, const std::string& name,
                         const std::map<std::string, FieldHandler>& handlers,
                         const std::vector<std::string>& required) {
  const std::string here = name.empty() ? "(top level)" : name;
  if (!node.IsMap()) return FieldError(what, here, "must be a mapping");
  std::vector<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    // as<std::string> would throw on a key that is not a scalar, out of the parser (and
    // through a coordinator's SubmitJob handler).
    if (!it->first.IsScalar()) {
      return FieldError(what, here, absl::StrCat("has a key that is not a name (", DescribeNode(it->first), ")"));
    }
    const std::string key = it->first.Scalar();
    const std::string field = name.empty() ? key : absl::StrCat(name, ".", key);
    auto h = handlers.find(key);
    if (h == handlers.end()) {
      std::vector<std::string> known;
      for (const auto& [k, _] : handlers) known.push_back(k);
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": unknown field '", field, "' (known: ", absl::StrJoin(known, ", "), ")"));
    }
    RETURN_IF_ERROR(h->second(it->second, field));
    seen.push_back(key);
  }
  for (const std::string& r : required) {
    if (std::find(seen.begin(), seen.end(), r) == seen.end()) {
      return FieldError(what, name.empty() ? r : absl::StrCat(name, ".", r), "is required");
    }
  }
  return absl::OkStatus();
}

}  // namespace gantry::jobspec
