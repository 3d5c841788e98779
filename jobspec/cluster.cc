#include "jobspec/cluster.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/status.h"
#include "jobspec/yaml_fields.h"
#include "yaml-cpp/yaml.h"

namespace gantry::jobspec {

namespace {

// H200 (SXM, 141 GB): the per-op rates `bench/kernels/ops_bench` measured on one (docs/perf/gpu.md,
// "Tensor cores through cuDNN ...", commit c1d481d; GPT-2 124M's shapes, B x T = 65,536 rows):
// GEMMs forward 691, 691, 768 TFLOP/s (qkv both layouts, fc proj: mean 717), backward 609, 639,
// 705 (mean 651); cuDNN attention 325 forward, 228 backward (causal FLOPs); the fused fp32
// kernels 20 and 15; the memory-bound ops (LayerNorm 2,915 / 2,283, residual 4,084, GELU
// backward 3,527, AdamW 3,686 GB/s: mean 3,300). Peak: NVIDIA's datasheet, 989 TFLOP/s dense
// bf16, 67 fp32, HBM3e 4.8 TB/s. fp32 GEMMs were not measured: 67 TFLOP/s at the bf16 GEMMs'
// achieved fraction (0.70). Offload: a DGX host's memory bandwidth (about 300 GB/s for 8
// GPUs) over AdamW's 28 bytes a parameter, per GPU (about 1.3e9/s: 1e9 taken), and PCIe Gen5
// x16 at 40 GB/s.
DeviceProfile H200() {
  DeviceProfile p;
  p.name = "h200";
  p.memory = 141e9;
  p.peak_flops = 989e12;
  p.gemm_fwd[0] = 717e12, p.gemm_bwd[0] = 651e12;
  p.gemm_fwd[1] = p.gemm_bwd[1] = 67e12 * 0.70;
  p.attention_fwd[0] = 325e12, p.attention_bwd[0] = 228e12;
  p.attention_fwd[1] = 20e12, p.attention_bwd[1] = 15e12;
  p.memory_bandwidth = 3.3e12;
  p.launch = 4e-6;
  p.host_adamw = 1e9;
  p.host_link = 40e9;
  return p;
}

// H100 (SXM, 80 GB): the same GH100 chip at the same clocks as the H200 (989 TFLOP/s bf16 on
// both datasheets), so the same compute rates (docs/perf/gpu.md's H100 runs measured the fused
// attention at the H200's: forward 60.6 ms for 12 layers at B 64, 5.05 ms a layer, against the
// H200's 5.03), and the memory-bound ops at HBM3's 3.35 TB/s against HBM3e's 4.8.
DeviceProfile H100() {
  DeviceProfile p = H200();
  p.name = "h100";
  p.memory = 80e9;
  p.memory_bandwidth = 3.3e12 * 3.35 / 4.8;
  return p;
}

// A100 (SXM, 80 GB), from NVIDIA's A100 datasheet: 312 TFLOP/s dense bf16/fp16, 19.5 fp32,
// HBM2e 2,039 GB/s; each op at the fraction of its peak the H200 achieves (the same libraries:
// cuBLAS, cuDNN), PCIe Gen4 x16 at 20 GB/s.
DeviceProfile A100() {
  const DeviceProfile h = H200();
  DeviceProfile p = h;
  p.name = "a100";
  p.memory = 80e9;
  p.peak_flops = 312e12;
  const double half = 312.0 / 989.0, single = 19.5 / 67.0;
  for (double* r : {&p.gemm_fwd[0], &p.gemm_bwd[0], &p.attention_fwd[0], &p.attention_bwd[0]}) *r *= half;
  for (double* r : {&p.gemm_fwd[1], &p.gemm_bwd[1], &p.attention_fwd[1], &p.attention_bwd[1]}) *r *= single;
  p.memory_bandwidth = h.memory_bandwidth * 2.039 / 4.8;
  p.host_link = 20e9;
  return p;
}

// NVLink and InfiniBand as NCCL's collectives achieve them: about 80% of a link's one-way rate
// (nccl-tests' bus bandwidth on DGX systems). DGX H100/H200: NVLink 4, 900 GB/s a GPU both
// ways (450 one way); 8 ConnectX-7 at 400 Gb/s, one a GPU (50 GB/s). DGX A100: NVLink 3, 600
// GB/s (300 one way); 8 HDR at 200 Gb/s (25 GB/s).
ClusterSpec Dgx(const std::string& name, DeviceProfile d, double nvlink_one_way, double nic) {
  ClusterSpec c;
  c.name = name;
  c.gpus_per_node = 8;
  c.device = std::move(d);
  c.intra = {0.8 * nvlink_one_way, 3e-6};
  c.inter = {0.8 * nic, 6e-6};
  return c;
}

// A mapping's keys, each read by its handler; an unknown key or a missing required one is an
// error naming the field (yaml_fields.h).
struct Fields {
  std::string what;  // "cluster", "profile"
  std::map<std::string, FieldHandler> read;
  std::vector<std::string> required;

