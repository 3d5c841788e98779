#include "common/buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace gantry {
namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}

FloatBuffer::~FloatBuffer() { std::free(data_); }

FloatBuffer& FloatBuffer::operator=(FloatBuffer&& o) noexcept {
  if (this != &o) {
    std::free(data_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

void FloatBuffer::Assign(size_t n) {
  std::free(data_);
  data_ = nullptr;
  size_ = 0;
  if (n == 0) return;
  const size_t bytes = n * sizeof(float);
  const size_t align = bytes >= kHugePage ? kHugePage : 64;
  const size_t rounded = (bytes + align - 1) / align * align;
  void* p = nullptr;
  if (posix_memalign(&p, align, rounded) != 0) throw std::bad_alloc();
  if (align == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);  // advisory: failure is harmless
  std::memset(p, 0, bytes);
  data_ = static_cast<float*>(p);
  size_ = n;
}

}  // namespace gantry
