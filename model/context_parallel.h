// Context parallelism: the sequence split over the cp ranks of a group, and attention over
// the whole sequence by a ring of K/V exchanges (Liu et al. 2023's ring attention, with the
// causal load balance of Megatron-Core and torchtitan).
//
// Sharding (CpSharding): a sequence of T rows is cut into 2·cp chunks of T / (2·cp); rank i
// holds chunk i and chunk 2·cp−1−i, in that order. Under the causal mask every rank then has
// the same work: each ring step but the first computes exactly two chunk pairs wholly below
// the diagonal, the first one such pair and two diagonal ones.
//
// Ring attention (RingAttention), on the rank's backend and its memory through the block ops
// (kernels/backend.h AttentionBlockForward/Delta/Backward; kernels/attention_block.h states
// them): each rank starts with its own rows' K and V (only the key/value
// heads, under grouped-query attention) and passes them to rank + 1 while it computes with
// them, so that after cp − 1 exchanges it has seen every rank's. Each block's attention is
// merged into the rows' running output by the log-sum-exps. The causal mask is applied by
// the rows' global positions: chunk pairs wholly above the diagonal are skipped, the diagonal
// ones masked. Backward: dQ stays local; dK and dV travel with their K and V, each rank adding
// its share, and one last exchange brings them home to their owners. The exchanges run on the
// group's communication thread (comm::CommThread), the next one in flight while the current
// block is computed. On a device backend the communicator reaches its memory (NCCL; Gloo on
// cuda-emulated's): the ring waits for the backend's queued work (Synchronize) before each
// exchange, so that what is sent is written and what is received over is no longer read, and
// the exchange then runs while the next block's ops run on the device. Where the model's K
// and V are 16-bit (AttentionHeads::kv_type bf16 or fp16) the blocks travel in that type, half
// fp32's bytes, and are widened on arrival (Backend::Convert); dK/dV, sums over the ranks'
// queries, travel in fp32. With 16-bit operands the blocks are computed on the backend's
// 16-bit path where it has one (AttentionBlock::values, kernels/attention_block.h: cuDNN's SDPA
// on the cuda kinds; the backward from the rows' merged out and lse), else by the fp32 ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/comm_thread.h"
#include "kernels/backend.h"
#include "kernels/types.h"

namespace gantry::model {

// Which rows of each sequence a cp rank holds, and their positions.
class CpSharding {
 public:
  // T rows over cp ranks, for rank: T a positive multiple of 2·cp, 0 <= rank < cp. The error
  // names what is wrong.
  static absl::StatusOr<CpSharding> Make(int T, int cp, int rank);

  int T() const { return T_; }
  int cp() const { return cp_; }
  int rank() const { return rank_; }
  int chunk() const { return T_ / (2 * cp_); }  // rows per chunk
  int rows() const { return T_ / cp_; }         // rows per rank: two chunks
  // The chunk this rank's local half (0: rows [0, chunk), 1: [chunk, 2·chunk)) is.
  int ChunkOf(int half) const { return half == 0 ? rank_ : 2 * cp_ - 1 - rank_; }
  // The global position (row of the whole sequence) of local row i, 0 <= i < rows(): for the
  // causal mask and RoPE's angles.
  int Position(int i) const;
  std::vector<int> Positions() const;

  // This rank's rows of each of B sequences of a (B, T, w) tensor: full → local (B, rows, w).
  // (Tokens: w 1.)
  void Take(const float* full, float* local, int B, int64_t w) const { Copy(full, local, B, w * sizeof(float), true); }
  void Take(const int32_t* full, int32_t* local, int B, int64_t w) const {
    Copy(full, local, B, w * sizeof(int32_t), true);
  }
  // The reverse: local (B, rows, w) → this rank's rows of full (B, T, w) (the others untouched).
  void Put(const float* local, float* full, int B, int64_t w) const { Copy(local, full, B, w * sizeof(float), false); }

