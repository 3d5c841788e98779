// The shard server in-process (real gRPC on a loopback port 0) driven through the client
// library the workers and the CLI use.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/rocks.h"
#include "shardserver/service.h"
#include "tests/test_util.h"
#include "checkpoint/remote/shard_source.h"

namespace gantry::shardserver {
namespace {

class ShardServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto svc = ShardService::Open(dir_.File("db"), &registry_);
    ASSERT_TRUE(svc.ok()) << svc.status();
    svc_ = std::move(*svc);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(svc_.get());
    server_ = b.BuildAndStart();
    ASSERT_GT(port, 0);
    addr_ = "127.0.0.1:" + std::to_string(port);
    // A checkpoint directory with a part larger than one chunk.
    std::string big(shardserver::kChunkBytes * 2 + 12345, '\0');
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + 3);
    std::filesystem::create_directories(dir_.File("ckpt"));
    ASSERT_TRUE(WriteFileAtomic(dir_.File("ckpt/model.safetensors"), big).ok());
    ASSERT_TRUE(WriteFileAtomic(dir_.File("ckpt/config.json"), "{\"n_layer\": 1}\n").ok());
  }
  void TearDown() override {
    server_->Shutdown();
    server_.reset();
  }
  testing::TempDir dir_;
  metrics::Registry registry_;
  std::unique_ptr<ShardService> svc_;
  std::unique_ptr<grpc::Server> server_;
  std::string addr_;
};

// Listings page: 2,500 committed checkpoints of two jobs (records as Commit writes them) come
// back whole through the client, which reads page after page; a page holds at most 1000, in
// (job, step) order; a token of another job's listing is refused.
TEST_F(ShardServiceTest, CheckpointListingsPage) {
  rocks::Batch b;
  for (int64_t i = 1; i <= 2500; ++i) {
    const std::string job = i <= 1500 ? "j-000001" : "j-000002";
    v1::CheckpointInfo info;
    info.set_job_id(job);
    info.set_step(i);
    info.add_parts("part-00000.safetensors");
    b.Put(absl::StrFormat("ckpt/%s/%012d", job, i), info.SerializeAsString());
  }
  ASSERT_TRUE(svc_->db().Write(b).ok());
  auto one = shardserver::ListCheckpoints(addr_, "j-000001");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1500u);
  for (size_t i = 0; i < one->size(); ++i) ASSERT_EQ((*one)[i].step(), static_cast<int64_t>(i + 1));
  auto every = shardserver::ListCheckpoints(addr_, "");  // every job's: three pages
  ASSERT_TRUE(every.ok()) << every.status();
  EXPECT_EQ(every->size(), 2500u);
  EXPECT_EQ(every->back().job_id(), "j-000002");
  // The raw pages: 1000, then the rest with no token after it; another job's token refused.
  auto stub = v1::ShardServer::NewStub(grpc::CreateChannel(addr_, grpc::InsecureChannelCredentials()));
  v1::ListCheckpointsRequest req;
  req.set_job_id("j-000001");
  v1::ListCheckpointsResponse first, second, wrong;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->ListCheckpoints(&ctx, req, &first).ok());
  }
  EXPECT_EQ(first.checkpoints_size(), 1000);
  ASSERT_FALSE(first.next_page_token().empty());
  req.set_page_token(first.next_page_token());
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->ListCheckpoints(&ctx, req, &second).ok());
  }
  EXPECT_EQ(second.checkpoints_size(), 500);
  EXPECT_EQ(second.checkpoints(0).step(), 1001);
  EXPECT_TRUE(second.next_page_token().empty());
  req.set_job_id("j-000002");
  grpc::ClientContext ctx;
  const grpc::Status s = stub->ListCheckpoints(&ctx, req, &wrong);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("continues another listing"), std::string::npos) << s.error_message();
}

