// Plain TCP for bulk payloads beside gRPC (the parameter-server data port): listen, connect,
// and whole sends and receives. Errors name the peer and the system error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace gantry::net {

// A listening socket on host:port (port 0 picks one; *port gets it).
absl::StatusOr<int> Listen(const std::string& host, int* port);
// A connection to "host:port", TCP_NODELAY set.
absl::StatusOr<int> Connect(const std::string& address);
absl::Status SendAll(int fd, const void* data, size_t n);
absl::Status RecvAll(int fd, void* data, size_t n);  // a closed peer is UNAVAILABLE

// The parameter-server data protocol: a request header, the job id (job_len bytes), then
// for kPush and kWrite `count` float32 values; the answer is a ReplyHeader, message_len
// bytes of error text, then for a successful kRead `count` float32 values.
struct ParamWireHeader {
  static constexpr uint32_t kMagic = 0x47505344;  // "DSPG"
  enum Op : uint32_t { kPush = 1, kRead = 2, kWrite = 3 };
  uint32_t magic = kMagic;
  uint32_t op = 0;
  int64_t generation = 0;
  int64_t step = 0;    // kPush: the 1-based optimizer step
  double lr = 0;       // kPush
  int64_t offset = 0;  // flat index of the first value
  int64_t count = 0;
  uint32_t buffer = 0;  // v1::RangeBuffer (kRead, kWrite)
  uint32_t job_len = 0;
};
struct ParamWireReply {
  int32_t code = 0;  // absl::StatusCode
  uint32_t message_len = 0;
  int64_t version = 0;  // the steps applied
};

}  // namespace gantry::net
