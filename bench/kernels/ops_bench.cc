// One micro-benchmark per op of the GPT-2 step (issue 36, item 7; llm.c's dev/cuda in spirit):
// each op at GPT-2 124M's shapes (B x T rows, 768 wide, 12 heads, the 50304-row classifier),
// on one backend (cuda, cuda-emulated or cpu), checked against the cpu backend's twin on a
// small copy of the same shapes and timed. One GPU call measures every kernel:
//   ops_bench [--device cuda:0|cuda-emulated|cpu] [--rows N] [--reps R] [--only SUBSTRING]
// Prints a table: op, the shape, ms a call (median of R after 2 warm-ups, the backend
// synchronised around each), the rate (TFLOP/s for GEMMs and attention, GB/s of the bytes an
// op must move for the rest) and the check (the largest relative error against the cpu twin
// at rows 64, with the op's bound: "ok" or "FAIL"). Exits 1 when a check fails.
// bench/gpu/run.sh runs it beside gpt2_gpu_bench; the per-op peer is PyTorch's own per-op
// profile printed there (torch_gpt2.py gpu-bench --profile).
// One file of some 700 lines on purpose: the ops are one ordered table (the order the rows
// print), each entry a few lines of set-up; split by op, the table would be scattered.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "common/rng.h"
#include "kernels/backend.h"
#include "kernels/rope.h"
#include "kernels/cast.h"

