// The ZeRO engine against a scripted peer: a two-rank communicator whose other rank holds
// the same gradients (so every sum is twice this rank's), to check how the engine drives
// collectives rather than their transport: buckets reduced while backward is still running,
// every bucket reduced once per step (stages 0, 1) or per micro-batch (stages 2, 3), and the
// step's result that of one process.
#include "worker/train/zero.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/rng.h"
#include "kernels/cast.h"
#include "kernels/emulated/cuda_api.h"
#include "kernels/grad_norm.h"
#include "kernels/threads.h"
#include "tests/test_util.h"

namespace gantry::train {
namespace {

// Rank 0 of 2; the peer mirrors this rank. A reduction can be made to hold until backward
// has finished (hold_until_backward_done): if it then saw backward still running when it
// started, the two ran at the same time.
class MirrorCommunicator final : public comm::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  uint64_t seq() const override { return seq_; }
  uint64_t completed() const override { return seq_; }
  absl::Status AllReduceSum(float* data, size_t n) override {
    Reduction();
    for (size_t i = 0; i < n; ++i) data[i] *= 2;
    return Next();
  }
  absl::Status ReduceScatterSum(const float* in, float* out, size_t n) override {
    Reduction();
    for (size_t i = 0; i < n; ++i) out[i] = 2 * in[i];  // rank 0's block, summed over both
    return Next();
  }
  absl::Status AllGather(const float* in, float* out, size_t n) override {
    // The peer's piece is not this rank's to know: the engine must only read its own back
    // for the parameters this test checks, so the peer's half is filled with this rank's.
    std::copy(in, in + n, out);
    std::copy(in, in + n, out + n);
    return Next();
  }
  // The peer's chunk for rank 0 is, mirrored, rank 0's own: both halves of out are chunk 0,
  // as AllGather's are.
  absl::Status AllToAll(const float* in, float* out, size_t n) override { return AllGather(in, out, n); }
  absl::Status AllToAllV(const float* in, const std::vector<size_t>& send_counts, float* out,
                         const std::vector<size_t>&) override {
    return AllGather(in, out, send_counts[0]);
  }
  absl::Status AllReduceSumBf16(uint16_t* data, size_t n) override {
    Reduction();
    for (size_t i = 0; i < n; ++i) data[i] = kernels::Bf16Of(2 * kernels::FloatOfBf16(data[i]));  // exact
    return Next();
  }
  absl::Status ReduceScatterSumBf16(const uint16_t* in, uint16_t* out, size_t n) override {
    Reduction();
    for (size_t i = 0; i < n; ++i) out[i] = kernels::Bf16Of(2 * kernels::FloatOfBf16(in[i]));
    return Next();
  }
  absl::Status Broadcast(float*, size_t, int) override { return Next(); }
  absl::Status Send(const float*, size_t, int) override { return Next(); }
  absl::Status Recv(float*, size_t, int) override { return Next(); }
  absl::Status Barrier() override { return Next(); }
  void Abort() override {}

  void BackwardDone() {
    std::lock_guard<std::mutex> l(mu_);
    backward_done_ = true;
    cv_.notify_all();
  }
  bool hold_until_backward_done = false;
  std::atomic<int> reductions{0}, during_backward{0};

