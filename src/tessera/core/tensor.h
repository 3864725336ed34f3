// Tensor: a typed, shaped view of memory that something else owns (an Arena, a mapped file, a
// caller's buffer). Row-major; strides are in elements and default to contiguous. Views are
// cheap values: pass them by value, slice them, reshape contiguous ones. Ops take views, check
// shapes and dtypes at their entry, and hand raw pointers to the kernels (STYLE.md 2). A tensor
// knows the device its memory is on (core/device.h); views keep it.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "tessera/core/checked.h"
#include "tessera/core/device.h"
#include "tessera/core/dtype.h"

namespace tessera {

constexpr int kMaxDims = 6;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i < 0 ? i + rank_ : i]; }
  int64_t& operator[](int i) { return dims_[i < 0 ? i + rank_ : i]; }
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  std::string str() const;  // "[2, 3, 5]"
  static Shape of_rank(int rank);

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int rank_ = 0;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(void* data, Shape shape, DType dtype, Device device = Device::cpu());  // contiguous

  void* data() const { return data_; }
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data_);
  }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i]; }
  int rank() const { return shape_.rank(); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const {
    return checked_mul(static_cast<size_t>(numel()), dtype_size(dtype_), "tensor bytes");
  }
  int64_t stride(int i) const { return strides_[i < 0 ? i + rank() : i]; }
  bool is_contiguous() const;
  bool defined() const { return data_ != nullptr; }

  // A view of the same memory with another shape of equal numel; needs a contiguous tensor.
  Tensor reshape(Shape s) const;
  // Rows [begin, end) of dimension 0.
  Tensor slice0(int64_t begin, int64_t end) const;
  std::string str() const;  // "bfloat16[8, 1024, 768]"

 private:
  void* data_ = nullptr;
  Shape shape_;
  std::array<int64_t, kMaxDims> strides_{};
  DType dtype_ = DType::kF32;
  Device device_;
};

}  // namespace tessera
