#include "common/rpc_edge.h"

#include <glog/logging.h>
#include <grpcpp/support/server_interceptor.h>

#include <chrono>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gantry {
namespace {

using grpc::experimental::InterceptionHookPoints;

// One call: from its creation (the call has arrived) to the status it sends.
class EdgeInterceptor final : public grpc::experimental::Interceptor {
 public:
  EdgeInterceptor(grpc::experimental::ServerRpcInfo* info, metrics::Registry* registry, const std::string* component)
      : info_(info), registry_(registry), component_(component), t0_(std::chrono::steady_clock::now()) {
    const absl::string_view full(info->method());  // "/gantry.v1.Coordinator/ListJobs"
    const size_t slash = full.rfind('/');
    method_ = std::string(slash == absl::string_view::npos ? full : full.substr(slash + 1));
  }
  ~EdgeInterceptor() override {
    // A call whose status was never sent (the server shut down under it).
    if (!recorded_) Record(grpc::Status(grpc::StatusCode::CANCELLED, "ended without a status"));
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      peer_ = info_->server_context()->peer();  // the call is bound now
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS) && !recorded_) {
      Record(methods->GetSendStatus());
    }
    methods->Proceed();
  }

 private:
  void Record(const grpc::Status& s) {
    recorded_ = true;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const auto code = static_cast<absl::StatusCode>(s.error_code());
    metrics::RecordRpc(*registry_, *component_, method_, absl::StatusCodeToString(code), seconds);
    if (s.ok()) {
      VLOG(2) << method_ << " OK in " << seconds * 1e3 << " ms";
      return;
    }
    const bool warn = code == absl::StatusCode::kUnauthenticated || code == absl::StatusCode::kInternal ||
                      code == absl::StatusCode::kUnknown || code == absl::StatusCode::kDataLoss;
    if (!warn && !VLOG_IS_ON(1)) return;
    const std::string what = absl::StrCat(info_->method(), " from ", peer_.empty() ? "an unknown peer" : peer_, ": ",
                                          absl::StatusCodeToString(code), ": ", s.error_message(), " (",
                                          absl::SixDigits(seconds * 1e3), " ms)");
    if (warn) {
      LOG(WARNING) << what;
    } else {
      VLOG(1) << what;
    }
  }

  grpc::experimental::ServerRpcInfo* info_;
  metrics::Registry* registry_;
  const std::string* component_;
  std::string method_;
  std::string peer_;
  const std::chrono::steady_clock::time_point t0_;
  bool recorded_ = false;
};

class EdgeInterceptorFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  EdgeInterceptorFactory(metrics::Registry* registry, std::string component)
      : registry_(registry), component_(std::move(component)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    if (absl::string_view(info->method()).substr(0, 6) == "/grpc.") return nullptr;  // health, reflection
    return new EdgeInterceptor(info, registry_, &component_);
  }

 private:
  metrics::Registry* registry_;
  const std::string component_;
};

}  // namespace

void AddRpcEdge(grpc::ServerBuilder& builder, metrics::Registry* registry, const std::string& component) {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(std::make_unique<EdgeInterceptorFactory>(registry, component));
  builder.experimental().SetInterceptorCreators(std::move(creators));
}

}  // namespace gantry
