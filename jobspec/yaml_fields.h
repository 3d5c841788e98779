// Reading YAML mappings field by field, for the job spec (job_spec.cc) and the cluster and
// profile files (cluster.cc): every error is INVALID_ARGUMENT and names the field, after what
// is being read ("job spec", "cluster", "profile").
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "yaml-cpp/yaml.h"

namespace gantry::jobspec {

// Reads one field's node; `field` is its full name ("train.lr").
using FieldHandler = std::function<absl::Status(const YAML::Node&, const std::string&)>;

// "<what>: field '<field>' <why>".
absl::Status FieldError(absl::string_view what, absl::string_view field, absl::string_view why);
// A node as an error names it: its scalar, or "a mapping", "a sequence".
std::string DescribeNode(const YAML::Node& n);
// Reads the mapping `node`, the field `name` ("" at the top level), each key by its handler.
// Not a mapping, a key that is not a name (YAML allows any node as a key), a key with no
// handler (the known ones listed) or a missing `required` key: an error naming the field.
absl::Status ReadSection(absl::string_view what, const YAML::Node& node, const std::string& name,
                         const std::map<std::string, FieldHandler>& handlers,
                         const std::vector<std::string>& required = {});

}  // namespace gantry::jobspec