 private:
  CpSharding(int T, int cp, int rank) : T_(T), cp_(cp), rank_(rank) {}
  // Take (take) or Put of rows `row_bytes` wide.
  void Copy(const void* from, void* to, int B, int64_t row_bytes, bool take) const;
  int T_, cp_, rank_;
};

// The heads of one rank's attention: NH query heads over NKV key/value heads of hd.
struct AttentionHeads {
  int B = 0, NH = 0, NKV = 0, hd = 0;
  float scale = 0.f;  // the scores' factor; 0 is 1/sqrt(hd)
  // The type the model keeps K and V in: bf16 or fp16 (the ring's fp32 operands are their
  // values widened, so rounding them back is exact) travel in it; fp32 as they are.
  kernels::Precision kv_type = kernels::Precision::kFp32;
  int qkv_width() const { return (NH + 2 * NKV) * hd; }
  int out_width() const { return NH * hd; }
};

class RingAttention {
 public:
  // ring: the context-parallel group's communication thread (not owned), its communicator's
  // rank and size those of shard; it may be null where cp is 1 (nothing is exchanged). be: the
  // backend whose memory every pointer below is, and whose ops compute (not owned).
  RingAttention(comm::CommThread* ring, CpSharding shard, kernels::Backend* be = &kernels::CpuBackend())
      : ring_(ring), shard_(shard), be_(be) {}

  // Pointers are be's. qkv (B, rows, (NH + 2·NKV)·hd): this rank's rows in the grouped layout of
  // kernels/gqa.h (query heads, key heads, value heads), RoPE already applied at the rows'
  // positions → out (B, rows, NH·hd), lse (B, NH, rows): each row's attention over the
  // sequence's rows up to its position, and its log-sum-exp (the backward's input).
  absl::Status Forward(float* out, float* lse, const float* qkv, const AttentionHeads& heads);
  // dout (B, rows, NH·hd), with the forward's qkv, out and lse → dqkv (B, rows, (NH + 2·NKV)·hd),
  // overwritten: the query heads' gradient, and the key/value heads' summed over every rank's
  // queries that read them.
  absl::Status Backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const AttentionHeads& heads);

  const CpSharding& shard() const { return shard_; }
  // 4-byte words this rank sent in the last Forward or Backward (a 16-bit block's two values a
  // word), and the seconds it waited for the exchanges there (what the computing did not hide).
  size_t floats_sent() const { return floats_sent_; }
  double waited_seconds() const { return waited_; }
  // The blocks this ring computed so far (each a block op on the backend), forward and backward:
  // what a test holds a backend's record of its paths to (e.g. cuDNN's executions).
  struct Blocks {
    int64_t forward = 0, backward = 0;
  };
  Blocks blocks() const { return blocks_; }
  // Bytes of the working memory (be's) the calls so far allocated (kept between calls, at the
  // largest (B, heads) seen): what the model's memory account adds for the ring, and what
  // jobspec's planner counts (RingCpBytes).
  size_t bytes() const;

 private:
  absl::Status Check(const AttentionHeads& heads) const;
  // Queues, on the ring, sending n floats at send to rank + 1 and receiving n at recv from
  // rank − 1; the ticket to wait for.
  uint64_t Exchange(const float* send, float* recv, size_t n);
  // Waits for exchange `ticket`, counting the time in waited_.
  absl::Status Wait(uint64_t ticket);
  // The K/V blocks round the ring, n floats each: StartKv packs this rank's from qkv (step 0's
  // block), KvBlock(s) is step s's in fp32 (widened from the wire's type where that is 16-bit),
  // PassKv(s) queues step s's block on to rank + 1 and the receiving of step s + 1's.
  void StartKv(const float* qkv, const AttentionHeads& a, size_t n);
  const float* KvBlock(int s);
  uint64_t PassKv(int s);

  // buf holds at least n floats of be_'s memory (its contents are not kept when it grows).
  void Ensure(kernels::DeviceBuffer& buf, size_t n);

  comm::CommThread* ring_;
  CpSharding shard_;
  kernels::Backend* be_;
  size_t floats_sent_ = 0;
  double waited_ = 0;
  Blocks blocks_;
  // Working memory of be_, kept between calls at the largest size seen: the K/V blocks (this
  // one and the next; 16-bit: the one computed with), the backward's D, and dK/dV (this step's
  // two, the one arriving); 16-bit K/V: the blocks as they travel (this one and the next), of
  // kv_type_, two values a float.
  kernels::DeviceBuffer kv_[2], delta_, dkv_[2], dkv_in_, wire_[2];
  kernels::Precision kv_type_ = kernels::Precision::kFp32;
  size_t kv_n_ = 0;  // floats of a K/V block
};

}  // namespace gantry::model
