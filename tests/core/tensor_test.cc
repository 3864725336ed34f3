#include "tessera/core/tensor.h"

#include <gtest/gtest.h>

#include "tessera/core/arena.h"
#include "tessera/core/error.h"

namespace tessera {
namespace {

TEST(Tensor, ShapeAndStrides) {
  float buf[60];
  Tensor t(buf, Shape{3, 4, 5}, DType::kF32);
  EXPECT_EQ(t.numel(), 60);
  EXPECT_EQ(t.stride(0), 20);
  EXPECT_EQ(t.stride(-1), 1);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.str(), "float32[3, 4, 5]");
  Tensor r = t.reshape(Shape{12, 5});
  EXPECT_EQ(r.dim(0), 12);
  Tensor s = t.slice0(1, 3);
  EXPECT_EQ(s.ptr<float>(), buf + 20);
  EXPECT_EQ(s.dim(0), 2);
  EXPECT_THROW(t.reshape(Shape{7}), Error);
  EXPECT_THROW(t.slice0(2, 4), Error);
}

TEST(Arena, AlignsAndReportsWhenFull) {
  Arena a(1000, "test");
  EXPECT_EQ(a.capacity() % (2u << 20), 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.base()) % (2u << 20), 0u);
  void* p = a.allocate(3);
  void* q = a.allocate(5);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % Arena::kAlignment, 0u);
  EXPECT_NE(p, q);
  try {
    a.allocate(a.capacity());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("arena 'test' is full"), std::string::npos);
  }
  a.reset();
  EXPECT_EQ(a.used(), 0u);
  Tensor t = a.tensor(Shape{4, 4}, DType::kBF16);
  EXPECT_EQ(t.nbytes(), 32u);
}

}  // namespace
}  // namespace tessera
