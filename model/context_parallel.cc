#include "model/context_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/attention_block.h"
#include "kernels/gqa.h"

namespace gantry::model {

absl::StatusOr<CpSharding> CpSharding::Make(int T, int cp, int rank) {
  if (cp < 1) return absl::InvalidArgumentError(absl::StrCat("context parallelism cp ", cp, ": must be at least 1"));
  if (rank < 0 || rank >= cp) {
    return absl::InvalidArgumentError(absl::StrCat("context-parallel rank ", rank, " is not one of cp ", cp, "'s ranks"));
  }
  if (T <= 0 || T % (2 * cp) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("sequence length ", T, " is not a positive multiple of 2·cp = ",
                                                   2 * cp, " (cp ", cp,
                                                   " cuts each sequence into 2·cp equal chunks, two per rank)"));
  }
  return CpSharding(T, cp, rank);
}

int CpSharding::Position(int i) const { return ChunkOf(i / chunk()) * chunk() + i % chunk(); }

std::vector<int> CpSharding::Positions() const {
  std::vector<int> p(static_cast<size_t>(rows()));
  for (int i = 0; i < rows(); ++i) p[static_cast<size_t>(i)] = Position(i);
  return p;
}

void CpSharding::Copy(const void* from, void* to, int B, int64_t row_bytes, bool take) const {
  // take: full (B, T, w) → local (B, rows, w); else the reverse, this rank's rows
  const int64_t n = static_cast<int64_t>(chunk()) * row_bytes;
  for (int b = 0; b < B; ++b) {
    for (int half = 0; half < 2; ++half) {
      const int64_t local = (static_cast<int64_t>(b) * rows() + half * chunk()) * row_bytes;
      const int64_t full = (static_cast<int64_t>(b) * T_ + ChunkOf(half) * chunk()) * row_bytes;
      std::memcpy(static_cast<char*>(to) + (take ? local : full),
                  static_cast<const char*>(from) + (take ? full : local), static_cast<size_t>(n));
    }
  }
}

namespace {

// A rank's K/V block as it travels: each row's key heads then value heads, (B, rows, 2·NKV·hd).
// Copied out of qkv's rows (pack) or into them (the gradient's, unpack), on the backend.
void PackKv(kernels::Backend& be, float* kv, const float* qkv, const AttentionHeads& a, int rows) {
  const int W = a.qkv_width(), q = a.NH * a.hd, KV = 2 * a.NKV * a.hd;
  be.CopyRows(kv, KV, qkv + q, W, KV, static_cast<int64_t>(a.B) * rows);
}
void UnpackKv(kernels::Backend& be, float* dqkv, const float* dkv, const AttentionHeads& a, int rows) {
  const int W = a.qkv_width(), q = a.NH * a.hd, KV = 2 * a.NKV * a.hd;
  be.CopyRows(dqkv + q, W, dkv, KV, KV, static_cast<int64_t>(a.B) * rows);
}

// The chunk pairs of one ring step: this rank's half qh of the query rows against half kh of
// the block of rank src. Wholly above the diagonal (the key chunk after the query chunk): not
// computed; the same chunk: causal; before it: every key seen.
struct Pair {
  int qh, kh;
  bool causal;
};
std::vector<Pair> Pairs(const CpSharding& s, int src) {
  std::vector<Pair> pairs;
  const int cp = s.cp();
  for (int qh = 0; qh < 2; ++qh) {
    for (int kh = 0; kh < 2; ++kh) {
      const int cq = s.ChunkOf(qh), ck = kh == 0 ? src : 2 * cp - 1 - src;
      if (ck <= cq) pairs.push_back({qh, kh, ck == cq});
    }
  }
  return pairs;
}

}  // namespace

absl::Status RingAttention::Check(const AttentionHeads& a) const {
  if (a.B <= 0) return absl::InvalidArgumentError(absl::StrCat("ring attention: batch ", a.B, " is not positive"));
  RETURN_IF_ERROR(kernels::CheckGroups("ring attention", a.NH, a.NKV, a.hd));
  if (shard_.cp() == 1) return absl::OkStatus();
  if (ring_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("ring attention over cp ", shard_.cp(), " has no communication thread for its group"));
  }
  const comm::Communicator& c = ring_->comm();
  if (c.size() != shard_.cp() || c.rank() != shard_.rank()) {
    return absl::FailedPreconditionError(absl::StrCat("ring attention for rank ", shard_.rank(), " of cp ", shard_.cp(),
                                                      " was given the communicator of rank ", c.rank(), " of ",
                                                      c.size()));
  }
  return absl::OkStatus();
}

