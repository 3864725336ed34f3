#include "tessera/core/tensor.h"

#include <fmt/format.h>

#include "tessera/core/error.h"

namespace tessera {

Shape::Shape(std::initializer_list<int64_t> dims) {
  TESSERA_CHECK_SHAPE(dims.size() <= kMaxDims, "a tensor has at most {} dimensions, got {}", kMaxDims,
                      dims.size());
  for (int64_t d : dims) {
    TESSERA_CHECK_SHAPE(d >= 0, "dimension sizes must be >= 0, got {}", d);
    dims_[rank_++] = d;
  }
}

Shape Shape::of_rank(int rank) {
  TESSERA_ASSERT(rank >= 0 && rank <= kMaxDims);
  Shape s;
  s.rank_ = rank;
  return s;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) {
    if (__builtin_mul_overflow(n, dims_[i], &n))
      fail(ErrorKind::kShape, "shape {} has more elements than fit in 64 bits (a dimension far too large?)",
           str());
  }
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) s += fmt::format("{}{}", i ? ", " : "", dims_[i]);
  return s + "]";
}

std::string Device::str() const {
  return kind == DeviceKind::kCpu ? std::string("cpu") : fmt::format("cuda:{}", index);
}

Tensor::Tensor(void* data, Shape shape, DType dtype, Device device)
    : data_(data), shape_(shape), dtype_(dtype), device_(device) {
  int64_t s = 1;
  for (int i = shape_.rank() - 1; i >= 0; --i) {
    strides_[i] = s;
    s *= shape_[i];
  }
}

bool Tensor::is_contiguous() const {
  int64_t s = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != s) return false;
    s *= shape_[i];
  }
  return true;
}

Tensor Tensor::reshape(Shape s) const {
  TESSERA_CHECK_SHAPE(is_contiguous(), "reshape of a non-contiguous tensor {}", str());
  TESSERA_CHECK_SHAPE(s.numel() == numel(), "cannot reshape {} to {}", str(), s.str());
  return Tensor(data_, s, dtype_, device_);
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  TESSERA_CHECK_SHAPE(rank() >= 1 && 0 <= begin && begin <= end && end <= dim(0),
                      "slice [{}, {}) out of range for {}", begin, end, str());
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + begin * strides_[0] * static_cast<int64_t>(dtype_size(dtype_));
  t.shape_[0] = end - begin;
  return t;
}

std::string Tensor::str() const {
  // The device is named only off the host, so messages about CPU tensors read as before.
  if (device_.is_cpu()) return fmt::format("{}{}", dtype_name(dtype_), shape_.str());
  return fmt::format("{}{}@{}", dtype_name(dtype_), shape_.str(), device_.str());
}

}  // namespace tessera
