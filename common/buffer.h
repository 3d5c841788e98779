// A float array for large tensors: 2 MB aligned and advised for transparent huge pages
// (Debian's default THP mode is "madvise", so plain vectors get 4 KB pages and the GEMMs
// pay for TLB misses on multi-MB activations). Zero-filled on allocation.
#pragma once

#include <cstddef>

namespace gantry {

class FloatBuffer {
 public:
  FloatBuffer() = default;
  explicit FloatBuffer(size_t n) { Assign(n); }
  ~FloatBuffer();
  FloatBuffer(const FloatBuffer&) = delete;
  FloatBuffer& operator=(const FloatBuffer&) = delete;
  FloatBuffer(FloatBuffer&& o) noexcept : data_(o.data_), size_(o.size_) {
    o.data_ = nullptr;
    o.size_ = 0;
  }
  FloatBuffer& operator=(FloatBuffer&& o) noexcept;

  // Reallocates to n zeroed elements.
  void Assign(size_t n);
  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }
  float* begin() { return data_; }
  float* end() { return data_ + size_; }
  float& operator[](size_t i) { return data_[i]; }
  const float& operator[](size_t i) const { return data_[i]; }

 private:
  float* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace gantry
