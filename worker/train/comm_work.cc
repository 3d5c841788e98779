#include "worker/train/comm_work.h"

#include <algorithm>

#include "common/status.h"
#include "kernels/types.h"

namespace gantry::train {

float* BufferPool::Take(size_t n, kernels::Backend* on) {
  std::lock_guard<std::mutex> l(mu_);
  Slot* best = nullptr;
  for (auto& s : slots_) {
    if (!s->used && s->buf.size() >= n && s->buf.size() <= n + n / 4 && (!best || s->buf.size() < best->buf.size())) {
      best = s.get();
    }
  }
  if (!best) {
    slots_.push_back(std::make_unique<Slot>());
    best = slots_.back().get();
    best->buf.Assign(on, n, /*zero=*/false);  // every taker writes the whole buffer before reading it
  }
  best->used = true;
  return best->buf.data();
}

void BufferPool::Give(float* p) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& s : slots_) {
    if (s->buf.data() == p) s->used = false;
  }
}

void BufferPool::ReleaseFree() {
  std::lock_guard<std::mutex> l(mu_);
  std::erase_if(slots_, [](const std::unique_ptr<Slot>& s) { return !s->used; });
}

size_t BufferPool::allocated_bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  size_t b = 0;
  for (const auto& s : slots_) b += s->buf.size() * sizeof(float);
  return b;
}

absl::StatusOr<std::unique_ptr<CommWork>> CommWork::Create(kernels::Backend* model_backend) {
  std::unique_ptr<CommWork> w(new CommWork(model_backend));
  if (!model_backend->Supports(kernels::Capability::kHostAddressable)) {
    auto peer = model_backend->NewPeer();
    if (!peer.ok()) return Annotate(peer.status(), "a backend for the communication thread");
    w->peer_ = std::move(*peer);
  }
  return w;
}

CommWork::~CommWork() = default;

void CommWork::Scale(float* p, size_t n, float s) {
  if (peer_) {
    peer_->Scale(p, static_cast<int64_t>(n), s);
    return;
  }
  for (size_t i = 0; i < n; ++i) p[i] *= s;
}