 private:
  void Reduction() {
    ++reductions;
    std::unique_lock<std::mutex> l(mu_);
    if (!backward_done_) ++during_backward;
    if (hold_until_backward_done) cv_.wait_for(l, std::chrono::seconds(10), [&] { return backward_done_; });
  }
  absl::Status Next() {
    ++seq_;
    return absl::OkStatus();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool backward_done_ = false;
  std::atomic<uint64_t> seq_{0};
};

// Between the engine and the model: once backward is done with unit 1 (only the embeddings'
// backward is left), waits until a reduction has started, so the overlap is not left to
// thread timing.
class WaitForFirstReduction final : public model::ParamHost {
 public:
  WaitForFirstReduction(model::ParamHost* engine, MirrorCommunicator* comm) : engine_(engine), comm_(comm) {}
  float* AcquireParams(int u) override { return engine_->AcquireParams(u); }
  void ReleaseParams(int u) override { engine_->ReleaseParams(u); }
  float* AcquireGrads(int u) override { return engine_->AcquireGrads(u); }
  void GradsDone(int u) override {
    engine_->GradsDone(u);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (u == 1 && comm_->reductions.load() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  }

 private:
  model::ParamHost* engine_;
  MirrorCommunicator* comm_;
};

jobspec::GPTConfig Config() { return {.max_seq_len = 16, .vocab_size = 64, .n_layer = 4, .n_head = 2, .n_embd = 32}; }

// "cpu" (the process's), or a new "cuda-emulated" backend held by *owned; null if it fails.
kernels::Backend* BackendNamed(const std::string& device, std::unique_ptr<kernels::Backend>* owned) {
  if (device == "cpu") return &kernels::CpuBackend();
  auto b = kernels::CreateBackend(kernels::BackendKind::kCudaEmulated);
  EXPECT_TRUE(b.ok()) << b.status();
  if (!b.ok()) return nullptr;
  *owned = std::move(*b);
  return owned->get();
}

std::vector<int32_t> Tokens(int n, uint64_t seed) {
  Rng r(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(r.Below(64));
  return t;
}

TEST(ZeroEngineTest, BucketsAreReducedWhileBackwardRuns) {
  kernels::ConfigureThreads(1);
  for (int stage : {0, 1}) {
    model::GPT m(Config());
    m.InitRandom(1);
    MirrorCommunicator comm;
    comm.hold_until_backward_done = true;
    auto e = ZeroEngine::Create(&m, &comm, stage, /*bucket_mb=*/0.01, kernels::AdamWConfig{});
    ASSERT_TRUE(e.ok()) << e.status();
    (*e)->Shard();
    WaitForFirstReduction host(e->get(), &comm);
    m.set_param_host(&host);
    const auto in = Tokens(4 * 16, 2), tg = Tokens(4 * 16, 3);
    m.ZeroGrad();
    (*e)->BeginMicroBatch(0, 1);
    m.ForwardBackward(in.data(), tg.data(), 4, 16, 1.f);
    comm.BackwardDone();
    ASSERT_TRUE((*e)->FinishStep(1.0, 1e-3, 1, 1.0).ok());
    // 6 units in buckets of ~10 KB (a layer is ~50 KB): one reduction per unit, the first
    // of which started while backward had five more units to go.
    EXPECT_GE(comm.reductions.load(), 6) << "stage " << stage;
    EXPECT_GE(comm.during_backward.load(), 1) << "stage " << stage << ": no reduction overlapped backward";
    m.set_param_host(e->get());
  }
}

TEST(ZeroEngineTest, ReductionsPerStepFollowTheStage) {
  kernels::ConfigureThreads(1);
  const int accum = 3;
  for (int stage : {0, 1, 2, 3}) {
    model::GPT m(Config());
    m.InitRandom(1);
    MirrorCommunicator comm;
    auto e = ZeroEngine::Create(&m, &comm, stage, /*bucket_mb=*/1000, kernels::AdamWConfig{});  // one bucket (stage 3: one per unit)
    ASSERT_TRUE(e.ok());
    (*e)->Shard();
    const auto in = Tokens(2 * 16, 2), tg = Tokens(2 * 16, 3);
    m.ZeroGrad();
    for (int micro = 0; micro < accum; ++micro) {
      (*e)->BeginMicroBatch(micro, accum);
      m.ForwardBackward(in.data(), tg.data(), 2, 16, 1.f / accum);
    }
    ASSERT_TRUE((*e)->FinishStep(1.0, 1e-3, 1, 1.0).ok());
    // Stages 0 and 1 reduce the one bucket once (after the last micro-batch: no
    // communication before it), stages 2 and 3 every bucket every micro-batch; FinishStep
    // adds the one all-reduce of (norm, loss) for the group.
    const int units = m.num_units();
    const int want[] = {1, 1, accum, accum * units};
    EXPECT_EQ(comm.reductions.load(), want[stage] + 1) << "stage " << stage;
  }
}

// train.grad_reduce_dtype bf16 against the mirror, whose sums double exactly: the doubling
// and the 1/dp scale are exact in bf16 and fp32, so the reduced gradient the optimizer sees is
// each local fp32 gradient rounded to bf16 (to nearest, ties to even), on every element this
// rank owns (stage 1: its pieces of many small buckets, the short last ones included), while
// the fp32 reduction gives the local gradients back. Stage 1 leaves the gradients outside its
// pieces as backward wrote them. Each bucket is reduced once, as in fp32.
TEST(ZeroEngineTest, Bf16ReductionGivesTheLocalGradientsRoundedToBf16) {
  kernels::ConfigureThreads(1);
  for (int stage : {0, 1}) {
    SCOPED_TRACE(stage);
    std::vector<float> grads[2];
    int reductions[2] = {0, 0};
    std::vector<std::pair<size_t, size_t>> own;
    for (bool bf16 : {false, true}) {
      model::GPT m(Config());
      m.InitRandom(1);
      MirrorCommunicator comm;
      auto e = ZeroEngine::Create(&m, &comm, stage, /*bucket_mb=*/0.01, kernels::AdamWConfig{});
      ASSERT_TRUE(e.ok()) << e.status();
      (*e)->set_grad_reduce_bf16(bf16);
      EXPECT_EQ((*e)->grad_reduce_bf16(), bf16);
      (*e)->Shard();
      const auto in = Tokens(2 * 16, 2), tg = Tokens(2 * 16, 3);
      m.ZeroGrad();
      (*e)->BeginMicroBatch(0, 1);
      m.ForwardBackward(in.data(), tg.data(), 2, 16, 1.f);
      ASSERT_TRUE((*e)->FinishStep(1.0, 1e-3, 1, /*grad_clip=*/0).ok());  // no clip: the gradients as reduced
      grads[bf16].assign(m.grads(), m.grads() + m.num_params());
      reductions[bf16] = comm.reductions.load();
      if (stage == 0) {
        own = {{0, m.num_params()}};
      } else if (bf16) {
        auto pieces = (*e)->CheckpointPieces();  // ZeRO 1: the pieces this rank owns
        ASSERT_TRUE(pieces.ok()) << pieces.status();
        own.clear();
        for (const auto& p : *pieces) own.push_back({p.flat_begin, p.flat_end});
      }
    }
    EXPECT_EQ(reductions[1], reductions[0]);
    EXPECT_GE(reductions[1], 6) << "one bucket a unit";
    std::vector<bool> owned(grads[0].size(), false);
    size_t rounded = 0;
    for (const auto& [b, e] : own) {
      for (size_t i = b; i < e; ++i) {
        owned[i] = true;
        ASSERT_EQ(grads[1][i], kernels::RoundToBf16(grads[0][i])) << "element " << i << " (fp32 " << grads[0][i] << ")";
        rounded += grads[1][i] != grads[0][i];
      }
    }
    EXPECT_GT(rounded, grads[0].size() / 4) << "most fp32 gradients are not bf16 values";
    if (stage == 1) {
      size_t outside = 0;
      for (size_t i = 0; i < owned.size(); ++i) {
        if (owned[i]) continue;
        ++outside;
        ASSERT_EQ(grads[1][i], grads[0][i]) << "element " << i << " is another rank's piece: not written here";
      }
      EXPECT_GT(outside, grads[0].size() / 3);
    }
  }
}

// ZeRO 3 gathers the next unit while the current one computes: in forward each layer and the
// head find their gather launched by the unit before them (the first unit and the
// classifier's second use of the embedding cannot be foreseen), in backward each layer below
// the top one; what the step computes is bit for bit the same as gathering on demand.
TEST(ZeroEngineTest, ZeroThreeGathersTheNextUnitAheadWithTheSameResult) {
  kernels::ConfigureThreads(1);
  std::vector<std::vector<float>> params;
  for (bool prefetch : {true, false}) {
    model::GPT m(Config());
    m.InitRandom(1);
    MirrorCommunicator comm;
    auto e = ZeroEngine::Create(&m, &comm, 3, /*bucket_mb=*/1000, kernels::AdamWConfig{});
    ASSERT_TRUE(e.ok());
    (*e)->Shard();
    (*e)->set_prefetch(prefetch);
    const auto in = Tokens(2 * 16, 2), tg = Tokens(2 * 16, 3);
    m.ZeroGrad();
    (*e)->BeginMicroBatch(0, 1);
    m.ForwardBackward(in.data(), tg.data(), 2, 16, 1.f);
    ASSERT_TRUE((*e)->FinishStep(1.0, 1e-3, 1, 1.0).ok());
    const int L = Config().n_layer;
    // forward: layers 1..L and the head (L + 1); backward: layers L-1..1 (layer L follows the
    // head, acquired on the way up)
    EXPECT_EQ((*e)->prefetch_hits(), prefetch ? (L + 1) + (L - 1) : 0);
    ASSERT_TRUE((*e)->GatherParams().ok());
    params.emplace_back(m.params(), m.params() + m.num_params());
  }
  EXPECT_EQ(params[0], params[1]);
}

// Optimizer offload steps its shard a chunk at a time between the chunks' copies (down, host
// AdamW, up): however the chunks cut the pieces (here 97 floats: across tensors, pieces and
// the AdamW kernel's vector width), the parameters are bit for bit those of one chunk and of
// the optimizer on the device, over three steps, on the cpu backend and on cuda-emulated
// (whose copies go through its streams and events).
TEST(ZeroEngineTest, OffloadedChunksGiveTheBitsOfOneChunkAndOfNoOffload) {
  kernels::ConfigureThreads(1);
  for (const char* device : {"cpu", "cuda-emulated"}) {
    std::unique_ptr<kernels::Backend> owned;
    kernels::Backend* be = BackendNamed(device, &owned);
    ASSERT_NE(be, nullptr);
    for (int stage : {1, 2, 3}) {
      SCOPED_TRACE(std::string(device) + " stage " + std::to_string(stage));
      std::vector<std::vector<float>> params;
      for (size_t chunk : {size_t{0}, size_t{97}, size_t{1} << 30}) {  // 0: not offloaded
        model::GPT m(Config(), jobspec::ModelShard{}, be);
        m.InitRandom(1);
        MirrorCommunicator comm;
        auto e = ZeroEngine::Create(&m, &comm, stage, /*bucket_mb=*/0.02, kernels::AdamWConfig{0.9, 0.95, 1e-8, 0.1});
        ASSERT_TRUE(e.ok());
        if (chunk > 0) {
          ASSERT_TRUE((*e)->OffloadOptimizer().ok());
          (*e)->set_offload_chunk(chunk);
        }
        (*e)->Shard();
        for (int step = 1; step <= 3; ++step) {
          const auto in = Tokens(2 * 16, 2 + step), tg = Tokens(2 * 16, 30 + step);
          m.ZeroGrad();
          (*e)->BeginMicroBatch(0, 1);
          m.ForwardBackward(in.data(), tg.data(), 2, 16, 1.f);
          ASSERT_TRUE((*e)->FinishStep(1.0, 1e-2, step, 1.0).ok());
        }
        ASSERT_TRUE((*e)->GatherParams().ok());
        params.emplace_back(m.num_params());
        m.ReadParams(params.back().data());
        ASSERT_TRUE(be->Synchronize().ok());
      }
      EXPECT_EQ(params[1], params[2]) << "chunks of 97 against one chunk";
      EXPECT_EQ(params[1], params[0]) << "offloaded against the optimizer on the device";
    }
  }
}

// One rank alone (ZeRO 0, no group, no loss scaling) clips on the device: the norm, the
// multiplier and AdamW are queued with no host read, AdamW applying the multiplier as it reads
// each gradient. Its parameters are bit for bit those of the host's path (the norm read back,
// the gradients scaled in place, then AdamW), and its norm the same, with the clip biting,
// not biting and off, on the cpu backend and on cuda-emulated, over three steps.
TEST(ZeroEngineTest, OneRankClipsOnTheDeviceWithTheBitsOfTheHostsClip) {
  kernels::ConfigureThreads(1);
  for (const char* device : {"cpu", "cuda-emulated"}) {
    std::unique_ptr<kernels::Backend> owned;
    kernels::Backend* be = BackendNamed(device, &owned);
    ASSERT_NE(be, nullptr);
    for (double clip : {0.05, 1e6, 0.0}) {
      SCOPED_TRACE(std::string(device) + " clip " + std::to_string(clip));
      const kernels::AdamWConfig hp{0.9, 0.95, 1e-8, 0.1};
      model::GPT engine_model(Config(), jobspec::ModelShard{}, be), host_model(Config(), jobspec::ModelShard{}, be);
      engine_model.InitRandom(1);
      host_model.InitRandom(1);
      comm::SoloCommunicator solo;
      auto e = ZeroEngine::Create(&engine_model, &solo, 0, /*bucket_mb=*/25, hp);
      ASSERT_TRUE(e.ok()) << e.status();
      (*e)->Shard();
      optim::AdamW host_opt(host_model.tensors(), host_model.num_params(), hp, be);
      bool clipped = false;
      for (int step = 1; step <= 3; ++step) {
        const auto in = Tokens(2 * 16, 2 + step), tg = Tokens(2 * 16, 30 + step);
        engine_model.ZeroGrad();
        (*e)->BeginMicroBatch(0, 1);
        const float loss = engine_model.ForwardBackward(in.data(), tg.data(), 2, 16, 1.f);
        auto r = (*e)->FinishStep(loss, 1e-2, step, clip);
        ASSERT_TRUE(r.ok()) << r.status();
        // The host's path, as FinishStep takes it where the norm is summed over groups.
        host_model.ZeroGrad();
        EXPECT_EQ(host_model.ForwardBackward(in.data(), tg.data(), 2, 16, 1.f), loss);
        const int64_t n = static_cast<int64_t>(host_model.num_params());
        const double norm = std::sqrt(be->SumSquares(host_model.grads(), n));
        const float coef = kernels::clip_coefficient(norm, static_cast<float>(clip));
        clipped |= coef != 1.0f;
        if (coef != 1.0f) be->Scale(host_model.grads(), n, coef);
        host_opt.Step(host_model.params(), host_model.grads(), 1e-2, step);
        EXPECT_EQ(r->grad_norm, norm) << "step " << step;
        std::vector<float> got(engine_model.num_params()), want(host_model.num_params());
        engine_model.ReadParams(got.data());
        host_model.ReadParams(want.data());
        ASSERT_EQ(got, want) << "step " << step;
      }
      EXPECT_EQ(clipped, clip == 0.05) << "the clip bites where it should, so both paths are tried";
    }
  }
}

// Mixed precision, ZeRO 0: the update writes the GEMM weights' 16-bit working copy in its own
// pass (optim::AdamW's working targets). The losses and parameters over four steps are bit
// for bit those of recasting the copy from the parameters before each forward (bf16), on the
// cpu backend and on cuda-emulated.
TEST(ZeroEngineTest, TheUpdateWritesTheWorkingCopyAsARecastWould) {
  kernels::ConfigureThreads(1);
  for (const char* device : {"cpu", "cuda-emulated"}) {
    std::unique_ptr<kernels::Backend> owned;
    kernels::Backend* be = BackendNamed(device, &owned);
    ASSERT_NE(be, nullptr);
    std::vector<std::vector<float>> params, losses;
    for (bool recast : {false, true}) {
      SCOPED_TRACE(std::string(device) + (recast ? " recast" : " written by the update"));
      model::GPT m(Config(), jobspec::ModelShard{}, be);
      m.InitRandom(1);
      m.set_precision(kernels::Precision::kBf16);
      comm::SoloCommunicator solo;
      auto e = ZeroEngine::Create(&m, &solo, 0, /*bucket_mb=*/25, kernels::AdamWConfig{0.9, 0.95, 1e-8, 0.1});
      ASSERT_TRUE(e.ok()) << e.status();
      (*e)->Shard();
      losses.emplace_back();
      for (int step = 1; step <= 4; ++step) {
        const auto in = Tokens(2 * 16, 2 + step), tg = Tokens(2 * 16, 30 + step);
        m.ZeroGrad();
        (*e)->BeginMicroBatch(0, 1);
        losses.back().push_back(m.ForwardBackward(in.data(), tg.data(), 2, 16, 1.f));
        ASSERT_TRUE((*e)->FinishStep(1.0, 1e-2, step, 1.0).ok());
        if (recast) m.MarkParamsChanged();
      }
      params.emplace_back(m.num_params());
      m.ReadParams(params.back().data());
    }
    EXPECT_EQ(losses[0], losses[1]) << device;
    EXPECT_EQ(params[0], params[1]) << device;
    EXPECT_NE(losses[0][0], losses[0][3]) << "the steps moved the weights";
  }
}

// A step on a device (one rank, ZeRO 0) waits for the device once, at its end: the tokens go
// down and the losses come up through page-locked memory, the host waits for the losses'
// copy only (an event, with the backward queued behind it), and the clip is computed on the
// device. Counted by the emulated runtime where a GPU would make the host wait (a stream or
// device synchronisation, a copy to or from pageable host memory), in fp32 and bf16.
TEST(ZeroEngineTest, AStepOnADeviceWaitsForItOnceAtItsEnd) {
  kernels::ConfigureThreads(1);
  for (kernels::Precision p : {kernels::Precision::kFp32, kernels::Precision::kBf16}) {
    SCOPED_TRACE(p == kernels::Precision::kFp32 ? "fp32" : "bf16");
    auto b = kernels::CreateBackend(kernels::BackendKind::kCudaEmulated);
    ASSERT_TRUE(b.ok()) << b.status();
    kernels::Backend* be = b->get();
    model::GPT m(Config(), jobspec::ModelShard{}, be);
    m.InitRandom(1);
    m.set_precision(p);
    comm::SoloCommunicator solo;
    auto e = ZeroEngine::Create(&m, &solo, 0, /*bucket_mb=*/25, kernels::AdamWConfig{});
    ASSERT_TRUE(e.ok()) << e.status();
    (*e)->Shard();
    // What one Synchronize counts (a wait per stream the backend holds).
    const uint64_t before_sync = emucuda::HostWaitsSoFar().drains;
    ASSERT_TRUE(be->Synchronize().ok());
    const uint64_t per_sync = emucuda::HostWaitsSoFar().drains - before_sync;
    ASSERT_GE(per_sync, 1u);
    for (int step = 1; step <= 3; ++step) {
      const auto in = Tokens(2 * 16, 2 + step), tg = Tokens(2 * 16, 30 + step);
      const emucuda::HostWaits w0 = emucuda::HostWaitsSoFar();
      m.ZeroGrad();
      (*e)->BeginMicroBatch(0, 1);
      const float loss = m.ForwardBackward(in.data(), tg.data(), 2, 16, 1.f);
      auto r = (*e)->FinishStep(loss, 1e-3, step, /*grad_clip=*/0.05);
      ASSERT_TRUE(r.ok()) << r.status();
      const emucuda::HostWaits w1 = emucuda::HostWaitsSoFar();
      EXPECT_TRUE(std::isfinite(loss));
      EXPECT_GT(r->grad_norm, 0.05);
      if (step == 1) continue;  // the first step allocates and builds its plans
      EXPECT_EQ(w1.drains - w0.drains, per_sync) << "step " << step << ": the update's wait and no other";
      EXPECT_LE(w1.events - w0.events, 2u) << "step " << step << ": the losses' copy, and the tokens' staging";
    }
  }
}

}  // namespace
}  // namespace gantry::train
