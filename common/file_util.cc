#include "absl/strings/string_view.h"
#include "common/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gantry {

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
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
  std::string out;
  out.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return absl::DataLossError(absl::StrCat(path, ": short read at byte ", done));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
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