void CommWork::Add(float* dst, const float* src, size_t n) {
  if (peer_) {
    peer_->ResidualForward(dst, dst, src, static_cast<int64_t>(n));
    return;
  }
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

void CommWork::Copy(float* dst, const float* src, size_t n) {
  if (peer_) {
    peer_->Copy(dst, src, n * sizeof(float));
    return;
  }
  std::copy(src, src + n, dst);
}

void CommWork::Zero(float* p, size_t n) {
  if (peer_) {
    peer_->Zero(p, n * sizeof(float));
    return;
  }
  std::fill(p, p + n, 0.f);
}

void CommWork::ToBf16(uint16_t* dst, const float* src, size_t n, size_t padded) {
  if (peer_) {
    peer_->CastToBf16(dst, src, static_cast<int64_t>(n));
    if (padded > n) peer_->Zero(dst + n, (padded - n) * sizeof(uint16_t));
    return;
  }
  for (size_t i = 0; i < n; ++i) dst[i] = kernels::Bf16Of(src[i]);
  std::fill(dst + n, dst + padded, uint16_t{0});
}

void CommWork::FromBf16(float* dst, const uint16_t* src, size_t n) {
  if (peer_) {
    peer_->CastFromBf16(dst, src, static_cast<int64_t>(n));
    return;
  }
  for (size_t i = 0; i < n; ++i) dst[i] = kernels::FloatOfBf16(src[i]);
}

uint16_t* CommWork::TakeBf16(size_t n) {
  // The pool hands out floats: two bf16 values each.
  return reinterpret_cast<uint16_t*>(pool_.Take((n + 1) / 2, backend()));
}

void CommWork::GiveBf16(uint16_t* p) { pool_.Give(reinterpret_cast<float*>(p)); }

absl::Status CommWork::Sync() { return peer_ ? peer_->Synchronize() : absl::OkStatus(); }

absl::Status CommWork::Reduce(comm::Communicator& dp, const BucketReduction& r) {
  comm::Communicator& c = r.group != nullptr ? *r.group : dp;
  switch (r.kind) {
    case BucketReduction::Kind::kAllReduceMean:
      return AllReduceMean(c, r.grads + r.begin, r.end - r.begin, r.inv, r.bf16);
    case BucketReduction::Kind::kReduceScatterMean:
      return ReduceScatterMean(c, r.grads, r.begin, r.end, r.piece, r.pb, r.pe, r.inv, r.bf16);
    case BucketReduction::Kind::kReduceScatterAccumulate:
      return ReduceScatterAccumulate(c, r.work, r.shard, r.piece, r.first, r.inv, r.bf16);
  }
  return absl::InternalError("a bucket reduction of no known kind");
}

absl::Status CommWork::AllReduceMean(comm::Communicator& c, float* g, size_t n, float inv, bool bf16) {
  if (c.size() == 1) {  // an expert range held by this rank alone: only the mean's scale
    Scale(g, n, inv);
    return Sync();
  }
  absl::Status s;
  uint16_t* h = nullptr;
  if (bf16) {
    h = TakeBf16(n);
    ToBf16(h, g, n, n);
    s = Sync();  // the staging written before the collective reads it
    s.Update(c.AllReduceSumBf16(h, n));
    FromBf16(g, h, n);
  } else {
    s = c.AllReduceSum(g, n);
  }
  Scale(g, n, inv);
  s.Update(Sync());
  if (h != nullptr) GiveBf16(h);
  return s;
}

absl::Status CommWork::ReduceScatterMean(comm::Communicator& c, float* grads, size_t begin, size_t end, size_t piece,
                                         size_t pb, size_t pe, float inv, bool bf16) {
  const size_t dp = static_cast<size_t>(c.size());
  if (dp == 1) {  // an expert range held by this rank alone: its own piece, only the mean's scale
    Scale(grads + begin, end - begin, inv);
    return Sync();
  }
  if (bf16) {
    // The bucket padded to dp pieces in bf16, reduce-scattered in place; the own piece
    // widened back into the gradients.
    uint16_t* staged = TakeBf16(piece * dp);
    uint16_t* own = staged + piece * static_cast<size_t>(c.rank());
    ToBf16(staged, grads + begin, end - begin, piece * dp);
    absl::Status s = Sync();
    s.Update(c.ReduceScatterSumBf16(staged, own, piece));
    FromBf16(grads + pb, own, pe - pb);
    Scale(grads + pb, pe - pb, inv);
    s.Update(Sync());
    GiveBf16(staged);
    return s;
  }
  // The bucket padded to dp pieces; the own piece is reduced in place (through a scratch
  // piece when it is the short last one).
  float* staged = pool_.Take(piece * dp, backend());
  Copy(staged, grads + begin, end - begin);
  Zero(staged + (end - begin), piece * dp - (end - begin));
  float* out = pe - pb == piece ? grads + pb : pool_.Take(piece, backend());
  absl::Status s = Sync();  // staged before the collective reads it
  s.Update(c.ReduceScatterSum(staged, out, piece));
  if (out != grads + pb) Copy(grads + pb, out, pe - pb);
  Scale(grads + pb, pe - pb, inv);
  s.Update(Sync());
  if (out != grads + pb) pool_.Give(out);
  pool_.Give(staged);
  return s;
}

absl::Status CommWork::ReduceScatterAccumulate(comm::Communicator& c, float* work, float* shard, size_t piece,
                                               bool first, float inv, bool bf16) {
  const size_t dp = static_cast<size_t>(c.size());
  if (bf16) {
    // work rounded into the staging, reduce-scattered in place; once rounded, work's fp32
    // values are spent and it takes the widened piece.
    uint16_t* staged = TakeBf16(piece * dp);
    uint16_t* own = staged + piece * static_cast<size_t>(c.rank());
    ToBf16(staged, work, piece * dp, piece * dp);
    absl::Status s = Sync();
    s.Update(c.ReduceScatterSumBf16(staged, own, piece));
    float* out = first ? shard : work;
    FromBf16(out, own, piece);
    Scale(out, piece, inv);
    if (!first) Add(shard, out, piece);  // the accumulation, in fp32
    s.Update(Sync());
    GiveBf16(staged);
    pool_.Give(work);
    return s;
  }
  float* out = first ? shard : pool_.Take(piece, backend());
  absl::Status s = c.ReduceScatterSum(work, out, piece);
  Scale(out, piece, inv);
  if (!first) Add(shard, out, piece);
  s.Update(Sync());
  if (!first) pool_.Give(out);
  pool_.Give(work);
  return s;
}

}  // namespace gantry::train