TEST_F(ShardServiceTest, UploadListDownloadDelete) {
  auto bytes = shardserver::UploadCheckpoint(addr_, "j-000001", 10, dir_.File("ckpt"), "{\"step\": 10}");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, static_cast<int64_t>(shardserver::kChunkBytes * 2 + 12345 + 15));
  auto list = shardserver::ListCheckpoints(addr_, "j-000001");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].step(), 10);
  EXPECT_EQ((*list)[0].parts_size(), 2);
  EXPECT_EQ((*list)[0].manifest_json(), "{\"step\": 10}");
  ASSERT_TRUE(shardserver::DownloadCheckpoint(addr_, "j-000001", 10, {"model.safetensors", "config.json"}, dir_.File("out")).ok());
  EXPECT_EQ(*ReadFileToString(dir_.File("out/model.safetensors")), *ReadFileToString(dir_.File("ckpt/model.safetensors")));
  EXPECT_EQ(*ReadFileToString(dir_.File("out/config.json")), "{\"n_layer\": 1}\n");
  // Another job's listing is separate.
  EXPECT_TRUE(shardserver::ListCheckpoints(addr_, "j-000002")->empty());
  // Delete: gone from the listing and unreadable.
  auto stub = v1::ShardServer::NewStub(grpc::CreateChannel(addr_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::DeleteCheckpointRequest del;
  del.set_job_id("j-000001");
  del.set_step(10);
  v1::DeleteCheckpointResponse dr;
  ASSERT_TRUE(stub->DeleteCheckpoint(&ctx, del, &dr).ok());
  EXPECT_TRUE(shardserver::ListCheckpoints(addr_, "j-000001")->empty());
  auto gone = shardserver::DownloadCheckpoint(addr_, "j-000001", 10, {"config.json"}, dir_.File("out2"));
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound) << gone;
}

// Ranged reads (a rank reading only the pieces it needs) return exactly the bytes asked for,
// across the stored chunks' bounds; a range beyond the part is refused, naming it.
TEST_F(ShardServiceTest, RangedReadsReturnExactlyTheBytesAskedFor) {
  ASSERT_TRUE(shardserver::UploadCheckpoint(addr_, "j-000001", 10, dir_.File("ckpt"), "{}").ok());
  const std::string whole = *ReadFileToString(dir_.File("ckpt/model.safetensors"));
  auto list = shardserver::ListCheckpoints(addr_, "j-000001");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ((*list)[0].part_bytes_size(), 2);
  for (int i = 0; i < 2; ++i) {
    const auto size = std::filesystem::file_size(dir_.File("ckpt/" + (*list)[0].parts(i)));
    EXPECT_EQ((*list)[0].part_bytes(i), static_cast<int64_t>(size)) << (*list)[0].parts(i);
  }
  auto stub = v1::ShardServer::NewStub(grpc::CreateChannel(addr_, grpc::InsecureChannelCredentials()));
  const int64_t c = static_cast<int64_t>(shardserver::kChunkBytes), n = static_cast<int64_t>(whole.size());
  for (auto [off, len] : {std::pair<int64_t, int64_t>{0, 1}, {c - 5, 10}, {c, c}, {7, 2 * c + 100}, {n - 1, 1}, {0, n}}) {
    std::string got(static_cast<size_t>(len), '\0');
    ASSERT_TRUE(shardserver::ReadPartRange(*stub, addr_, "j-000001", 10, "model.safetensors", off, len, got.data()).ok())
        << off << "+" << len;
    EXPECT_EQ(got, whole.substr(static_cast<size_t>(off), static_cast<size_t>(len))) << off << "+" << len;
  }
  std::string buf(16, '\0');
  auto beyond = shardserver::ReadPartRange(*stub, addr_, "j-000001", 10, "model.safetensors", n - 8, 16, buf.data());
  EXPECT_EQ(beyond.code(), absl::StatusCode::kOutOfRange) << beyond;
  EXPECT_NE(beyond.message().find("model.safetensors"), std::string::npos) << beyond;
}