void RingAttention::Ensure(kernels::DeviceBuffer& buf, size_t n) {
  if (buf.size() < n) buf.Assign(be_, n, /*zero=*/false);
}

uint64_t RingAttention::Exchange(const float* send, float* recv, size_t n) {
  const int cp = shard_.cp(), r = shard_.rank();
  floats_sent_ += n;
  return ring_->Submit([send, recv, n, to = (r + 1) % cp, from = (r + cp - 1) % cp](comm::Communicator& c) {
    return c.SendRecv(send, n, to, recv, n, from);
  });
}

absl::Status RingAttention::Wait(uint64_t ticket) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = ring_->Wait(ticket);
  waited_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

void RingAttention::StartKv(const float* qkv, const AttentionHeads& a, size_t n) {
  // (cp 1: nothing travels, the block is computed with as it is.)
  kv_type_ = shard_.cp() > 1 ? a.kv_type : kernels::Precision::kFp32;
  kv_n_ = n;
  Ensure(kv_[0], n);
  PackKv(*be_, kv_[0].data(), qkv, a, shard_.rows());
  if (kv_type_ == kernels::Precision::kFp32) {
    if (shard_.cp() > 1) Ensure(kv_[1], n);
    return;
  }
  // 16-bit: the block rounded to its type for the wire (exact where, as the model's are, the
  // values are the type's widened); every step, the first too, computes with the wire's values.
  // Two values a float of the wire's buffers (a block's floats, 2·NKV·hd a row, are even).
  for (auto& w : wire_) Ensure(w, n / 2);
  be_->Convert(kernels::Ptr(wire_[0].data(), kv_type_), kernels::CPtr(kv_[0].data()), static_cast<int64_t>(n));
}

const float* RingAttention::KvBlock(int s) {
  if (kv_type_ == kernels::Precision::kFp32) return kv_[s % 2].data();
  be_->Convert(kernels::Ptr(kv_[0].data()), kernels::CPtr(wire_[s % 2].data(), kv_type_), static_cast<int64_t>(kv_n_));
  return kv_[0].data();
}

uint64_t RingAttention::PassKv(int s) {
  if (kv_type_ == kernels::Precision::kFp32) return Exchange(kv_[s % 2].data(), kv_[(s + 1) % 2].data(), kv_n_);
  // Two 16-bit values a 4-byte word: the communicator moves the words' bytes as they are.
  return Exchange(wire_[s % 2].data(), wire_[(s + 1) % 2].data(), kv_n_ / 2);
}

size_t RingAttention::bytes() const {
  size_t n = 0;
  for (const auto* v : {&kv_[0], &kv_[1], &delta_, &dkv_[0], &dkv_[1], &dkv_in_, &wire_[0], &wire_[1]}) {
    n += v->size() * sizeof(float);
  }
  return n;
}

absl::Status RingAttention::Forward(float* out, float* lse, const float* qkv, const AttentionHeads& a) {
  // qkv (B, rows, (NH + 2 NKV) hd) → out (B, rows, NH hd), lse (B, NH, rows)
  RETURN_IF_ERROR(Check(a));
  const int cp = shard_.cp(), rows = shard_.rows(), L = shard_.chunk();
  const int W = a.qkv_width(), C = a.out_width(), KV = 2 * a.NKV * a.hd;
  const size_t kv_n = static_cast<size_t>(a.B) * rows * KV;
  StartKv(qkv, a, kv_n);
  floats_sent_ = 0;
  waited_ = 0;
  bool started[2] = {false, false};  // a query half's first block overwrites out and lse
  for (int s = 0; s < cp; ++s) {
    // The next block arrives while this one is computed: once the backend has written this
    // block (the pack) and done reading the one it arrives over (the step before's).
    uint64_t next = 0;
    if (s + 1 < cp) {
      RETURN_IF_ERROR(be_->Synchronize());
      next = PassKv(s);
    }
    const float* kv = KvBlock(s);
    const int src = (shard_.rank() + cp - s) % cp;
    for (const Pair& p : Pairs(shard_, src)) {
      const kernels::HeadRows<const float> k{kv + static_cast<int64_t>(p.kh) * L * KV,
                                             static_cast<int64_t>(rows) * KV, KV};
      const kernels::HeadRows<const float> v{k.data + a.NKV * a.hd, k.seq, k.row};
      kernels::AttentionBlock block{a.B, a.NH, a.NKV, a.hd, L, L, p.causal, a.scale};
      block.first = !started[p.qh];
      block.values = a.kv_type;  // 16-bit operands: the backend's 16-bit path (cuDNN) where it has one
      started[p.qh] = true;
      const kernels::HeadRows<float> o{out + static_cast<int64_t>(p.qh) * L * C, static_cast<int64_t>(rows) * C, C};
      const kernels::RowStats<float> l{lse + static_cast<int64_t>(p.qh) * L, rows};
      const kernels::HeadRows<const float> q{qkv + static_cast<int64_t>(p.qh) * L * W, static_cast<int64_t>(rows) * W,
                                             W};
      be_->AttentionBlockForward(o, l, q, k, v, block);
      ++blocks_.forward;
    }
    if (next != 0) RETURN_IF_ERROR(Wait(next));
  }
  return absl::OkStatus();
}

