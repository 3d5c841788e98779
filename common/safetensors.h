// Reading and writing the safetensors format (8-byte little-endian header length, a JSON
// header of {name: {dtype, shape, data_offsets}} plus optional "__metadata__", then the
// tensor bytes). Every field of a file is validated: a bad file is an error naming the file
// and the tensor, never a crash.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/file_util.h"

namespace gantry {

struct SafetensorInfo {
  std::string dtype;  // "F32", "F64", "BF16", "F16", "I32", "I64", ...
  std::vector<int64_t> shape;
  size_t begin = 0;  // byte range within the data section
  size_t end = 0;
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Reads and checks the header; tensors are read from the source when asked (positioned
  // reads straight into the caller's buffer), so a large file costs no copy of itself.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);
  static absl::StatusOr<SafetensorsFile> Open(std::shared_ptr<const ByteSource> source, std::string name);
  static absl::StatusOr<SafetensorsFile> FromBytes(std::string bytes, std::string name);

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool Has(const std::string& name) const { return tensors_.count(name) != 0; }

  // The tensor converted to fp32 (from F32, F64, BF16 or F16). If expected_shape is given,
  // a tensor of another shape is an InvalidArgument error naming both shapes.
  absl::StatusOr<std::vector<float>> ReadF32(const std::string& name,
                                             const std::vector<int64_t>* expected_shape = nullptr) const;
  // Reads into a caller buffer of exactly `count` elements.
  absl::Status ReadF32Into(const std::string& name, const std::vector<int64_t>& expected_shape,
                           float* out) const;
  absl::StatusOr<std::vector<int32_t>> ReadI32(const std::string& name) const;
  // Elements [begin, begin + count) of an F32 tensor, flattened, into out (a positioned read
  // of just those bytes when the file was opened with Open).
  absl::Status ReadF32Slice(const std::string& name, size_t begin, size_t count, float* out) const;

 private:
  absl::Status ParseHeader(const std::string& bytes, size_t file_size);  // bytes: at least the header
  absl::Status ReadRaw(const SafetensorInfo& info, void* dst) const;     // the tensor's bytes
  std::string path_;
  std::shared_ptr<const ByteSource> source_;
  size_t data_start_ = 0;
  std::map<std::string, SafetensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write. Data points at numel elements of the dtype's size.
struct TensorToWrite {
  std::string name;
  std::string dtype;  // "F32", "I32" or "BF16" (uint16_t bits)
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

std::string SerializeSafetensors(const std::vector<TensorToWrite>& tensors,
                                 const std::map<std::string, std::string>& metadata = {});
// Atomic: the file at `path` is either the old one or the whole new one.
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// The same file as a ByteSource over the tensors' memory (no copy): what WriteSafetensors
// would write, byte for byte. The tensors' data must outlive it.
std::shared_ptr<const ByteSource> SafetensorsSource(const std::vector<TensorToWrite>& tensors,
                                                   const std::map<std::string, std::string>& metadata = {});

std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace gantry
