// The one mapping from absl::Status to grpc::Status, at the service edge (same codes).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "absl/status/status.h"

namespace gantry {

inline grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

inline absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

inline int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A client context with a deadline: every client call has one.
inline std::unique_ptr<grpc::ClientContext> ContextWithDeadline(double seconds) {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
  return c;
}

}  // namespace gantry
