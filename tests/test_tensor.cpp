// test_tensor.cpp — Tensor creation, access, reshape, comparison, formatting, allocator reuse.
#include <ascan/ascan.hpp>
#include <gtest/gtest.h>

namespace {

TEST(Tensor, FromShapeAndAccess) {
  auto t = ascan::Tensor<float>::from({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.shape(), (ascan::Shape{2, 3}));
  EXPECT_EQ(t(1, 2), 6.0f);
  EXPECT_EQ(t.at({0, 1}), 2.0f);
  EXPECT_THROW(t(2, 0), ascan::Error);
  EXPECT_THROW(ascan::Tensor<float>::from({1, 2, 3}, {2, 2}), ascan::Error);
}

}  // namespace