absl::Status RingAttention::Backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                                     const float* lse, const AttentionHeads& a) {
  // dout (B, rows, NH hd), qkv, out, lse → dqkv (B, rows, (NH + 2 NKV) hd)
  RETURN_IF_ERROR(Check(a));
  const int cp = shard_.cp(), rows = shard_.rows(), L = shard_.chunk();
  const int W = a.qkv_width(), C = a.out_width(), KV = 2 * a.NKV * a.hd;
  const size_t kv_n = static_cast<size_t>(a.B) * rows * KV;
  StartKv(qkv, a, kv_n);
  for (auto& g : dkv_) Ensure(g, kv_n);
  Ensure(dkv_in_, kv_n);
  Ensure(delta_, static_cast<size_t>(a.B) * a.NH * rows);
  be_->AttentionBlockDelta({delta_.data(), rows}, {dout, static_cast<int64_t>(rows) * C, C},
                           {out, static_cast<int64_t>(rows) * C, C}, a.B, a.NH, a.hd, rows);
  // dQ is added straight into dqkv's query columns; its key/value columns are written last.
  be_->Zero(dqkv, static_cast<size_t>(a.B) * rows * W * sizeof(float));
  floats_sent_ = 0;
  waited_ = 0;
  uint64_t dkv_home = 0;  // the exchange bringing the previous step's dK/dV from rank − 1
  for (int s = 0; s < cp; ++s) {
    uint64_t next = 0;
    if (s + 1 < cp) {
      RETURN_IF_ERROR(be_->Synchronize());  // this block written, the one it arrives over read
      next = PassKv(s);
    }
    const float* kv = KvBlock(s);
    // This step's share of the block's dK/dV, apart from what the ranks before added: their
    // sum arrives meanwhile (the previous step's exchange), and is added after.
    float* g = dkv_[s % 2].data();
    be_->Zero(g, kv_n * sizeof(float));
    const int src = (shard_.rank() + cp - s) % cp;
    for (const Pair& p : Pairs(shard_, src)) {
      const int64_t ko = static_cast<int64_t>(p.kh) * L * KV, kseq = static_cast<int64_t>(rows) * KV;
      const int64_t vo = ko + a.NKV * a.hd;
      const int64_t qo = static_cast<int64_t>(p.qh) * L;
      const kernels::HeadRows<float> dq{dqkv + qo * W, static_cast<int64_t>(rows) * W, W}, dk{g + ko, kseq, KV},
          dv{g + vo, kseq, KV};
      const kernels::HeadRows<const float> q{qkv + qo * W, static_cast<int64_t>(rows) * W, W}, k{kv + ko, kseq, KV},
          v{kv + vo, kseq, KV}, d_o{dout + qo * C, static_cast<int64_t>(rows) * C, C};
      const kernels::RowStats<const float> l{lse + qo, rows}, D{delta_.data() + qo, rows};
      kernels::AttentionBlock block{a.B, a.NH, a.NKV, a.hd, L, L, p.causal, a.scale};
      block.values = a.kv_type;
      // From the rows' merged output and log-sum-exps: the block's exact share.
      be_->AttentionBlockBackward(dq, dk, dv, q, k, v, d_o, {out + qo * C, static_cast<int64_t>(rows) * C, C}, l, D,
                                  block);
      ++blocks_.backward;
    }
    if (dkv_home != 0) {
      RETURN_IF_ERROR(Wait(dkv_home));
      be_->ResidualForward(g, g, dkv_in_.data(), static_cast<int64_t>(kv_n));
    }
    if (next != 0) RETURN_IF_ERROR(Wait(next));
    // On to rank + 1, the next to hold this block (after the last step: its owner), once the
    // backend has written it and read what arrived before.
    if (cp > 1) {
      RETURN_IF_ERROR(be_->Synchronize());
      dkv_home = Exchange(g, dkv_in_.data(), kv_n);
    }
  }
  if (cp > 1) RETURN_IF_ERROR(Wait(dkv_home));
  UnpackKv(*be_, dqkv, cp > 1 ? dkv_in_.data() : dkv_[0].data(), a, rows);
  return absl::OkStatus();
}

}  // namespace gantry::model