  absl::Status Visit(const YAML::Node& node, const std::string& prefix) const {
    return ReadSection(what, node, prefix, read, required);
  }
};

// A positive number into *out, times scale.
FieldHandler Number(const std::string& what, double* out,
                    double scale, bool zero_ok = false) {
  return [=](const YAML::Node& n, const std::string& field) {
    double v = 0;
    try {
      if (!n.IsScalar()) throw YAML::Exception(YAML::Mark(), "not a scalar");
      v = n.as<double>();
    } catch (const YAML::Exception&) {
      return FieldError(what, field, "must be a number");
    }
    if (!std::isfinite(v) || v < 0 || (v == 0 && !zero_ok)) {
      return FieldError(what, field, zero_ok ? "must be >= 0" : "must be > 0");
    }
    *out = v * scale;
    return absl::OkStatus();
  };
}

absl::StatusOr<YAML::Node> Load(const std::string& what, const std::string& yaml) {
  try {
    return YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not YAML: ", e.what()));
  }
}

const char* PrecisionKey(int precision) { return precision == 0 ? "bf16" : "fp32"; }

// gemm_table: a sequence of {precision, m, n, k, fwd_tflops, bwd_tflops}, a grid per precision
// (GemmTable::Make). Errors name the entry: "gemm_table[3].m".
absl::StatusOr<GemmTable> ReadGemmTable(const YAML::Node& node, const std::string& field) {
  const std::string w = "profile";
  if (!node.IsSequence()) {
    return FieldError(w, field, "must be a sequence of {precision, m, n, k, fwd_tflops, bwd_tflops}");
  }
  std::vector<GemmRate> entries;
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string here = absl::StrCat(field, "[", i, "]");
    GemmRate e;
    double dims[3] = {0, 0, 0};
    Fields f{w, {}, {"precision", "m", "n", "k", "fwd_tflops", "bwd_tflops"}};
    f.read["precision"] = [&](const YAML::Node& n, const std::string& name) {
      const std::string v = n.IsScalar() ? n.Scalar() : "";
      if (v != "bf16" && v != "fp32") return FieldError(w, name, "must be bf16 (the 16-bit rates) or fp32");
      e.precision = v == "bf16" ? 0 : 1;
      return absl::OkStatus();
    };
    const char* keys[3] = {"m", "n", "k"};
    for (int d = 0; d < 3; ++d) f.read[keys[d]] = Number(w, &dims[d], 1);
    f.read["fwd_tflops"] = Number(w, &e.fwd, 1e12);
    f.read["bwd_tflops"] = Number(w, &e.bwd, 1e12);
    RETURN_IF_ERROR(f.Visit(node[i], here));
    for (int d = 0; d < 3; ++d) {
      if (dims[d] != std::floor(dims[d]) || dims[d] > 1e15) {
        return FieldError(w, absl::StrCat(here, ".", keys[d]), "must be a whole number");
      }
    }
    e.m = static_cast<int64_t>(dims[0]), e.n = static_cast<int64_t>(dims[1]), e.k = static_cast<int64_t>(dims[2]);
    entries.push_back(e);
  }
  auto table = GemmTable::Make(std::move(entries));
  if (!table.ok()) return FieldError(w, field, std::string(table.status().message()));
  return table;
}

absl::Status ReadProfile(const YAML::Node& root, const std::string& prefix, DeviceProfile* p) {
  const std::string w = "profile";
  auto rates = [&](double* fwd, double* bwd) {  // [0] 16-bit, [1] fp32
    Fields f{w, {}, {"bf16_fwd", "bf16_bwd", "fp32_fwd", "fp32_bwd"}};
    f.read["bf16_fwd"] = Number(w, &fwd[0], 1e12);
    f.read["bf16_bwd"] = Number(w, &bwd[0], 1e12);
    f.read["fp32_fwd"] = Number(w, &fwd[1], 1e12);
    f.read["fp32_bwd"] = Number(w, &bwd[1], 1e12);
    return f;
  };
  Fields f{w, {}, {"name", "memory_gb", "peak_tflops", "gemm_tflops", "memory_gbs"}};
  f.read["name"] = [&](const YAML::Node& n, const std::string& field) {
    if (!n.IsScalar() || n.Scalar().empty()) return FieldError(w, field, "must be a name");
    p->name = n.Scalar();
    return absl::OkStatus();
  };
  f.read["memory_gb"] = Number(w, &p->memory, 1e9);
  f.read["peak_tflops"] = Number(w, &p->peak_flops, 1e12);
  f.read["gemm_tflops"] = [&, rates](const YAML::Node& n, const std::string& field) {
    return rates(p->gemm_fwd, p->gemm_bwd).Visit(n, field);
  };
  f.read["attention_tflops"] = [&, rates](const YAML::Node& n, const std::string& field) {
    return rates(p->attention_fwd, p->attention_bwd).Visit(n, field);
  };
  f.read["memory_gbs"] = Number(w, &p->memory_bandwidth, 1e9);
  f.read["launch_us"] = Number(w, &p->launch, 1e-6, true);
  f.read["host_adamw_gparams"] = Number(w, &p->host_adamw, 1e9, true);
  f.read["host_link_gbs"] = Number(w, &p->host_link, 1e9, true);
  f.read["comm_compute_cost"] = Number(w, &p->comm_compute_cost, 1, true);
  f.read["gemm_table"] = [&](const YAML::Node& n, const std::string& field) -> absl::Status {
    ASSIGN_OR_RETURN(p->gemm_table, ReadGemmTable(n, field));
    return absl::OkStatus();
  };
  f.read["unfused_attention"] = [&](const YAML::Node& n, const std::string& field) {
    try {
      p->unfused_attention = n.as<bool>();
    } catch (const YAML::Exception&) {
      return FieldError(w, field, "must be true or false");
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(f.Visit(root, prefix));
  if (!p->unfused_attention && p->attention_fwd[0] <= 0) {
    return FieldError(w, prefix.empty() ? "attention_tflops" : prefix + ".attention_tflops",
                      "is required unless unfused_attention is true");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GemmTable> GemmTable::Make(std::vector<GemmRate> entries) {
  GemmTable t;
  auto name = [](size_t i, const GemmRate& e) {
    return absl::StrFormat("entry %d (%s m %d n %d k %d)", i, PrecisionKey(e.precision == 0 ? 0 : 1), e.m, e.n, e.k);
  };
  std::vector<double> values[2][3];
  for (size_t i = 0; i < entries.size(); ++i) {
    const GemmRate& e = entries[i];
    if (e.precision != 0 && e.precision != 1) {
      return absl::InvalidArgumentError(
          absl::StrFormat("entry %d: precision index %d is neither 0 (16-bit) nor 1 (fp32)", i, e.precision));
    }
    if (e.m < 1 || e.n < 1 || e.k < 1) return absl::InvalidArgumentError(name(i, e) + ": m, n and k must be >= 1");
    if (!(e.fwd > 0) || !(e.bwd > 0) || !std::isfinite(e.fwd) || !std::isfinite(e.bwd)) {
      return absl::InvalidArgumentError(name(i, e) + ": its rates must be > 0");
    }
    const int64_t dims[3] = {e.m, e.n, e.k};
    for (int d = 0; d < 3; ++d) values[e.precision][d].push_back(std::log2(static_cast<double>(dims[d])));
  }
  for (int p = 0; p < 2; ++p) {
    Grid& g = t.grid_[p];
    for (int d = 0; d < 3; ++d) {
      std::vector<double>& a = values[p][d];
      std::sort(a.begin(), a.end());
      a.erase(std::unique(a.begin(), a.end()), a.end());
      g.axis[d] = a;
    }
    g.rates.assign(2 * g.axis[0].size() * g.axis[1].size() * g.axis[2].size(), 0.0);
  }
  std::map<std::tuple<int, int64_t, int64_t, int64_t>, size_t> seen;
  for (size_t i = 0; i < entries.size(); ++i) {
    const GemmRate& e = entries[i];
    auto [it, fresh] = seen.emplace(std::make_tuple(e.precision, e.m, e.n, e.k), i);
    if (!fresh) return absl::InvalidArgumentError(absl::StrFormat("%s repeats entry %d", name(i, e), it->second));
    Grid& g = t.grid_[e.precision];
    size_t at[3];
    const int64_t dims[3] = {e.m, e.n, e.k};
    for (int d = 0; d < 3; ++d) {
      at[d] = std::lower_bound(g.axis[d].begin(), g.axis[d].end(), std::log2(static_cast<double>(dims[d]))) -
              g.axis[d].begin();
    }
    const size_t idx = (at[0] * g.axis[1].size() + at[1]) * g.axis[2].size() + at[2];
    g.rates[2 * idx] = e.fwd;
    g.rates[2 * idx + 1] = e.bwd;
  }
  for (int p = 0; p < 2; ++p) {  // every grid point measured
    const Grid& g = t.grid_[p];
    for (size_t i = 0; i < g.axis[0].size(); ++i) {
      for (size_t j = 0; j < g.axis[1].size(); ++j) {
        for (size_t l = 0; l < g.axis[2].size(); ++l) {
          if (g.rates[2 * ((i * g.axis[1].size() + j) * g.axis[2].size() + l)] > 0) continue;
          return absl::InvalidArgumentError(absl::StrFormat(
              "the %s entries do not form a grid of their m, n and k values: m %.0f n %.0f k %.0f is missing",
              PrecisionKey(p), std::exp2(g.axis[0][i]), std::exp2(g.axis[1][j]), std::exp2(g.axis[2][l])));
        }
      }
    }
  }
  t.entries_ = std::move(entries);
  return t;
}

double GemmTable::Rate(int precision, bool backward, double m, double n, double k) const {
  const Grid& g = grid_[precision];
  const double x[3] = {std::log2(std::max(1.0, m)), std::log2(std::max(1.0, n)), std::log2(std::max(1.0, k))};
  size_t lo[3];
  double t[3];
  for (int d = 0; d < 3; ++d) {
    const std::vector<double>& a = g.axis[d];
    if (a.size() == 1 || x[d] <= a.front()) {
      lo[d] = 0, t[d] = 0;
    } else if (x[d] >= a.back()) {
      lo[d] = a.size() - 2, t[d] = 1;
    } else {
      lo[d] = std::upper_bound(a.begin(), a.end(), x[d]) - a.begin() - 1;
      t[d] = (x[d] - a[lo[d]]) / (a[lo[d] + 1] - a[lo[d]]);
    }
  }
  double r = 0;
  for (int c = 0; c < 8; ++c) {
    double weight = 1;
    size_t at[3];
    for (int d = 0; d < 3; ++d) {
      const bool up = (c >> d) & 1;
      weight *= up ? t[d] : 1 - t[d];
      at[d] = lo[d] + (up ? 1 : 0);
    }
    if (weight == 0) continue;  // (also every corner past a one-value axis)
    r += weight * g.rates[2 * ((at[0] * g.axis[1].size() + at[1]) * g.axis[2].size() + at[2]) + (backward ? 1 : 0)];
  }
  return r;
}

absl::StatusOr<DeviceProfile> BuiltinProfile(const std::string& name) {
  if (name == "h100") return H100();
  if (name == "h200") return H200();
  if (name == "a100") return A100();
  return absl::InvalidArgumentError(absl::StrCat("no built-in device profile '", name, "' (h100, h200, a100)"));
}

std::vector<std::string> ClusterPresetNames() { return {"dgx-h100", "dgx-h200", "dgx-a100"}; }

absl::StatusOr<ClusterSpec> ClusterPreset(const std::string& name) {
  if (name == "dgx-h100") return Dgx(name, H100(), 450e9, 50e9);
  if (name == "dgx-h200") return Dgx(name, H200(), 450e9, 50e9);
  if (name == "dgx-a100") return Dgx(name, A100(), 300e9, 25e9);
  return absl::InvalidArgumentError(
      absl::StrCat("no cluster preset '", name, "' (", absl::StrJoin(ClusterPresetNames(), ", "), ")"));
}

absl::StatusOr<DeviceProfile> ParseProfile(const std::string& yaml) {
  ASSIGN_OR_RETURN(YAML::Node root, Load("profile", yaml));
  DeviceProfile p;
  RETURN_IF_ERROR(ReadProfile(root, "", &p));
  return p;
}

absl::StatusOr<ClusterSpec> ParseCluster(const std::string& yaml, const std::string& dir) {
  ASSIGN_OR_RETURN(YAML::Node root, Load("cluster", yaml));
  const std::string w = "cluster";
  ClusterSpec c;
  int devices = 0;  // gpu, profile, device: exactly one
  Fields link_fields{w, {}, {"bandwidth_gbs", "latency_us"}};
  auto link = [&](Link* l) {
    return [&, l](const YAML::Node& n, const std::string& field) {
      Fields f = link_fields;
      f.read["bandwidth_gbs"] = Number(w, &l->bandwidth, 1e9);
      f.read["latency_us"] = Number(w, &l->latency, 1e-6, true);
      return f.Visit(n, field);
    };
  };
  Fields f{w, {}, {"gpus_per_node", "intra_node", "inter_node"}};
  f.read["name"] = [&](const YAML::Node& n, const std::string& field) {
    if (!n.IsScalar()) return FieldError(w, field, "must be a name");
    c.name = n.Scalar();
    return absl::OkStatus();
  };
  double gpn = 0;
  f.read["gpus_per_node"] = Number(w, &gpn, 1);
  f.read["intra_node"] = link(&c.intra);
  f.read["inter_node"] = link(&c.inter);
  f.read["intra_node_p2p"] = link(&c.intra_p2p);
  f.read["gpu"] = [&](const YAML::Node& n, const std::string& field) -> absl::Status {
    ++devices;
    auto p = BuiltinProfile(n.IsScalar() ? n.Scalar() : "");
    if (!p.ok()) return FieldError(w, field, std::string(p.status().message()));
    c.device = *p;
    return absl::OkStatus();
  };
  f.read["profile"] = [&](const YAML::Node& n, const std::string& field) -> absl::Status {
    ++devices;
    if (!n.IsScalar()) return FieldError(w, field, "must be a file name");
    std::filesystem::path path(n.Scalar());
    if (path.is_relative()) path = std::filesystem::path(dir) / path;
    auto text = ReadFileToString(path.string());
    if (!text.ok()) return FieldError(w, field, std::string(text.status().message()));
    auto p = ParseProfile(*text);
    if (!p.ok()) return FieldError(w, field, absl::StrCat(path.string(), ": ", p.status().message()));
    c.device = *p;
    return absl::OkStatus();
  };
  f.read["device"] = [&](const YAML::Node& n, const std::string& field) {
    ++devices;
    return ReadProfile(n, field, &c.device);
  };
  RETURN_IF_ERROR(f.Visit(root, ""));
  if (gpn != std::floor(gpn)) return FieldError(w, "gpus_per_node", "must be a whole number");
  c.gpus_per_node = static_cast<int>(gpn);
  if (devices != 1) return FieldError(w, "gpu", "give one of gpu (a built-in profile), profile (a file) or device");
  return c;
}

absl::StatusOr<ClusterSpec> LoadCluster(const std::string& name_or_path) {
  if (auto preset = ClusterPreset(name_or_path); preset.ok()) return preset;
  auto text = ReadFileToString(name_or_path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cluster '", name_or_path, "' is neither a preset (",
                                                   absl::StrJoin(ClusterPresetNames(), ", "),
                                                   ") nor a readable file: ", text.status().message()));
  }
  auto c = ParseCluster(*text, std::filesystem::path(name_or_path).parent_path().string());
  if (!c.ok()) return absl::InvalidArgumentError(absl::StrCat(name_or_path, ": ", c.status().message()));
  return c;
}

namespace {
void EmitProfile(YAML::Emitter& out, const DeviceProfile& p) {
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << p.name;
  out << YAML::Key << "memory_gb" << YAML::Value << p.memory / 1e9;
  out << YAML::Key << "peak_tflops" << YAML::Value << p.peak_flops / 1e12;
  auto rates = [&](const char* key, const double* fwd, const double* bwd) {
    out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "bf16_fwd" << YAML::Value << fwd[0] / 1e12 << YAML::Key << "bf16_bwd" << YAML::Value
        << bwd[0] / 1e12;
    out << YAML::Key << "fp32_fwd" << YAML::Value << fwd[1] / 1e12 << YAML::Key << "fp32_bwd" << YAML::Value
        << bwd[1] / 1e12;
    out << YAML::EndMap;
  };
  rates("gemm_tflops", p.gemm_fwd, p.gemm_bwd);
  if (!p.unfused_attention) rates("attention_tflops", p.attention_fwd, p.attention_bwd);
  out << YAML::Key << "memory_gbs" << YAML::Value << p.memory_bandwidth / 1e9;
  out << YAML::Key << "launch_us" << YAML::Value << p.launch * 1e6;
  out << YAML::Key << "host_adamw_gparams" << YAML::Value << p.host_adamw / 1e9;
  out << YAML::Key << "host_link_gbs" << YAML::Value << p.host_link / 1e9;
  out << YAML::Key << "comm_compute_cost" << YAML::Value << p.comm_compute_cost;
  out << YAML::Key << "unfused_attention" << YAML::Value << p.unfused_attention;
  if (!p.gemm_table.empty()) {
    out << YAML::Key << "gemm_table" << YAML::Value << YAML::BeginSeq;
    for (const GemmRate& e : p.gemm_table.entries()) {
      out << YAML::Flow << YAML::BeginMap;
      out << YAML::Key << "precision" << YAML::Value << PrecisionKey(e.precision);
      out << YAML::Key << "m" << YAML::Value << e.m << YAML::Key << "n" << YAML::Value << e.n;
      out << YAML::Key << "k" << YAML::Value << e.k;
      out << YAML::Key << "fwd_tflops" << YAML::Value << e.fwd / 1e12;
      out << YAML::Key << "bwd_tflops" << YAML::Value << e.bwd / 1e12;
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  out << YAML::EndMap;
}
}  // namespace

std::string ProfileYaml(const DeviceProfile& p) {
  YAML::Emitter out;
  out.SetDoublePrecision(12);
  EmitProfile(out, p);
  return std::string(out.c_str()) + "\n";
}

std::string ClusterYaml(const ClusterSpec& c) {
  YAML::Emitter out;
  out.SetDoublePrecision(12);
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << c.name;
  out << YAML::Key << "gpus_per_node" << YAML::Value << c.gpus_per_node;
  out << YAML::Key << "device" << YAML::Value;
  EmitProfile(out, c.device);
  std::vector<std::pair<const char*, Link>> links = {{"intra_node", c.intra}, {"inter_node", c.inter}};
  if (c.intra_p2p.bandwidth > 0) links.emplace_back("intra_node_p2p", c.intra_p2p);
  for (const auto& [key, l] : links) {
    out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "bandwidth_gbs" << YAML::Value << l.bandwidth / 1e9;
    out << YAML::Key << "latency_us" << YAML::Value << l.latency * 1e6;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace gantry::jobspec
