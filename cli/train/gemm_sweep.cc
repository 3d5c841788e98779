#include "cli/train/gemm_sweep.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "kernels/types.h"

namespace gantry::calibrate {

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

// Device memory freed on every path.
class Buffer {
 public:
  Buffer(kernels::Backend& be, size_t bytes) : be_(be), p_(be.Allocate(bytes)) {}
  ~Buffer() {
    if (p_) be_.Free(p_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() const { return p_; }

 private:
  kernels::Backend& be_;
  void* p_;
};

// The median seconds of one call: a warm-up, one call timed alone to size a batch lasting at
// least o.min_batch_s, then o.repeats batches, each ended by Synchronize.
absl::StatusOr<double> TimeCall(kernels::Backend& be, const SweepOptions& o, const std::function<void()>& call) {
  call();
  RETURN_IF_ERROR(be.Synchronize());
  auto a = Clock::now();
  call();
  RETURN_IF_ERROR(be.Synchronize());
  const double one = std::max(1e-9, Since(a));
  const int calls = static_cast<int>(std::clamp(std::ceil(o.min_batch_s / one), 1.0, 10000.0));
  std::vector<double> t;
  for (int r = 0; r < o.repeats; ++r) {
    a = Clock::now();
    for (int i = 0; i < calls; ++i) call();
    RETURN_IF_ERROR(be.Synchronize());
    t.push_back(Since(a) / calls);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// The grid of one precision: every (m, n, k) of sizes^3, m slowest; the entries appended.
absl::Status SweepGrid(kernels::Backend& be, const SweepOptions& o, kernels::Precision type,
                       const std::vector<int64_t>& sizes, int* done, int total, const SweepProgress& progress,
                       std::vector<jobspec::GemmRate>* entries) {
  if (sizes.empty()) return absl::OkStatus();
  const int64_t top = *std::max_element(sizes.begin(), sizes.end());
  const size_t es = kernels::ElemBytes(type), most = static_cast<size_t>(top) * static_cast<size_t>(top);
  // The largest shape's operands: inp (m, k), weight (k, n), out and dout (m, n), dinp (m, k),
  // dweight (k, n) fp32; a smaller shape uses each one's first elements.
  Buffer inp(be, most * es), weight(be, most * es), out(be, most * es), dout(be, most * es), dinp(be, most * es),
      dweight(be, most * sizeof(float));
  for (const Buffer* b : {&inp, &weight, &out, &dout, &dinp, &dweight}) {
    if (!b->get()) {
      RETURN_IF_ERROR(be.Synchronize());
      return absl::ResourceExhaustedError(
          absl::StrFormat("gemm sweep: no device memory for %d x %d operands", top, top));
    }
  }
  {  // uniform in [-0.5, 0.5), a block of it copied over each input
    const size_t block = std::min<size_t>(most, size_t{1} << 22);
    std::vector<float> f(block);
    std::vector<uint16_t> h(block);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < block; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      f[i] = static_cast<float>((x >> 40) & 0xffff) / 65536.0f - 0.5f;
      h[i] = kernels::Of16(f[i], type == kernels::Precision::kFp32 ? kernels::Precision::kBf16 : type);
    }
    const void* src = type == kernels::Precision::kFp32 ? static_cast<const void*>(f.data()) : h.data();
    for (const Buffer* b : {&inp, &weight, &dout}) {
      for (size_t at = 0; at < most; at += block) {
        be.CopyToDevice(static_cast<char*>(b->get()) + at * es, src, std::min(block, most - at) * es);
      }
    }
    be.Zero(dweight.get(), most * sizeof(float));
    RETURN_IF_ERROR(be.Synchronize());
  }
  const int precision = type == kernels::Precision::kFp32 ? 1 : 0;
  for (int64_t m : sizes) {
    for (int64_t n : sizes) {
      for (int64_t k : sizes) {
        const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
        const kernels::Ptr x(inp.get(), type), y(out.get(), type), dy(dout.get(), type), dx(dinp.get(), type);
        const kernels::Ptr w(weight.get(), type);
        auto tf = TimeCall(be, o, [&] { be.MatmulForward(y, x, w, nullptr, M, K, N); });
        auto tb = TimeCall(be, o, [&] {
          be.MatmulBackward(dx, static_cast<float*>(dweight.get()), nullptr, dy, x, w, M, K, N);
        });
        const std::string shape =
            absl::StrFormat("%s m %d n %d k %d", kernels::PrecisionName(type), m, n, k);
        if (!tf.ok() || !tb.ok()) {
          const absl::Status& s = tf.ok() ? tb.status() : tf.status();
          return absl::Status(s.code(), absl::StrCat("gemm sweep: ", shape, ": ", s.message()));
        }
        jobspec::GemmRate e;
        e.m = m, e.n = n, e.k = k, e.precision = precision;
        const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
        e.fwd = flops / *tf;
        e.bwd = 2 * flops / *tb;
        entries->push_back(e);
        ++*done;
        if (progress.line) {
          progress.line(absl::StrFormat("[%*d/%d] %s: forward %.4g TFLOP/s (%.4g ms), backward %.4g TFLOP/s (%.4g ms)",
                                        static_cast<int>(std::to_string(total).size()), *done, total, shape,
                                        e.fwd / 1e12, *tf * 1e3, e.bwd / 1e12, *tb * 1e3));
        }
      }
    }
  }
  return absl::OkStatus();
}

// The profile with these entries, its single rates the entries' medians per precision.
absl::StatusOr<jobspec::DeviceProfile> WithTable(jobspec::DeviceProfile p,
                                                 const std::vector<jobspec::GemmRate>& entries) {
  ASSIGN_OR_RETURN(p.gemm_table, jobspec::GemmTable::Make(entries));
  for (int precision = 0; precision < 2; ++precision) {
    std::vector<double> fwd, bwd;
    for (const jobspec::GemmRate& e : entries) {
      if (e.precision == precision) fwd.push_back(e.fwd), bwd.push_back(e.bwd);
    }
    if (fwd.empty()) continue;
    p.gemm_fwd[precision] = Median(fwd);
    p.gemm_bwd[precision] = Median(bwd);
  }
  return p;
}

}  // namespace

absl::StatusOr<std::string> BuiltinProfileOf(const std::string& description) {
  for (const char* name : {"H200", "H100", "A100"}) {
    if (absl::StrContains(description, name)) return absl::AsciiStrToLower(name);
  }
  return absl::NotFoundError(absl::StrCat("no built-in profile names the device '", description, "'"));
}

absl::StatusOr<jobspec::DeviceProfile> GemmSweep(const SweepOptions& o, const jobspec::DeviceProfile* base,
                                                 const SweepProgress& progress) {
  if (o.repeats < 1) return absl::InvalidArgumentError("gemm sweep: repeats must be >= 1");
  if (o.bf16_sizes.empty() && o.fp32_sizes.empty()) {
    return absl::InvalidArgumentError("gemm sweep: no sizes to measure");
  }
  for (const auto* sizes : {&o.bf16_sizes, &o.fp32_sizes}) {
    std::vector<int64_t> sorted = *sizes;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) {
      if (sorted[i] < 1 || sorted[i] > (int64_t{1} << 20)) {
        return absl::InvalidArgumentError(absl::StrCat("gemm sweep: size ", sorted[i], " is not in [1, 1048576]"));
      }
      if (i > 0 && sorted[i] == sorted[i - 1]) {
        return absl::InvalidArgumentError(absl::StrCat("gemm sweep: size ", sorted[i], " is given twice"));
      }
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::Backend> be, kernels::CreateBackend(o.kind, o.device));
  jobspec::DeviceProfile profile;
  if (base) {
    profile = *base;
  } else {
    auto name = BuiltinProfileOf(be->Describe());
    if (!name.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("gemm sweep: ", name.status().message(),
                                                     ": give the rest of the profile (--base h100, h200, a100 or a "
                                                     "profile file)"));
    }
    ASSIGN_OR_RETURN(profile, jobspec::BuiltinProfile(*name));
  }
  const std::string base_name = profile.name;
  if (!absl::EndsWith(profile.name, "-sweep")) profile.name = absl::StrCat(profile.name, "-sweep");
  profile.gemm_table = {};
  auto cube = [](const std::vector<int64_t>& s) { return static_cast<int>(s.size() * s.size() * s.size()); };
  const int total = cube(o.bf16_sizes) + cube(o.fp32_sizes);
  auto range = [](const std::vector<int64_t>& s) {
    if (s.empty()) return std::string("none");
    const size_t shapes = s.size() * s.size() * s.size();
    return absl::StrFormat("%d shape%s, %d..%d", shapes, shapes == 1 ? "" : "s", *std::min_element(s.begin(), s.end()),
                           *std::max_element(s.begin(), s.end()));
  };
  if (progress.line) {
    progress.line(absl::StrFormat("on %s: bf16 %s, fp32 %s (m, n, k each); %d timed batches of at least "
                                  "%.3g ms a direction and shape; the rest of the profile from '%s'",
                                  be->Describe(), range(o.bf16_sizes), range(o.fp32_sizes), o.repeats,
                                  o.min_batch_s * 1e3, base_name));
  }
  std::vector<jobspec::GemmRate> entries;
  int done = 0;
  for (const auto& [type, sizes] : {std::pair{kernels::Precision::kBf16, &o.bf16_sizes},
                                    std::pair{kernels::Precision::kFp32, &o.fp32_sizes}}) {
    if (sizes->empty()) continue;
    RETURN_IF_ERROR(SweepGrid(*be, o, type, *sizes, &done, total, progress, &entries));
    ASSIGN_OR_RETURN(jobspec::DeviceProfile so_far, WithTable(profile, entries));
    if (progress.grid_done) RETURN_IF_ERROR(progress.grid_done(so_far));
  }
  return WithTable(profile, entries);
}

}  // namespace gantry::calibrate
