// The edge of every Gantry gRPC service, written once: what each call goes through on its
// way in and out, whatever its service and method.
//   - Who calls (common/security.h, Authenticate): the cluster token, a principals file's
//     token or client certificate, or nobody on a laptop cluster. A call that names no
//     identity is refused, UNAUTHENTICATED, before its handler's body runs; otherwise the
//     body may take the caller's Principal as its first argument (body(principal), or
//     body() when it has no use for it). ServeUnary, ServeUnaryLater and ServeStream do this
//     for unary and streaming methods. The standard health and reflection services do not
//     go through them, so probes need no token.
//   - The one Status mapping: a handler's absl::Status becomes the call's grpc::Status
//     (ToGrpc, the same codes and message).
//   - Request metrics and logs: a server interceptor (AddRpcEdge, which StartGrpcServer
//     installs) times every call of every Gantry service from its arrival to its status,
//     streams included, and records gantry_<component>_rpc_seconds{method} and
//     gantry_<component>_rpcs_total{method,code} (metrics::RecordRpc). Refused and failed
//     calls are logged: UNAUTHENTICATED and server faults (INTERNAL, UNKNOWN, DATA_LOSS) as
//     warnings naming the peer, other errors at VLOG(1), every call at VLOG(2).
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "common/grpc_util.h"
#include "common/metrics.h"
#include "common/principals.h"
#include "common/security.h"

namespace gantry {

// Installs the metrics and logging interceptor on a server being built. Calls of the
// grpc.* services (health, reflection) are not recorded.
void AddRpcEdge(grpc::ServerBuilder& builder, metrics::Registry* registry, const std::string& component);

namespace edge_internal {
// f(principal, args...) when f takes the caller's Principal first, else f(args...).
template <typename F, typename... Args>
decltype(auto) CallWith(F& f, const Principal& principal, Args&&... args) {
  if constexpr (std::is_invocable_v<F&, const Principal&, Args...>) {
    return f(principal, std::forward<Args>(args)...);
  } else {
    return f(std::forward<Args>(args)...);
  }
}
}  // namespace edge_internal

// A unary method: who calls, then body() or body(principal) on this gRPC thread (it must
// not wait on anything slow), whose Status finishes the call.
template <typename F>
grpc::ServerUnaryReactor* ServeUnary(grpc::CallbackServerContext* ctx, F&& body) {
  absl::StatusOr<Principal> who = Authenticate(*ctx);
  absl::Status s = who.status();
  if (s.ok()) s = edge_internal::CallWith(body, *who);
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpc(s));
  return reactor;
}

// A unary method that answers later: who calls, then start(finish) or
// start(principal, finish) returns at once, and finish(status) is called exactly once, from
// any thread, when the answer is ready (the response is filled before).
template <typename F>
grpc::ServerUnaryReactor* ServeUnaryLater(grpc::CallbackServerContext* ctx, F&& start) {
  auto* reactor = ctx->DefaultReactor();
  absl::StatusOr<Principal> who = Authenticate(*ctx);
  if (!who.ok()) {
    reactor->Finish(ToGrpc(who.status()));
    return reactor;
  }
  edge_internal::CallWith(start, *who,
                          std::function<void(const absl::Status&)>(
                              [reactor](const absl::Status& s) { reactor->Finish(ToGrpc(s)); }));
  return reactor;
}

// A reactor that ends its call at once with `status` (a call refused at the edge). Base is
// the method's reactor type: grpc::ServerReadReactor<Req>, ServerWriteReactor<Resp> or
// ServerBidiReactor<Req, Resp>.
template <typename Base>
class Refused final : public Base {
 public:
  explicit Refused(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

// A streaming method: who calls, then make() or make(principal) builds the call's reactor
// (a Base*).
template <typename Base, typename Make>
Base* ServeStream(grpc::CallbackServerContext* ctx, Make&& make) {
  absl::StatusOr<Principal> who = Authenticate(*ctx);
  if (!who.ok()) return new Refused<Base>(ToGrpc(who.status()));
  return edge_internal::CallWith(make, *who);
}

}  // namespace gantry
