// What the fuzz targets share: a scratch directory of their own, whole files written into
// it, and a byte reader for the structured targets (a record's length, then its bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace gantry::fuzz {

// A directory for this process's files, made once (under $TMPDIR, else /dev/shm when it
// exists: the targets write a file per input, and memory keeps that cheap), removed at exit.
const std::string& ScratchDir();
// Writes bytes to ScratchDir()/name (replacing it) and returns the path. Aborts if it
// cannot: a broken scratch directory is the harness's fault, not the input's.
std::string WriteScratch(const std::string& name, absl::string_view bytes);

// Reads fuzz bytes front to back; past the end every read gives zeros / empty strings, so a
// short input is a valid (short) program.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  bool empty() const { return p_ >= end_; }
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  uint8_t U8();
  uint16_t U16();  // little-endian
  uint32_t U32();
  uint64_t U64();
  // n bytes (fewer at the end).
  std::string Bytes(size_t n);
  // A 16-bit length, then that many bytes: one record of a structured input.
  std::string Record() { return Bytes(U16()); }
  std::string Rest() { return Bytes(left()); }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// Splits a text input at the first occurrence of sep: (before, after); no sep: (all, "").
std::pair<std::string, std::string> SplitOnce(absl::string_view in, absl::string_view sep);

// Whether s is well-formed UTF-8 (shortest forms, no surrogates, at most U+10FFFF): the
// targets whose round trips hold only for valid text check it first.
bool ValidUtf8(absl::string_view s);

// Several files in one input, for the targets that read a directory (a checkpoint, a model
// directory): the first file's bytes, then for each further file a line "%%file NAME" and
// its bytes:
//   <bytes of first_name>\n%%file NAME\n<bytes of NAME>\n%%file NAME2\n...
// (the newline before a marker belongs to the marker). A name is kept to [A-Za-z0-9._-]
// (others dropped) and 100 bytes so that it stays inside the directory; a later file of the same name
// replaces an earlier one.
std::vector<std::pair<std::string, std::string>> SplitFiles(absl::string_view in, const std::string& first_name);
// The inverse, for the corpus generator.
std::string JoinFiles(const std::vector<std::pair<std::string, std::string>>& files);
// Writes the files into a fresh directory under ScratchDir() (the previous input's removed)
// and returns its path.
std::string WriteScratchDir(const std::string& name, const std::vector<std::pair<std::string, std::string>>& files);

}  // namespace gantry::fuzz