// Found by tests/fuzz/shard_chunks_fuzz: the end of a range, offset + length, was summed
// before either was checked, and 2^62 + 2^62 overflowed (undefined behaviour) into a
// negative end that passed the check against the part's size.
TEST_F(ShardServiceTest, RangesPastTheEndAreRefusedWhateverTheirSize) {
  ASSERT_TRUE(shardserver::UploadCheckpoint(addr_, "j-000001", 10, dir_.File("ckpt"), "{}").ok());
  auto stub = v1::ShardServer::NewStub(grpc::CreateChannel(addr_, grpc::InsecureChannelCredentials()));
  const int64_t big = int64_t{1} << 62;
  for (auto [off, len] : {std::pair<int64_t, int64_t>{big, big}, {1, INT64_MAX}, {INT64_MAX, 0}, {-1, 1}, {0, -1}}) {
    grpc::ClientContext ctx;
    v1::ReadChunksRequest req;
    req.set_job_id("j-000001"), req.set_step(10), req.set_part("config.json"), req.set_offset(off), req.set_length(len);
    auto reader = stub->ReadChunks(&ctx, req);
    v1::Chunk c;
    EXPECT_FALSE(reader->Read(&c)) << off << "+" << len;
    const grpc::Status s = reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::OUT_OF_RANGE) << off << "+" << len << ": " << s.error_message();
    EXPECT_NE(s.error_message().find("config.json"), std::string::npos) << s.error_message();
  }
}

TEST_F(ShardServiceTest, UncommittedOrMissingCheckpointsAreNotReadable) {
  auto r = shardserver::DownloadCheckpoint(addr_, "j-000009", 1, {"config.json"}, dir_.File("out"));
  EXPECT_EQ(r.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.message().find("no committed checkpoint"), absl::string_view::npos) << r;
}

TEST_F(ShardServiceTest, InvalidNamesAreRefused) {
  auto r = shardserver::UploadCheckpoint(addr_, "../etc", 1, dir_.File("ckpt"), "{}");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
}

// A shard server restarted (as after a SIGKILL) between two checkpoints: the committed one
// reads back in full; the one whose parts were written but never committed is invisible,
// and its chunks are reclaimed.
TEST_F(ShardServiceTest, ARestartReclaimsUncommittedPartsAndKeepsCommittedOnes) {
  ASSERT_TRUE(shardserver::UploadCheckpoint(addr_, "j-000001", 10, dir_.File("ckpt"), "{\"step\": 10}").ok());
  ASSERT_TRUE(shardserver::UploadFiles(addr_, "j-000001", 20, dir_.File("ckpt"), {"model.safetensors", "config.json"}).ok());
  auto count = [&](const std::string& prefix) {
    int n = 0;
    EXPECT_TRUE(svc_->db().Scan(prefix, [&](absl::string_view, absl::string_view) { return ++n > 0; }).ok());
    return n;
  };
  ASSERT_GT(count("chunk/j-000001/000000000020/"), 0);
  // Restart on the same store.
  server_->Shutdown();
  server_.reset();
  svc_.reset();
  SetUp();
  EXPECT_EQ(count("chunk/j-000001/000000000020/"), 0) << "the uncommitted step 20 is reclaimed";
  EXPECT_EQ(count("part/j-000001/000000000020/"), 0);
  auto list = shardserver::ListCheckpoints(addr_, "j-000001");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].step(), 10);
  ASSERT_TRUE(shardserver::DownloadCheckpoint(addr_, "j-000001", 10, {"model.safetensors", "config.json"}, dir_.File("back")).ok());
  auto a = ReadFileToString(dir_.File("ckpt/model.safetensors")), b = ReadFileToString(dir_.File("back/model.safetensors"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b) << "the committed checkpoint reads back in full";
  // A commit naming the reclaimed parts is refused.
  EXPECT_FALSE(shardserver::CommitCheckpoint(addr_, "j-000001", 20, {"model.safetensors", "config.json"}, "{}").ok());
}

}  // namespace
}  // namespace gantry::shardserver
