// The edge of every Gantry gRPC service, written once: what each call goes through on its
// way in and out, whatever its service and method.
//   - The cluster token (common/security.h): a call without it is refused, UNAUTHENTICATED,
//     before its handler's body runs. ServeUnary, ServeUnaryLater and ServeStream do this
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
#include <utility>

#include "absl/status/status.h"
#include "common/grpc_util.h"
#include "common/metrics.h"
#include "common/security.h"

namespace gantry {

// Installs the metrics and logging interceptor on a server being built. Calls of the
// grpc.* services (health, reflection) are not recorded.
void AddRpcEdge(grpc::ServerBuilder& builder, metrics::Registry* registry, const std::string& component);

// A unary method: the token, then body() on this gRPC thread (it must not wait on anything
// slow), whose Status finishes the call.
template <typename F>
grpc::ServerUnaryReactor* ServeUnary(grpc::CallbackServerContext* ctx, F&& body) {
  absl::Status s = CheckToken(*ctx);
  if (s.ok()) s = body();
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpc(s));
  return reactor;
}

// A unary method that answers later: the token, then start(finish) returns at once, and
// finish(status) is called exactly once, from any thread, when the answer is ready (the
// response is filled before).
template <typename F>
grpc::ServerUnaryReactor* ServeUnaryLater(grpc::CallbackServerContext* ctx, F&& start) {
  auto* reactor = ctx->DefaultReactor();
  if (absl::Status t = CheckToken(*ctx); !t.ok()) {
    reactor->Finish(ToGrpc(t));
    return reactor;
  }
  start([reactor](const absl::Status& s) { reactor->Finish(ToGrpc(s)); });
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

// A streaming method: the token, then make() builds the call's reactor (a Base*).
template <typename Base, typename Make>
Base* ServeStream(grpc::CallbackServerContext* ctx, Make&& make) {
  if (absl::Status t = CheckToken(*ctx); !t.ok()) return new Refused<Base>(ToGrpc(t));
  return make();
}

}  // namespace gantry
