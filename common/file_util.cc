#include "absl/strings/string_view.h"
#include "common/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gantry {

namespace {

class FileSource final : public ByteSource {
 public:
  FileSource(int fd, size_t size, std::string path) : fd_(fd), size_(size), path_(std::move(path)) {}
  ~FileSource() override { ::close(fd_); }
  size_t size() const override { return size_; }
  absl::Status ReadAt(size_t offset, size_t n, void* dst) const override {
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd_, static_cast<char*>(dst) + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return absl::DataLossError(absl::StrCat(path_, ": short read at byte ", offset + done));
      done += static_cast<size_t>(r);
    }
    return absl::OkStatus();
  }

 private:
  const int fd_;
  const size_t size_;
  const std::string path_;
};

}  // namespace

absl::Status StringSource::ReadAt(size_t offset, size_t n, void* dst) const {
  if (offset > bytes_.size() || n > bytes_.size() - offset) {
    return absl::OutOfRangeError(absl::StrCat("bytes [", offset, ", +", n, ") beyond ", bytes_.size()));
  }
  // Not memcpy for n 0: dst may then be null (an empty vector's data()), which memcpy may not
  // take even for no bytes (found by tests/fuzz/safetensors_fuzz: an empty tensor's ReadF32).
  if (n > 0) std::memcpy(dst, bytes_.data() + offset, n);
  return absl::OkStatus();
}

SegmentsSource::SegmentsSource(std::string head, std::vector<absl::string_view> runs) : head_(std::move(head)) {
  runs_.push_back(head_);
  for (absl::string_view r : runs) {
    if (!r.empty()) runs_.push_back(r);
  }
  for (absl::string_view r : runs_) {
    starts_.push_back(size_);
    size_ += r.size();
  }
}

absl::Status SegmentsSource::ReadAt(size_t offset, size_t n, void* dst) const {
  if (offset > size_ || n > size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("bytes [", offset, ", +", n, ") beyond ", size_));
  }
  char* out = static_cast<char*>(dst);
  // The run holding `offset`, then on through the runs until n bytes are copied.
  size_t r = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin()) - 1;
  for (; n > 0; ++r) {
    const size_t in = offset - starts_[r], k = std::min(n, runs_[r].size() - in);
    std::memcpy(out, runs_[r].data() + in, k);
    out += k;
    offset += k;
    n -= k;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const ByteSource>> OpenFileSource(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::UnavailableError(absl::StrCat(path, ": ", std::strerror(err)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  return std::make_shared<FileSource>(fd, static_cast<size_t>(st.st_size), path);
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  auto source = OpenFileSource(path);
  if (!source.ok()) return source.status();
  std::string out((*source)->size(), '\0');
  if (auto s = (*source)->ReadAt(0, out.size(), out.data()); !s.ok()) return s;
  return out;
}

absl::Status WriteFileAtomic(const std::string& path, absl::string_view contents) {
  return WriteFileAtomic(path, std::vector<absl::string_view>{contents});
}

absl::Status WriteFileAtomic(const std::string& path, const std::vector<absl::string_view>& pieces) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(tmp, ": ", std::strerror(errno)));
  }
  for (absl::string_view contents : pieces) {
    size_t done = 0;
    while (done < contents.size()) {
      ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        return absl::UnavailableError(absl::StrCat(tmp, ": write failed: ", std::strerror(err)));
      }
      done += static_cast<size_t>(n);
    }
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat(tmp, ": fsync/close failed"));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("rename to ", path, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace gantry
