#include "checkpoint/remote/shard_source.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/security.h"
#include "common/status.h"

namespace gantry::checkpoint {

namespace {

// A part on a shard server as a ByteSource: each ReadAt is one ranged stream.
class RemotePart final : public ByteSource {
 public:
  RemotePart(std::shared_ptr<v1::ShardServer::StubInterface> stub, std::string address, std::string job_id,
             int64_t step, std::string part, size_t size, std::atomic<int64_t>* counter)
      : stub_(std::move(stub)), address_(std::move(address)), job_id_(std::move(job_id)), step_(step),
        part_(std::move(part)), size_(size), counter_(counter) {}
  size_t size() const override { return size_; }
  absl::Status ReadAt(size_t offset, size_t n, void* dst) const override {
    if (n == 0) return absl::OkStatus();
    if (offset > size_ || n > size_ - offset) {
      return absl::OutOfRangeError(absl::StrCat(part_, ": bytes [", offset, ", +", n, ") beyond its ", size_));
    }
    RETURN_IF_ERROR(shardserver::ReadPartRange(*stub_, address_, job_id_, step_, part_, static_cast<int64_t>(offset),
                                  static_cast<int64_t>(n), static_cast<char*>(dst)));
    *counter_ += static_cast<int64_t>(n);
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<v1::ShardServer::StubInterface> stub_;
  const std::string address_, job_id_;
  const int64_t step_;
  const std::string part_;
  const size_t size_;
  std::atomic<int64_t>* counter_;
};

}  // namespace

std::string ShardCheckpointSource::where() const {
  return absl::StrCat("shard:", c_.job_id, "/", checkpoint::CheckpointDirName(c_.step));
}

absl::StatusOr<std::pair<std::shared_ptr<v1::ShardServer::StubInterface>, const shardserver::StoredCheckpoint::File*>>
ShardCheckpointSource::Locate(
    const std::string& name) {
  auto f = c_.files.find(name);
  if (f == c_.files.end()) {
    return absl::NotFoundError(absl::StrCat(where(), ": no file '", name, "' is committed on the shard servers"));
  }
  std::lock_guard<std::mutex> l(mu_);
  auto& stub = stubs_[f->second.server];
  if (!stub) stub = v1::ShardServer::NewStub(MakeChannel(f->second.server));
  return std::make_pair(stub, &f->second);
}

absl::StatusOr<std::string> ShardCheckpointSource::ReadSmallFile(const std::string& name) {
  ASSIGN_OR_RETURN(auto at, Locate(name));
  std::string bytes;
  ASSIGN_OR_RETURN(int64_t n, shardserver::ReadRange(*at.first, at.second->server, c_.job_id, c_.step, name, 0, 0,
                                        [&](const std::string& d) { bytes += d; }));
  bytes_read_ += n;
  return bytes;
}

absl::StatusOr<std::shared_ptr<const ByteSource>> ShardCheckpointSource::OpenPart(const std::string& name) {
  ASSIGN_OR_RETURN(auto at, Locate(name));
  return std::shared_ptr<const ByteSource>(std::make_shared<RemotePart>(
      std::move(at.first), at.second->server, c_.job_id, c_.step, name, static_cast<size_t>(at.second->bytes), &bytes_read_));
}

}  // namespace gantry::checkpoint
