#include "absl/strings/string_view.h"
#include "common/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace gantry {
namespace {

constexpr size_t kMaxHeaderBytes = 100u << 20;  // the format's own limit is 100 MB

size_t DtypeSize(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" ||
      dtype == "F8_E5M2")
    return 1;
  return 0;
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

int64_t SafetensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

namespace {


}  // namespace

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(std::shared_ptr<const ByteSource> source, OpenFileSource(path));
  return Open(std::move(source), path);
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(std::shared_ptr<const ByteSource> source, std::string name) {
  // Only the header is read now; tensors are read from the source when asked, straight
  // into the caller's buffer.
  const size_t size = source->size();
  std::string head(std::min<size_t>(size, 8), '\0');
  if (!source->ReadAt(0, head.size(), head.data()).ok()) {
    return absl::DataLossError(absl::StrCat(name, ": short read of the header length"));
  }
  uint64_t header_len = 0;
  if (head.size() == 8) std::memcpy(&header_len, head.data(), 8);
  if (head.size() == 8 && header_len <= kMaxHeaderBytes && header_len <= size - 8) {
    head.resize(8 + header_len);
    if (auto s = source->ReadAt(8, header_len, head.data() + 8); !s.ok()) {
      return absl::DataLossError(absl::StrCat(name, ": short read of the header: ", s.message()));
    }
  }
  SafetensorsFile f;
  f.path_ = std::move(name);
  RETURN_IF_ERROR(f.ParseHeader(head, size));
  f.source_ = std::move(source);
  return f;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::FromBytes(std::string bytes, std::string name) {
  return Open(std::make_shared<StringSource>(std::move(bytes)), std::move(name));
}

absl::Status SafetensorsFile::ParseHeader(const std::string& bytes, size_t file_size) {
  SafetensorsFile& f = *this;
  const std::string& p = f.path_;
  if (file_size < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat(p, ": not a safetensors file (", file_size, " bytes, need at least 8)"));
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > kMaxHeaderBytes || header_len > file_size - 8) {
    return absl::InvalidArgumentError(absl::StrCat(p, ": header length ", header_len,
                                                   " exceeds the file (", file_size,
                                                   " bytes): truncated or not safetensors"));
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header_len));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(p, ": header is not valid JSON: ", e.what()));
  }
  if (!header.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(p, ": header is not a JSON object"));
  }
  f.data_start_ = 8 + header_len;
  const size_t data_size = file_size - f.data_start_;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const auto& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(p, ": __metadata__ is not an object"));
      }
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat(p, ": __metadata__.", m.key(), " is not a string"));
        }
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(p, ": tensor '", key, "': ", what));
    };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets")) {
      return bad("entry needs dtype, shape and data_offsets");
    }
    SafetensorInfo info;
    if (!v["dtype"].is_string()) return bad("dtype is not a string");
    info.dtype = v["dtype"].get<std::string>();
    const size_t esize = DtypeSize(info.dtype);
    if (esize == 0) return bad(absl::StrCat("unknown dtype ", info.dtype));
    if (!v["shape"].is_array()) return bad("shape is not an array");
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return bad("shape has a bad dimension");
      info.shape.push_back(d.get<int64_t>());
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned()) {
      return bad("data_offsets must be two non-negative integers");
    }
    info.begin = off[0].get<uint64_t>();
    info.end = off[1].get<uint64_t>();
    if (info.begin > info.end || info.end > data_size) {
      return bad(absl::StrCat("data_offsets [", info.begin, ", ", info.end,
                              "] outside the data section of ", data_size,
                              " bytes (file truncated?)"));
    }
    // The element count and byte size, each product checked: [2^62, 4] would wrap (signed
    // overflow, undefined) to a size that matches a small byte range. numel() repeats these
    // products, so it cannot overflow for a tensor accepted here.
    int64_t numel = 1;
    for (int64_t d : info.shape) {
      if (__builtin_mul_overflow(numel, d, &numel)) {
        return bad(absl::StrCat("shape ", ShapeString(info.shape), " has more elements than 2^63"));
      }
    }
    uint64_t want = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(numel), static_cast<uint64_t>(esize), &want)) {
      return bad(absl::StrCat("shape ", ShapeString(info.shape), " of ", info.dtype, " needs more than 2^64 bytes"));
    }
    if (info.end - info.begin != want) {
      return bad(absl::StrCat("holds ", info.end - info.begin, " bytes but shape ",
                              ShapeString(info.shape), " of ", info.dtype, " needs ", want));
    }
    f.tensors_.emplace(key, std::move(info));
  }
  return absl::OkStatus();
}

absl::Status SafetensorsFile::ReadRaw(const SafetensorInfo& info, void* dst) const {
  return source_->ReadAt(data_start_ + info.begin, info.end - info.begin, dst);
}

