// The parameter-server data protocol (the shard server's data port beside its gRPC service;
// shardserver/param_service.h serves it, worker/agent/param_client.h speaks it). A request is
// a ParamWireHeader, the job id (job_len bytes), then for kPush and kWrite `count` float32
// values; the answer is a ParamWireReply, message_len bytes of error text, then for a
// successful kRead `count` float32 values. Native byte order (the cluster is x86-64).
#pragma once

#include <cstdint>

namespace gantry::net {

struct ParamWireHeader {
  static constexpr uint32_t kMagic = 0x47505344;  // "DSPG"
  static constexpr uint32_t kMaxJobLen = 4096;
  static constexpr int64_t kMaxCount = int64_t{1} << 32;
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
static_assert(sizeof(ParamWireHeader) == 56, "the wire header's layout is the protocol");

struct ParamWireReply {
  int32_t code = 0;  // absl::StatusCode
  uint32_t message_len = 0;
  int64_t version = 0;  // the steps applied
};
static_assert(sizeof(ParamWireReply) == 16, "the wire reply's layout is the protocol");

}  // namespace gantry::net
