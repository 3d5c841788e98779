#include "tests/fuzz/fuzz_util.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/file_util.h"

namespace gantry::fuzz {
namespace {

namespace fs = std::filesystem;

struct Scratch {
  std::string dir;
  Scratch() {
    const char* tmp = std::getenv("TMPDIR");
    std::string base = tmp != nullptr && *tmp ? tmp : (fs::is_directory("/dev/shm") ? "/dev/shm" : "/tmp");
    std::string templ = base + "/gantry-fuzz-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) {
      std::perror("gantry fuzz: mkdtemp");
      std::abort();
    }
    dir = templ;
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

}  // namespace

const std::string& ScratchDir() {
  static Scratch s;
  return s.dir;
}

std::string WriteScratch(const std::string& name, absl::string_view bytes) {
  const std::string path = ScratchDir() + "/" + name;
  // Not WriteFileAtomic: its fsync costs milliseconds, and the file is only read back.
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) ||
      std::fclose(f) != 0) {
    std::perror(("gantry fuzz: writing " + path).c_str());
    std::abort();
  }
  return path;
}

uint8_t Reader::U8() { return p_ < end_ ? *p_++ : 0; }
uint16_t Reader::U16() { return static_cast<uint16_t>(U8() | (U8() << 8)); }
uint32_t Reader::U32() { return static_cast<uint32_t>(U16()) | (static_cast<uint32_t>(U16()) << 16); }
uint64_t Reader::U64() { return static_cast<uint64_t>(U32()) | (static_cast<uint64_t>(U32()) << 32); }

std::string Reader::Bytes(size_t n) {
  n = std::min(n, left());
  std::string out(reinterpret_cast<const char*>(p_), n);
  p_ += n;
  return out;
}

std::pair<std::string, std::string> SplitOnce(absl::string_view in, absl::string_view sep) {
  const size_t at = in.find(sep);
  if (at == absl::string_view::npos) return {std::string(in), std::string()};
  return {std::string(in.substr(0, at)), std::string(in.substr(at + sep.size()))};
}

std::vector<std::pair<std::string, std::string>> SplitFiles(absl::string_view in, const std::string& first_name) {
  constexpr absl::string_view kMarker = "\n%%file ";
  std::vector<std::pair<std::string, std::string>> files;
  auto add = [&](std::string name, absl::string_view bytes) {
    for (auto& f : files) {
      if (f.first == name) {
        f.second = std::string(bytes);
        return;
      }
    }
    files.emplace_back(std::move(name), std::string(bytes));
  };
  size_t at = in.find(kMarker);
  add(first_name, in.substr(0, at));
  while (at != absl::string_view::npos) {
    const size_t name_begin = at + kMarker.size();
    const size_t eol = in.find('\n', name_begin);
    const absl::string_view raw = in.substr(name_begin, eol == absl::string_view::npos ? absl::string_view::npos
                                                                                         : eol - name_begin);
    std::string name;
    for (char ch : raw) {
      if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-') name.push_back(ch);
    }
    if (name.size() > 100) name.resize(100);  // a file system's names end at 255 bytes
    if (name.empty() || name == "." || name == "..") name = "unnamed";
    const size_t body = eol == absl::string_view::npos ? in.size() : eol + 1;
    at = in.find(kMarker, body);
    add(std::move(name), in.substr(body, at == absl::string_view::npos ? absl::string_view::npos : at - body));
  }
  return files;
}

std::string JoinFiles(const std::vector<std::pair<std::string, std::string>>& files) {
  std::string out;
  for (size_t i = 0; i < files.size(); ++i) {
    if (i > 0) out += "\n%%file " + files[i].first + "\n";
    out += files[i].second;
  }
  return out;
}

std::string WriteScratchDir(const std::string& name, const std::vector<std::pair<std::string, std::string>>& files) {
  const fs::path dir = fs::path(ScratchDir()) / name;
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "gantry fuzz: creating %s: %s\n", dir.c_str(), ec.message().c_str());
    std::abort();
  }
  for (const auto& [file, bytes] : files) WriteScratch(name + "/" + file, bytes);
  return dir.string();
}

bool ValidUtf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n;
  }
  return true;
}

}  // namespace gantry::fuzz