absl::Status SafetensorsFile::ReadF32Into(const std::string& name,
                                          const std::vector<int64_t>& expected_shape,
                                          float* out) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat(path_, ": missing tensor '", name, "'"));
  }
  const SafetensorInfo& info = it->second;
  if (info.shape != expected_shape) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor '", name, "' has shape ",
                                                   ShapeString(info.shape), ", expected ",
                                                   ShapeString(expected_shape)));
  }
  const int64_t n = info.numel();
  if (info.dtype == "F32") return ReadRaw(info, out);  // straight into the caller's buffer
  std::string raw(info.end - info.begin, '\0');
  RETURN_IF_ERROR(ReadRaw(info, raw.data()));
  const char* src = raw.data();
  if (info.dtype == "F64") {
    for (int64_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, src + 8 * i, 8);
      out[i] = static_cast<float>(d);
    }
  } else if (info.dtype == "BF16") {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      uint32_t bits = static_cast<uint32_t>(h) << 16;
      std::memcpy(&out[i], &bits, 4);
    }
  } else if (info.dtype == "F16") {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      out[i] = HalfToFloat(h);
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor '", name, "' has dtype ",
                                                   info.dtype, ", expected a float type"));
  }
  return absl::OkStatus();
}

absl::Status SafetensorsFile::ReadF32Slice(const std::string& name, size_t begin, size_t count, float* out) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return absl::NotFoundError(absl::StrCat(path_, ": missing tensor '", name, "'"));
  const SafetensorInfo& info = it->second;
  if (info.dtype != "F32") {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor '", name, "' is ", info.dtype, ", a slice needs F32"));
  }
  if (begin + count > static_cast<size_t>(info.numel())) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": slice [", begin, ", +", count, ") of tensor '", name,
                                                   "' beyond its ", info.numel(), " elements"));
  }
  SafetensorInfo part = info;
  part.begin = info.begin + begin * sizeof(float);
  part.end = part.begin + count * sizeof(float);
  return ReadRaw(part, out);
}

absl::StatusOr<std::vector<float>> SafetensorsFile::ReadF32(
    const std::string& name, const std::vector<int64_t>* expected_shape) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat(path_, ": missing tensor '", name, "'"));
  }
  std::vector<float> out(static_cast<size_t>(it->second.numel()));
  RETURN_IF_ERROR(
      ReadF32Into(name, expected_shape ? *expected_shape : it->second.shape, out.data()));
  return out;
}

absl::StatusOr<std::vector<int32_t>> SafetensorsFile::ReadI32(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat(path_, ": missing tensor '", name, "'"));
  }
  const SafetensorInfo& info = it->second;
  std::string raw(info.end - info.begin, '\0');
  RETURN_IF_ERROR(ReadRaw(info, raw.data()));
  const char* src = raw.data();
  std::vector<int32_t> out(static_cast<size_t>(info.numel()));
  if (info.dtype == "I32") {
    // Not for no elements: an empty vector's data() may be null, which memcpy may not take
    // even for 0 bytes (found by tests/fuzz/safetensors_fuzz: an empty I32 tensor).
    if (!out.empty()) std::memcpy(out.data(), src, out.size() * 4);
  } else if (info.dtype == "I64") {
    for (size_t i = 0; i < out.size(); ++i) {
      int64_t v;
      std::memcpy(&v, src + 8 * i, 8);
      out[i] = static_cast<int32_t>(v);
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": tensor '", name, "' has dtype ", info.dtype, ", expected I32/I64"));
  }
  return out;
}

namespace {

// The 8-byte length and the JSON header (padded to align the data); data_sizes gets each
// tensor's byte count.
std::string Header(const std::vector<TensorToWrite>& tensors, const std::map<std::string, std::string>& metadata,
                   std::vector<size_t>* data_sizes) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  std::vector<size_t> sizes;
  for (const auto& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const size_t bytes = static_cast<size_t>(n) * DtypeSize(t.dtype);
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    sizes.push_back(bytes);
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');  // align the data section
  const uint64_t len = h.size();
  std::string out(reinterpret_cast<const char*>(&len), 8);
  out.append(h);
  if (data_sizes) *data_sizes = std::move(sizes);
  return out;
}

}  // namespace

std::string SerializeSafetensors(const std::vector<TensorToWrite>& tensors,
                                 const std::map<std::string, std::string>& metadata) {
  std::vector<size_t> sizes;
  std::string out = Header(tensors, metadata, &sizes);
  for (size_t i = 0; i < tensors.size(); ++i) out.append(static_cast<const char*>(tensors[i].data), sizes[i]);
  return out;
}

namespace {
// The header, then each tensor's bytes where they are.
std::vector<absl::string_view> DataRuns(const std::vector<TensorToWrite>& tensors, const std::vector<size_t>& sizes) {
  std::vector<absl::string_view> runs;
  for (size_t i = 0; i < tensors.size(); ++i) runs.emplace_back(static_cast<const char*>(tensors[i].data), sizes[i]);
  return runs;
}
}  // namespace

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  // No copy of the whole file.
  std::vector<size_t> sizes;
  const std::string header = Header(tensors, metadata, &sizes);
  std::vector<absl::string_view> pieces = {header};
  for (absl::string_view r : DataRuns(tensors, sizes)) pieces.push_back(r);
  return WriteFileAtomic(path, pieces);
}

std::shared_ptr<const ByteSource> SafetensorsSource(const std::vector<TensorToWrite>& tensors,
                                                   const std::map<std::string, std::string>& metadata) {
  std::vector<size_t> sizes;
  std::string header = Header(tensors, metadata, &sizes);
  return std::make_shared<SegmentsSource>(std::move(header), DataRuns(tensors, sizes));
}

}  // namespace gantry