namespace gantry {
namespace {

using kernels::Backend;
using kernels::CPtr;
using kernels::Precision;
using kernels::Ptr;
using kernels::WeightLayout;

constexpr Precision kBf = Precision::kBf16;

std::vector<float> RandomF(size_t n, uint64_t seed, float scale = 1.f) {
  Rng r(seed);
  std::vector<float> x(n);
  for (auto& v : x) v = scale * static_cast<float>(r.Uniform() * 2 - 1);
  return x;
}
std::vector<uint16_t> RandomB(size_t n, uint64_t seed, float scale = 1.f) {
  const auto f = RandomF(n, seed, scale);
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = kernels::Bf16Of(f[i]);
  return h;
}

// A buffer on a backend (the cpu backend: host memory it addresses directly).
struct Buf {
  Backend* be = nullptr;
  void* p = nullptr;
  size_t bytes = 0;
  Buf() = default;
  Buf(Backend* b, size_t n) : be(b), p(b->Allocate(n)), bytes(n) { b->Zero(p, n); }
  template <typename T>
  Buf(Backend* b, const std::vector<T>& host) : Buf(b, host.size() * sizeof(T)) {
    b->CopyToDevice(p, host.data(), bytes);
  }
  Buf(Buf&& o) noexcept { *this = std::move(o); }
  Buf& operator=(Buf&& o) noexcept {
    std::swap(be, o.be), std::swap(p, o.p), std::swap(bytes, o.bytes);
    return *this;
  }
  ~Buf() {
    if (p != nullptr) be->Free(p);
  }
  float* f() const { return static_cast<float*>(p); }
  uint16_t* h() const { return static_cast<uint16_t*>(p); }
  std::vector<float> HostF() const {
    std::vector<float> x(bytes / 4);
    be->CopyToHost(x.data(), p, bytes);
    return x;
  }
  std::vector<float> HostB() const {  // bf16, widened
    std::vector<uint16_t> h(bytes / 2);
    be->CopyToHost(h.data(), p, bytes);
    std::vector<float> x(h.size());
    for (size_t i = 0; i < h.size(); ++i) x[i] = kernels::FloatOfBf16(h[i]);
    return x;
  }
};

double RelErr(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  if (std::isnan(num)) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// An op: its buffers for `rows` rows on a backend, the call, and what one call must do.
struct Instance {
  std::function<void()> run;
  std::function<std::vector<float>()> result;  // what the check compares
  double flops = 0, bytes = 0;
  std::vector<Buf> bufs;
};
struct Op {
  std::string name, shape;
  double tol;  // the check's relative bound (16-bit outputs: bf16's rounding; fp32: sums' order)
  std::function<Instance(Backend*, int rows)> make;
  kernels::AttentionPath attention = kernels::AttentionPath::kAuto;  // the cuda kinds' backend for it
  bool gelu_epilogue = false;  // BackendOptions::gelu_epilogue of that backend
};

constexpr int C = 768, NH = 12, V = 50304, T = 1024;

std::vector<Op> Ops() {
  std::vector<Op> ops;
  // GEMMs of a block: inp (rows, IC) bf16 @ W → out (rows, OC) bf16, the bias in cuBLASLt's epilogue.
  struct Gemm {
    const char* name;
    int ic, oc;
  };
  for (Gemm g : {Gemm{"qkv", C, 3 * C}, Gemm{"attn proj", C, C}, Gemm{"fc", C, 4 * C}, Gemm{"fc proj", 4 * C, C}}) {
    for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
      for (bool bias : {true, false}) {
        const std::string lay = layout == WeightLayout::kInOut ? "W (in, out)" : "W (out, in)";
        ops.push_back({std::string("matmul fwd ") + g.name + (bias ? " +bias" : ""),
                       lay + " " + std::to_string(g.ic) + "->" + std::to_string(g.oc), 1e-2,
                       [g, layout, bias](Backend* be, int rows) {
                         Instance in;
                         in.bufs.emplace_back(be, RandomB(static_cast<size_t>(rows) * g.ic, 1));
                         in.bufs.emplace_back(be, RandomB(static_cast<size_t>(g.ic) * g.oc, 2, 0.05f));
                         in.bufs.emplace_back(be, RandomB(g.oc, 3));
                         in.bufs.emplace_back(be, static_cast<size_t>(rows) * g.oc * 2);
                         uint16_t *x = in.bufs[0].h(), *w = in.bufs[1].h(), *b = in.bufs[2].h(), *o = in.bufs[3].h();
                         in.run = [=] {
                           be->MatmulForward(Ptr(o, kBf), CPtr(x, kBf), CPtr(w, kBf), bias ? CPtr(b, kBf) : CPtr(),
                                             rows, g.ic, g.oc, layout);
                         };
                         in.result = [&b = in.bufs[3]] { return b.HostB(); };
                         in.flops = 2.0 * rows * g.ic * g.oc;
                         return in;
                       }});
      }
    }
    for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
      const std::string lay = layout == WeightLayout::kInOut ? "W (in, out)" : "W (out, in)";
      ops.push_back({std::string("matmul bwd ") + g.name, lay + " " + std::to_string(g.ic) + "->" + std::to_string(g.oc),
                     1e-2, [g, layout](Backend* be, int rows) {
                       Instance in;
                       in.bufs.emplace_back(be, RandomB(static_cast<size_t>(rows) * g.oc, 1));
                       in.bufs.emplace_back(be, RandomB(static_cast<size_t>(rows) * g.ic, 2));
                       in.bufs.emplace_back(be, RandomB(static_cast<size_t>(g.ic) * g.oc, 3, 0.05f));
                       in.bufs.emplace_back(be, static_cast<size_t>(rows) * g.ic * 2);
                       in.bufs.emplace_back(be, static_cast<size_t>(g.ic) * g.oc * 4);
                       in.bufs.emplace_back(be, static_cast<size_t>(g.oc) * 4);
                       uint16_t *d = in.bufs[0].h(), *x = in.bufs[1].h(), *w = in.bufs[2].h(), *dx = in.bufs[3].h();
                       float *dw = in.bufs[4].f(), *db = in.bufs[5].f();
                       in.run = [=] {
                         be->Zero(dw, static_cast<size_t>(g.ic) * g.oc * 4);
                         be->Zero(db, static_cast<size_t>(g.oc) * 4);
                         be->MatmulBackward(Ptr(dx, kBf), dw, db, CPtr(d, kBf), CPtr(x, kBf), CPtr(w, kBf), rows, g.ic,
                                            g.oc, layout);
                       };
                       in.result = [&b = in.bufs[3]] { return b.HostB(); };
                       in.flops = 4.0 * rows * g.ic * g.oc;
                       return in;
                     }});
    }
  }
  // The MLP's fused GEMMs, without and with cuBLASLt's GELU and bias-gradient epilogues
  // (BackendOptions::gelu_epilogue): forward, and the fc proj's backward through the GELU with
  // both biases' gradients (the model's call).
  for (bool epi : {false, true}) {
    const std::string tag = epi ? " +epilogue" : "";
    ops.push_back({"matmul+gelu fwd fc" + tag, "W (in, out) 768->3072", 1e-2,
                   [](Backend* be, int rows) {
                     Instance in;
                     in.bufs.emplace_back(be, RandomB(static_cast<size_t>(rows) * C, 1));
                     in.bufs.emplace_back(be, RandomB(static_cast<size_t>(C) * 4 * C, 2, 0.05f));
                     in.bufs.emplace_back(be, RandomB(4 * C, 3));
                     in.bufs.emplace_back(be, static_cast<size_t>(rows) * 4 * C * 2);
                     in.bufs.emplace_back(be, static_cast<size_t>(rows) * 4 * C * 2);
                     uint16_t *x = in.bufs[0].h(), *w = in.bufs[1].h(), *b = in.bufs[2].h(), *pre = in.bufs[3].h(),
                              *o = in.bufs[4].h();
                     in.run = [=] {
                       be->MatmulBiasGeluForward(Ptr(pre, kBf), Ptr(o, kBf), CPtr(x, kBf), CPtr(w, kBf),
                                                 CPtr(b, kBf), rows, C, 4 * C);
                     };
                     in.result = [&b = in.bufs[4]] { return b.HostB(); };
                     in.flops = 2.0 * rows * C * 4 * C;
                     return in;
                   },
                   kernels::AttentionPath::kAuto, epi});
    ops.push_back({"matmul+gelu bwd fc proj" + tag, "W (in, out) 3072->768", 1e-2,
                   [](Backend* be, int rows) {
                     Instance in;
                     const size_t nh = static_cast<size_t>(rows) * 4 * C;
                     in.bufs.emplace_back(be, RandomB(static_cast<size_t>(rows) * C, 1));  // dout
                     in.bufs.emplace_back(be, RandomB(nh, 2));                             // gelu(pre)
                     in.bufs.emplace_back(be, RandomB(static_cast<size_t>(4) * C * C, 3, 0.05f));
                     in.bufs.emplace_back(be, RandomB(nh, 4, 2.f));  // pre
                     in.bufs.emplace_back(be, nh * 2);               // dinp
                     in.bufs.emplace_back(be, static_cast<size_t>(4) * C * C * 4);
                     in.bufs.emplace_back(be, static_cast<size_t>(C) * 4);
                     in.bufs.emplace_back(be, static_cast<size_t>(4) * C * 4);
                     uint16_t *d = in.bufs[0].h(), *h = in.bufs[1].h(), *w = in.bufs[2].h(), *pre = in.bufs[3].h(),
                              *dx = in.bufs[4].h();
                     float *dw = in.bufs[5].f(), *db = in.bufs[6].f(), *dfcb = in.bufs[7].f();
                     in.run = [=] {
                       be->Zero(dw, static_cast<size_t>(4) * C * C * 4);
                       be->Zero(db, static_cast<size_t>(C) * 4);
                       be->Zero(dfcb, static_cast<size_t>(4) * C * 4);
                       be->MatmulBackward(Ptr(dx, kBf), dw, db, CPtr(d, kBf), CPtr(h, kBf), CPtr(w, kBf), rows, 4 * C,
                                          C, WeightLayout::kInOut, CPtr(pre, kBf), dfcb);
                     };
                     in.result = [&b = in.bufs[4]] { return b.HostB(); };
                     in.flops = 4.0 * rows * 4 * C * C;
                     return in;
                   },
                   kernels::AttentionPath::kAuto, epi});
  }
  ops.push_back({"layernorm fwd", "768, bf16 out", 1e-2, [](Backend* be, int rows) {
                   Instance in;
                   in.bufs.emplace_back(be, RandomF(static_cast<size_t>(rows) * C, 1, 2.f));
                   in.bufs.emplace_back(be, RandomF(C, 2));
                   in.bufs.emplace_back(be, RandomF(C, 3));
                   in.bufs.emplace_back(be, static_cast<size_t>(rows) * C * 2);
                   in.bufs.emplace_back(be, static_cast<size_t>(rows) * 4);
                   in.bufs.emplace_back(be, static_cast<size_t>(rows) * 4);
                   float *x = in.bufs[0].f(), *w = in.bufs[1].f(), *b = in.bufs[2].f(), *m = in.bufs[4].f(),
                         *r = in.bufs[5].f();
                   uint16_t* o = in.bufs[3].h();
                   in.run = [=] { be->LayerNormForward(Ptr(o, kBf), m, r, x, w, b, rows, C); };
                   in.result = [&b = in.bufs[3]] { return b.HostB(); };
                   in.bytes = static_cast<double>(rows) * C * (4 + 2);
                   return in;
                 }});
  // The norms' backward at the width of GPT-2 and of the Llama of its size; the check compares
  // dinp, then dweight (and dbias) accumulated once.
  for (const bool rms : {false, true}) {
    ops.push_back({rms ? "rmsnorm bwd" : "layernorm bwd", "768", 1e-5, [rms](Backend* be, int rows) {
                     Instance in;
                     const size_t n = static_cast<size_t>(rows) * C;
                     in.bufs.emplace_back(be, RandomF(n, 1, 2.f));
                     in.bufs.emplace_back(be, RandomF(C, 2));
                     in.bufs.emplace_back(be, RandomF(n, 3));
                     in.bufs.emplace_back(be, RandomF(rows, 4, 0.1f));
                     in.bufs.emplace_back(be, std::vector<float>(rows, 1.3f));
                     in.bufs.emplace_back(be, n * 4);
                     in.bufs.emplace_back(be, C * 4);
                     in.bufs.emplace_back(be, C * 4);
                     float *x = in.bufs[0].f(), *w = in.bufs[1].f(), *d = in.bufs[2].f(), *m = in.bufs[3].f(),
                           *r = in.bufs[4].f(), *dx = in.bufs[5].f(), *dw = in.bufs[6].f(), *db = in.bufs[7].f();
                     in.run = [=] {
                       be->Zero(dx, n * 4);
                       if (rms) {
                         be->RMSNormBackward(dx, dw, d, x, w, r, rows, C);
                       } else {
                         be->LayerNormBackward(dx, dw, db, d, x, w, m, r, rows, C);
                       }
                     };
                     in.result = [&gx = in.bufs[5], &gw = in.bufs[6], &gb = in.bufs[7]] {
                       std::vector<float> all = gx.HostF();
                       for (const Buf* g : {&gw, &gb}) {
                         const std::vector<float> p = g->HostF();
                         all.insert(all.end(), p.begin(), p.end());
                       }
                       return all;
                     };
                     in.bytes = static_cast<double>(n) * 4 * 4;  // dout, inp read; dinp read and written
                     return in;
                   }});
  }
  // The same norms' backward in a bf16 model's step, with the casts around it: separate (the GEMM's
  // fp32 dout rounded in place, the norm, then dinp converted to the 16-bit copy the next GEMMs
  // read) against fused (GPT::set_fused_grad_casts: a bf16 dout read, the copy written by the
  // norm). Both give the same dinp, dweight, dbias and copy; the check compares dinp, the
  // parameter gradients and the copy widened.
  for (const bool rms : {false, true}) {
    for (const bool fused : {false, true}) {
      const char* name = rms ? (fused ? "rmsnorm bwd +casts fused" : "rmsnorm bwd +casts separate")
                             : (fused ? "layernorm bwd +casts fused" : "layernorm bwd +casts separate");
      ops.push_back({name, "768", 1e-5, [rms, fused](Backend* be, int rows) {
                       Instance in;
                       const size_t n = static_cast<size_t>(rows) * C;
                       std::vector<float> dout = RandomF(n, 3);
                       std::vector<uint16_t> dout16(n);
                       for (size_t i = 0; i < n; ++i) dout16[i] = kernels::Bf16Of(dout[i]);
                       in.bufs.emplace_back(be, RandomF(n, 1, 2.f));
                       in.bufs.emplace_back(be, RandomF(C, 2));
                       in.bufs.emplace_back(be, dout);
                       in.bufs.emplace_back(be, RandomF(rows, 4, 0.1f));
                       in.bufs.emplace_back(be, std::vector<float>(rows, 1.3f));
                       in.bufs.emplace_back(be, n * 4);
                       in.bufs.emplace_back(be, C * 4);
                       in.bufs.emplace_back(be, C * 4);
                       in.bufs.emplace_back(be, dout16);
                       in.bufs.emplace_back(be, n * 2);
                       float *x = in.bufs[0].f(), *w = in.bufs[1].f(), *d = in.bufs[2].f(), *m = in.bufs[3].f(),
                             *r = in.bufs[4].f(), *dx = in.bufs[5].f(), *dw = in.bufs[6].f(), *db = in.bufs[7].f();
                       uint16_t *d16 = in.bufs[8].h(), *dx16 = in.bufs[9].h();
                       in.run = [=] {
                         be->Zero(dx, n * 4);
                         const CPtr dy = fused ? CPtr(d16, kBf) : CPtr(d);
                         const Ptr copy = fused ? Ptr(dx16, kBf) : Ptr();
                         if (!fused) be->RoundTo(d, d, static_cast<int64_t>(n), kBf);  // the GEMM's output rounded
                         if (rms) {
                           be->RMSNormBackward(dx, dw, dy, x, w, r, rows, C, copy);
                         } else {
                           be->LayerNormBackward(dx, dw, db, dy, x, w, m, r, rows, C, copy);
                         }
                         if (!fused) be->Convert(Ptr(dx16, kBf), dx, static_cast<int64_t>(n));
                       };
                       in.result = [&gx = in.bufs[5], &gw = in.bufs[6], &gb = in.bufs[7], &g16 = in.bufs[9]] {
                         std::vector<float> all = gx.HostF();
                         for (const Buf* g : {&gw, &gb}) {
                           const std::vector<float> p = g->HostF();
                           all.insert(all.end(), p.begin(), p.end());
                         }
                         const std::vector<float> copy = g16.HostB();
                         all.insert(all.end(), copy.begin(), copy.end());
                         return all;
                       };
                       // Separate: the round's read and write (8 bytes), the norm's fp32 dout, inp and
                       // dinp (16), the convert's read and write (6); fused: a bf16 dout (2), inp and
                       // dinp (12), the copy (2).
                       in.bytes = static_cast<double>(n) * (fused ? 16 : 30);
                       return in;
                     }});
    }
  }
  ops.push_back({"residual fwd", "768 fp32", 1e-6, [](Backend* be, int rows) {
                   Instance in;
                   const size_t n = static_cast<size_t>(rows) * C;
                   in.bufs.emplace_back(be, RandomF(n, 1));
                   in.bufs.emplace_back(be, RandomF(n, 2));
                   in.bufs.emplace_back(be, n * 4);
                   float *a = in.bufs[0].f(), *b = in.bufs[1].f(), *o = in.bufs[2].f();
                   in.run = [=] { be->ResidualForward(o, a, b, static_cast<int64_t>(n)); };
                   in.result = [&b = in.bufs[2]] { return b.HostF(); };
                   in.bytes = static_cast<double>(n) * 12;
                   return in;
                 }});
  // The two rows above in one pass (Backend::ResidualLayerNormForward), as the model runs them.
  ops.push_back({"residual+layernorm fwd", "768, bf16 out", 1e-2, [](Backend* be, int rows) {
                   Instance in;
                   const size_t n = static_cast<size_t>(rows) * C;
                   in.bufs.emplace_back(be, RandomF(n, 1, 2.f));
                   in.bufs.emplace_back(be, RandomF(n, 2));
                   in.bufs.emplace_back(be, RandomF(C, 3));
                   in.bufs.emplace_back(be, RandomF(C, 4));
                   in.bufs.emplace_back(be, n * 4);
                   in.bufs.emplace_back(be, n * 2);
                   in.bufs.emplace_back(be, static_cast<size_t>(rows) * 8);
                   float *a = in.bufs[0].f(), *b = in.bufs[1].f(), *w = in.bufs[2].f(), *bias = in.bufs[3].f(),
                         *res = in.bufs[4].f(), *m = in.bufs[6].f(), *r = m + rows;
                   uint16_t* o = in.bufs[5].h();
                   in.run = [=] { be->ResidualLayerNormForward(res, Ptr(o, kBf), m, r, a, b, w, bias, rows, C); };
                   in.result = [&b = in.bufs[5]] { return b.HostB(); };
                   in.bytes = static_cast<double>(n) * (8 + 4 + 2);  // a, b read; the sum and the output written
                   return in;
                 }});
  ops.push_back({"gelu bwd", "3072 bf16", 1e-2, [](Backend* be, int rows) {
                   Instance in;
                   const size_t n = static_cast<size_t>(rows) * 4 * C;
                   in.bufs.emplace_back(be, RandomB(n, 1, 3.f));
                   in.bufs.emplace_back(be, RandomB(n, 2));
                   in.bufs.emplace_back(be, n * 2);
                   uint16_t *x = in.bufs[0].h(), *d = in.bufs[1].h(), *o = in.bufs[2].h();
                   in.run = [=] { be->GeluBackward(Ptr(o, kBf), CPtr(x, kBf), CPtr(d, kBf), static_cast<int64_t>(n)); };
                   in.result = [&b = in.bufs[2]] { return b.HostB(); };
                   in.bytes = static_cast<double>(n) * 6;
                   return in;
                 }});
  // The Llama's RoPE on its 12 query and 4 key heads of 64 (rows of 12 + 2 x 4 heads), T 1024.
  ops.push_back({"rope fwd", "16 of 20 heads of 64, T 1024", 1e-2, [](Backend* be, int rows) {
                   Instance in;
                   constexpr int hd = 64, NQ = 12, NKV = 4;
                   const int t = std::min(rows, T), b = std::max(1, rows / T);
                   const size_t n = static_cast<size_t>(b) * t * (NQ + 2 * NKV) * hd;
                   std::vector<float> inv(hd / 2);
                   kernels::rope_inv_freq(inv.data(), hd, 10000.f);
                   in.bufs.emplace_back(be, RandomB(n, 1));
                   in.bufs.emplace_back(be, inv);
                   uint16_t* q = in.bufs[0].h();
                   const float* f = in.bufs[1].f();
                   in.run = [=] { be->RopeApply(Ptr(q, kBf), b, t, NQ, NKV, hd, f, false); };
                   in.result = [&x = in.bufs[0]] { return x.HostB(); };
                   in.bytes = static_cast<double>(b) * t * (NQ + NKV) * hd * 2 * 2;
                   return in;
                 }});
  // The Llama's SwiGLU gate (ffn 2048): gate|up (rows, 2F) → h (rows, F), and back.
  for (bool backward : {false, true}) {
    ops.push_back({backward ? "swiglu bwd" : "swiglu fwd", "2048 bf16", 1e-2, [backward](Backend* be, int rows) {
                     Instance in;
                     constexpr int F = 2048;
                     const size_t n = static_cast<size_t>(rows) * F;
                     in.bufs.emplace_back(be, RandomB(2 * n, 1, 2.f));  // gate|up
                     in.bufs.emplace_back(be, RandomB(n, 2));           // dh
                     in.bufs.emplace_back(be, (backward ? 2 * n : n) * 2);
                     uint16_t *gu = in.bufs[0].h(), *dh = in.bufs[1].h(), *o = in.bufs[2].h();
                     if (backward) {
                       in.run = [=] { be->SwigluBackward(Ptr(o, kBf), CPtr(dh, kBf), CPtr(gu, kBf), rows, F); };
                     } else {
                       in.run = [=] { be->SwigluForward(Ptr(o, kBf), CPtr(gu, kBf), rows, F); };
                     }
                     in.result = [&b = in.bufs[2]] { return b.HostB(); };
                     in.bytes = static_cast<double>(n) * (backward ? 2 * 5 : 2 * 3);
                     return in;
                   }});
  }
  for (const char* path : {"cudnn", "fused"}) {
    for (bool backward : {false, true}) {
      ops.push_back({std::string("attention ") + (backward ? "bwd " : "fwd ") + path, "12 heads of 64, T 1024", 2e-2,
                     [backward](Backend* be, int rows) {
                       Instance in;
                       const int B = std::max(1, rows / T), t = std::min(rows, T);
                       const size_t n = static_cast<size_t>(B) * t * C;
                       in.bufs.emplace_back(be, RandomB(3 * n, 1));
                       in.bufs.emplace_back(be, RandomB(n, 2));
                       in.bufs.emplace_back(be, n * 2);
                       in.bufs.emplace_back(be, 3 * n * 2);
                       in.bufs.emplace_back(be, static_cast<size_t>(B) * NH * t * 4);
                       // the cpu's probabilities and its backward's scratch
                       const bool probs = !be->Supports(kernels::Capability::kFusedAttention);
                       in.bufs.emplace_back(be, probs ? static_cast<size_t>(B) * NH * t * t * 4 : 4);
                       in.bufs.emplace_back(be, probs ? static_cast<size_t>(B) * NH * t * t * 4 : 4);
                       uint16_t *qkv = in.bufs[0].h(), *d = in.bufs[1].h(), *o = in.bufs[2].h(), *dq = in.bufs[3].h();
                       float *lse = in.bufs[4].f(), *att = in.bufs[5].f(), *scratch = in.bufs[6].f();
                       // The state: the cpu keeps probabilities, the cuda kinds the log-sum-exp.
                       float* state = be->Supports(kernels::Capability::kFusedAttention) ? lse : att;
                       be->AttentionForward(Ptr(o, kBf), state, CPtr(qkv, kBf), B, t, C, NH, kBf);
                       if (backward) {
                         in.run = [=] {
                           be->AttentionBackward(Ptr(dq, kBf), scratch, CPtr(d, kBf), CPtr(qkv, kBf), CPtr(o, kBf), state,
                                                 B, t, C, NH, kBf);
                         };
                         in.result = [&b = in.bufs[3]] { return b.HostB(); };
                       } else {
                         in.run = [=] { be->AttentionForward(Ptr(o, kBf), state, CPtr(qkv, kBf), B, t, C, NH, kBf); };
                         in.result = [&b = in.bufs[2]] { return b.HostB(); };
                       }
                       // causal: half of the (t, t) scores; forward 2 GEMMs, backward 5
                       in.flops = (backward ? 5 : 2) * 2.0 * B * NH * (t * 0.5 * t) * (C / NH);
                       return in;
                     },
                     std::string(path) == "cudnn" ? kernels::AttentionPath::kCudnn : kernels::AttentionPath::kFused});
    }
  }
  // The Llama of GPT-2's size: 12 query heads over 4 key/value heads of 64. Grouped: cuDNN's SDPA
  // reads the projection's (12 + 2·4)·64 rows as they are (Backend::GroupedAttentionForward/
  // Backward; the cpu backend repeats the heads inside the call); expanded: what the model runs
  // where it does not, the heads repeated (GqaExpand) before the attention and its gradient summed
  // back (GqaReduce) after, each pair's time together.
  for (bool grouped : {true, false}) {
    for (bool backward : {false, true}) {
      const std::string name = std::string("llama attn ") + (backward ? "bwd " : "fwd ") +
                               (grouped ? "grouped cudnn" : (backward ? "cudnn+reduce" : "expand+cudnn"));
      ops.push_back({name, "12/4 heads of 64, T 1024", 2e-2,
                     [grouped, backward](Backend* be, int rows) {
                       constexpr int KV = 4, hd = C / NH, W = (NH + 2 * KV) * hd;
                       Instance in;
                       const int B = std::max(1, rows / T), t = std::min(rows, T);
                       const int64_t bt = static_cast<int64_t>(B) * t;
                       const size_t n = static_cast<size_t>(bt) * C, nw = static_cast<size_t>(bt) * W;
                       const bool probs = !be->Supports(kernels::Capability::kFusedAttention);
                       const size_t att = probs ? static_cast<size_t>(B) * NH * t * t * 4 : 4;
                       in.bufs.emplace_back(be, RandomB(nw, 1));   // 0 the projection's rows
                       in.bufs.emplace_back(be, RandomB(n, 2));    // 1 dout
                       in.bufs.emplace_back(be, n * 2);            // 2 out
                       in.bufs.emplace_back(be, nw * 2);           // 3 dqkv, the projection's rows
                       in.bufs.emplace_back(be, 3 * n * 2);        // 4 the repeated rows
                       in.bufs.emplace_back(be, 3 * n * 2);        // 5 their gradient
                       in.bufs.emplace_back(be, static_cast<size_t>(B) * NH * t * 4);  // 6 lse
                       in.bufs.emplace_back(be, att);              // 7 the cpu's probabilities
                       in.bufs.emplace_back(be, att);              // 8 its backward's scratch
                       uint16_t *qkv = in.bufs[0].h(), *d = in.bufs[1].h(), *o = in.bufs[2].h(), *dq = in.bufs[3].h(),
                                *q3 = in.bufs[4].h(), *dq3 = in.bufs[5].h();
                       float* state =
                           be->Supports(kernels::Capability::kFusedAttention) ? in.bufs[6].f() : in.bufs[7].f();
                       float* scratch = in.bufs[8].f();
                       auto forward = [=] {
                         if (grouped) {
                           be->GroupedAttentionForward(Ptr(o, kBf), state, CPtr(qkv, kBf), B, t, NH, KV, hd, kBf);
                         } else {
                           be->GqaExpand(Ptr(q3, kBf), CPtr(qkv, kBf), bt, NH, KV, hd);
                           be->AttentionForward(Ptr(o, kBf), state, CPtr(q3, kBf), B, t, C, NH, kBf);
                         }
                       };
                       forward();
                       if (backward) {
                         in.run = [=] {
                           if (grouped) {
                             be->GroupedAttentionBackward(Ptr(dq, kBf), scratch, CPtr(d, kBf), CPtr(qkv, kBf),
                                                          CPtr(o, kBf), state, B, t, NH, KV, hd, kBf);
                           } else {
                             be->AttentionBackward(Ptr(dq3, kBf), scratch, CPtr(d, kBf), CPtr(q3, kBf), CPtr(o, kBf),
                                                   state, B, t, C, NH, kBf);
                             be->GqaReduce(Ptr(dq, kBf), CPtr(dq3, kBf), bt, NH, KV, hd);
                           }
                         };
                         in.result = [&b = in.bufs[3]] { return b.HostB(); };
                       } else {
                         in.run = forward;
                         in.result = [&b = in.bufs[2]] { return b.HostB(); };
                       }
                       in.flops = (backward ? 5 : 2) * 2.0 * B * NH * (t * 0.5 * t) * hd;
                       return in;
                     },
                     kernels::AttentionPath::kCudnn});
    }
  }
  ops.push_back({"classifier softmax+xent", "50304 bf16 logits", 1e-2, [](Backend* be, int rows) {
                   Instance in;
                   const size_t n = static_cast<size_t>(rows) * V;
                   std::vector<int32_t> tg(rows);
                   for (int i = 0; i < rows; ++i) tg[i] = (i * 7919) % 50257;
                   in.bufs.emplace_back(be, RandomB(n, 1, 4.f));
                   in.bufs.emplace_back(be, tg);
                   in.bufs.emplace_back(be, static_cast<size_t>(rows) * 4);
                   in.bufs.emplace_back(be, n * 2);
                   uint16_t *l0 = in.bufs[0].h(), *l = in.bufs[3].h();
                   auto* t = static_cast<int32_t*>(in.bufs[1].p);
                   float* losses = in.bufs[2].f();
                   in.run = [=] {
                     be->Copy(l, l0, n * 2);
                     be->CrossEntropyFusedForwardBackward(losses, Ptr(l, kBf), t, 1.0f / rows, rows, V);
                   };
                   in.result = [&b = in.bufs[2]] { return b.HostF(); };
                   in.bytes = static_cast<double>(n) * 2 * 2;  // logits read, gradient written (the copy apart)
                   return in;
                 }});
  ops.push_back({"encoder bwd", "50304 x 768 wte", 1e-5, [](Backend* be, int rows) {
                   Instance in;
                   std::vector<int32_t> tok(rows);
                   Rng r(5);
                   for (auto& v : tok) v = static_cast<int32_t>(r.NextU64() % 50257);
                   const int B = std::max(1, rows / T), t = std::min(rows, T);
                   in.bufs.emplace_back(be, tok);
                   in.bufs.emplace_back(be, RandomF(static_cast<size_t>(rows) * C, 1));
                   in.bufs.emplace_back(be, static_cast<size_t>(V) * C * 4);
                   in.bufs.emplace_back(be, static_cast<size_t>(T) * C * 4);
                   auto* tk = static_cast<int32_t*>(in.bufs[0].p);
                   float *d = in.bufs[1].f(), *dwte = in.bufs[2].f(), *dwpe = in.bufs[3].f();
                   in.run = [=] { be->EncoderBackward(dwte, dwpe, d, tk, 0, V, B, t, C); };
                   in.result = [&b = in.bufs[3]] { return b.HostF(); };
                   in.bytes = static_cast<double>(rows) * C * 4 * 2;
                   return in;
                 }});
  ops.push_back({"adamw", "124M parameters", 1e-6, [](Backend* be, int rows) {
                   Instance in;
                   const size_t n = static_cast<size_t>(rows) * 1900;  // 124M at 65536 rows
                   for (int i = 0; i < 4; ++i) {
                     auto x = RandomF(n, 10 + i, i == 3 ? 0.01f : 1.f);
                     if (i == 3) for (auto& e : x) e = std::fabs(e);  // v: a running mean of squares
                     in.bufs.emplace_back(be, x);
                   }
                   float *p = in.bufs[0].f(), *g = in.bufs[1].f(), *m = in.bufs[2].f(), *v = in.bufs[3].f();
                   kernels::AdamWParams hp;
                   hp.lr = 1e-3f;
                   hp.beta1 = 0.9f;
                   hp.beta2 = 0.95f;
                   hp.eps = 1e-8f;
                   hp.weight_decay = 0.1f;
                   hp.step = 3;
                   in.run = [=] { be->AdamW(p, g, m, v, static_cast<int64_t>(n), hp); };
                   in.result = [&b = in.bufs[0]] { return b.HostF(); };
                   in.bytes = static_cast<double>(n) * 4 * 7;  // p, g, m, v read; p, m, v written
                   return in;
                 }});
  // GPT-2's step of AdamW as ZeRO 0 runs it: one AdamWSpans call over its tensors (runs of one
  // decay, cut at the GEMM tensors, which also get their bf16 working copy), each tensor's size
  // scaled by rows / 65,536 (GPT-2 itself at 65,536 rows).
  ops.push_back({"adamw spans +bf16 copy", "GPT-2's 148 tensors", 1e-6, [](Backend* be, int rows) {
                   Instance in;
                   std::vector<std::pair<size_t, bool>> t;  // (size, GEMM tensor: decayed, copied)
                   auto add = [&](size_t full, bool gemm) {
                     t.push_back({std::max<size_t>(1, full * static_cast<size_t>(rows) / 65536), gemm});
                   };
                   add(static_cast<size_t>(V) * C, true);  // wte (the classifier's weight)
                   add(static_cast<size_t>(T) * C, false);  // wpe
                   for (int l = 0; l < 12; ++l) {
                     add(C, false), add(C, false);                                 // ln_1
                     add(static_cast<size_t>(C) * 3 * C, true), add(3 * C, true);  // c_attn
                     add(static_cast<size_t>(C) * C, true), add(C, true);          // attn c_proj
                     add(C, false), add(C, false);                                 // ln_2
                     add(static_cast<size_t>(C) * 4 * C, true), add(4 * C, true);  // c_fc
                     add(static_cast<size_t>(4 * C) * C, true), add(C, true);      // mlp c_proj
                   }
                   add(C, false), add(C, false);  // ln_f
                   size_t n = 0;
                   for (const auto& x : t) n += x.first;
                   for (int i = 0; i < 4; ++i) {
                     auto x = RandomF(n, 10 + i, i == 3 ? 0.01f : 1.f);
                     if (i == 3) for (auto& e : x) e = std::fabs(e);
                     in.bufs.emplace_back(be, x);
                   }
                   in.bufs.emplace_back(be, n * 2);  // the working copies, packed
                   float *p = in.bufs[0].f(), *g = in.bufs[1].f(), *m = in.bufs[2].f(), *v = in.bufs[3].f();
                   uint16_t* w = in.bufs[4].h();
                   std::vector<kernels::AdamWSpan> spans;
                   size_t at = 0;
                   for (const auto& [size, gemm] : t) {
                     spans.push_back({p + at, g + at, m + at, v + at, static_cast<int64_t>(size), gemm ? 0.1f : 0.f,
                                      gemm ? Ptr(w + at, kBf) : Ptr()});
                     at += size;
                   }
                   kernels::AdamWParams hp;
                   hp.lr = 1e-3f, hp.beta1 = 0.9f, hp.beta2 = 0.95f, hp.eps = 1e-8f, hp.weight_decay = 0.f, hp.step = 3;
                   in.run = [=] { be->AdamWSpans(spans.data(), static_cast<int>(spans.size()), hp); };
                   in.result = [&b = in.bufs[0]] { return b.HostF(); };
                   in.bytes = static_cast<double>(n) * (4 * 7 + 2);  // AdamW's, and the copy written
                   return in;
                 }});
  return ops;
}

int Main(int argc, char** argv) {
  std::string device = "cuda:0", only;
  int rows = 0, reps = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    bool ok = true;
    if (a == "--device") device = argv[i + 1];
    else if (a == "--rows") ok = absl::SimpleAtoi(argv[i + 1], &rows) && rows >= 1;
    else if (a == "--reps") ok = absl::SimpleAtoi(argv[i + 1], &reps) && reps >= 1;
    else if (a == "--only") only = argv[i + 1];
    else ok = false;
    if (!ok) {
      std::fprintf(stderr, "usage: ops_bench [--device cuda:0|cuda-emulated|cpu] [--rows N] [--reps R] [--only SUBSTRING]\n");
      return 2;
    }
  }
  Backend* be = &kernels::CpuBackend();
  const std::string kind = device.substr(0, device.find(':'));
  auto parsed = kernels::ParseBackendKind(kind);
  if (!parsed.ok()) {
    std::fprintf(stderr, "ops_bench: %s\n", std::string(parsed.status().message()).c_str());
    return 2;
  }
  // One backend a kind of attention path (cuda kinds; the cpu backend has one way).
  const int ordinal = device.find(':') == std::string::npos ? 0 : std::atoi(device.c_str() + device.find(':') + 1);
  std::map<std::pair<kernels::AttentionPath, bool>, std::unique_ptr<Backend>> backends;
  auto backend_for = [&](kernels::AttentionPath path, bool gelu_epilogue = false) -> absl::StatusOr<Backend*> {
    if (*parsed == kernels::BackendKind::kCpu) return &kernels::CpuBackend();
    auto& slot = backends[{path, gelu_epilogue}];
    if (slot == nullptr) {
      kernels::BackendOptions options;
      options.attention = path;
      options.gelu_epilogue = gelu_epilogue;
      auto made = kernels::CreateBackend(*parsed, ordinal, options);
      if (!made.ok()) return made.status();
      slot = std::move(*made);
    }
    return slot.get();
  };
  if (auto b = backend_for(kernels::AttentionPath::kAuto); b.ok()) {
    be = *b;
  } else {
    std::fprintf(stderr, "ops_bench: %s\n", std::string(b.status().message()).c_str());
    return 1;
  }
  if (rows == 0) rows = *parsed == kernels::BackendKind::kCuda ? 64 * T : 1024;  // GPT-2's B 64 on a GPU
  std::printf("ops_bench on %s: %d rows (B x T), the check at 64 rows against the cpu backend\n",
              be->Describe().c_str(), rows);
  std::printf("%-30s %-26s %10s %12s %10s\n", "op", "shape", "ms", "rate", "check");
  bool all_ok = true;
  for (const Op& op : Ops()) {
    if (!only.empty() && op.name.find(only) == std::string::npos) continue;
    auto for_op = backend_for(op.attention, op.gelu_epilogue);
    if (!for_op.ok()) {
      std::printf("%-30s %s\n", op.name.c_str(), std::string(for_op.status().message()).c_str());
      all_ok = false;
      continue;
    }
    Backend* be = *for_op;
    // The check: 64 rows (attention: 64 tokens) here and on the cpu backend.
    double err = 0;
    {
      Instance mine = op.make(be, 64), ref = op.make(&kernels::CpuBackend(), 64);
      mine.run();
      ref.run();
      const absl::Status st = be->Synchronize();
      if (!st.ok()) {
        std::printf("%-30s %s\n", op.name.c_str(), std::string(st.message()).c_str());
        all_ok = false;
        continue;
      }
      err = RelErr(mine.result(), ref.result());
    }
    Instance in = op.make(be, rows);
    std::vector<double> t;
    for (int r = 0; r < reps + 2; ++r) {
      (void)be->Synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      in.run();
      const absl::Status st = be->Synchronize();
      if (!st.ok()) {
        std::printf("%-30s %s\n", op.name.c_str(), std::string(st.message()).c_str());
        all_ok = false;
        break;
      }
      if (r >= 2) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    if (t.empty()) continue;
    std::sort(t.begin(), t.end());
    const double s = t[t.size() / 2];
    char rate[32];
    if (in.flops > 0) std::snprintf(rate, sizeof(rate), "%.0f TFLOP/s", in.flops / s / 1e12);
    else std::snprintf(rate, sizeof(rate), "%.0f GB/s", in.bytes / s / 1e9);
    const bool ok = err <= op.tol;
    all_ok &= ok;
    char check[32];
    std::snprintf(check, sizeof(check), "%.1e %s", err, ok ? "ok" : "FAIL");
    std::printf("%-30s %-26s %10.3f %12s %10s\n", op.name.c_str(), op.shape.c_str(), s * 1e3, rate, check);
    std::fflush(stdout);
  }
  return all_ok ? 0 : 1;
}

}  // namespace
}  // namespace gantry

int main(int argc, char** argv) { return gantry::Main(argc, argv); }
