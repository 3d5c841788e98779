// The load tests' client channels: a connection each, as separate processes would have.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/security.h"

namespace gantry::load {

// A channel of its own (its own TCP connection, as each gantry-worker process has): gRPC
// would otherwise share one connection among channels to the same address.
inline std::shared_ptr<grpc::Channel> OwnChannel(const std::string& address, int max_receive_bytes = 16 << 20) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_receive_bytes);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, ClientCredentials(), args);
}

}  // namespace gantry::load
