// tensor.hpp — ascan::Tensor<T>: dynamic-rank, row-major, contiguous host tensor.
//
// A Tensor is a cheap handle: copying one shares its storage (like a shared_ptr), so passing
// tensors by value never copies elements. clone() makes a deep copy. Storage comes from the
// caching allocator (allocator.hpp). Supported element types: float, double, int32_t, int64_t.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <random>
#include <type_traits>
#include <vector>

#include "ascan/allocator.hpp"
#include "ascan/error.hpp"
#include "ascan/shape.hpp"

namespace ascan {

template <class T>
inline constexpr bool is_tensor_element_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
    std::is_same_v<T, int64_t>;

template <class T>
class Tensor {
  static_assert(is_tensor_element_v<T>,
                "ascan::Tensor<T>: T must be float, double, int32_t or int64_t");

 public:
  using value_type = T;

  // An empty tensor of shape [0]. It owns no storage (default-constructed tensors are placeholders
  // in containers and results, so they do not allocate).
  Tensor() : shape_{0} {}

  // Uninitialised elements (storage may hold stale values from the cache).
  static Tensor empty(Shape shape) { return Tensor(std::move(shape)); }

  static Tensor zeros(Shape shape) { return full(std::move(shape), T(0)); }

  static Tensor full(Shape shape, T value) {
    Tensor t(std::move(shape));
    std::fill_n(t.data_, t.numel_, value);
    return t;
  }

  // Takes the row-major values; throws ascan::Error when their count does not match the shape.
  static Tensor from(std::vector<T> values, Shape shape) {
    Tensor t(std::move(shape));
    if (static_cast<int64_t>(values.size()) != t.numel_)
      detail::raise("ascan::Tensor::from(): got {} values for shape {}, expected {}", values.size(),
                    format_shape(t.shape_), t.numel_);
    std::copy(values.begin(), values.end(), t.data_);
    return t;
  }

  // Uniform random values in [lo, hi) (integers: [lo, hi]) from a seeded 64-bit Mersenne
  // Twister, so the same seed gives the same tensor on every run.
  static Tensor random(Shape shape, uint64_t seed, T lo = T(0), T hi = T(1)) {
    Tensor t(std::move(shape));
    std::mt19937_64 gen(seed);
    for (int64_t i = 0; i < t.numel_; ++i) {
      if constexpr (std::is_floating_point_v<T>) {
        const double u = static_cast<double>(gen() >> 11) * 0x1.0p-53;
        t.data_[i] = static_cast<T>(lo + (hi - lo) * u);
      } else {
        const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
        t.data_[i] = static_cast<T>(lo + static_cast<T>(gen() % span));
      }
    }
    return t;
  }

  // Standard normal values (floating types), seeded as random().
  static Tensor randn(Shape shape, uint64_t seed) {
    static_assert(std::is_floating_point_v<T>, "ascan::Tensor::randn(): needs a floating type");
    Tensor t(std::move(shape));
    std::mt19937_64 gen(seed);
    for (int64_t i = 0; i < t.numel_; ++i) {  // Box-Muller, one value per pair of uniforms
      const double u1 = (static_cast<double>(gen() >> 11) + 1.0) * 0x1.0p-53;
      const double u2 = static_cast<double>(gen() >> 11) * 0x1.0p-53;
      t.data_[i] = static_cast<T>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    }
    return t;
  }

  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return numel_; }
  // Extent of `dim` (negative counts from the end); throws ascan::Error when out of range.
  int64_t size(int64_t dim) const {
    return shape_[resolve_dim(dim, rank(), "ascan::Tensor::size()", "the tensor")];
  }

  // Row-major elements. Handles share storage: writing through one is seen by all copies.
  T* data() { return data_; }
  const T* data() const { return data_; }

  // Bounds-checked element access by a full multi-index.
  T& at(std::initializer_list<int64_t> index) { return data_[offset(index)]; }
  const T& at(std::initializer_list<int64_t> index) const { return data_[offset(index)]; }
  template <class... I>
  T& operator()(I... i) { return at({static_cast<int64_t>(i)...}); }
  template <class... I>
  const T& operator()(I... i) const { return at({static_cast<int64_t>(i)...}); }

  // Same storage, new shape (one extent may be -1). Throws when the element count differs.
  Tensor reshape(Shape new_shape) const {
    int64_t known = 1, infer = -1;
    for (size_t i = 0; i < new_shape.size(); ++i) {
      if (new_shape[i] == -1) {
        if (infer >= 0)
          detail::raise("ascan::Tensor::reshape(): shape {} has more than one -1, expected at most one",
                        format_shape(new_shape));
        infer = static_cast<int64_t>(i);
      } else if (new_shape[i] < 0) {
        detail::raise("ascan::Tensor::reshape(): shape {} has a negative extent, expected >= 0 or -1",
                      format_shape(new_shape));
      } else {
        known *= new_shape[i];
      }
    }
    if (infer >= 0 && known > 0 && numel_ % known == 0) new_shape[infer] = numel_ / known;
    if (shape_numel(new_shape, "ascan::Tensor::reshape()") != numel_ || (infer >= 0 && known == 0))
      detail::raise("ascan::Tensor::reshape(): cannot view {} elements of shape {} as shape {}",
                    numel_, format_shape(shape_), format_shape(new_shape));
    Tensor t = *this;
    t.shape_ = std::move(new_shape);
    return t;
  }

  Tensor clone() const {
    Tensor t(shape_);
    if (numel_ > 0) std::memcpy(t.data_, data_, sizeof(T) * numel_);
    return t;
  }

  // Copies the elements of `src` (same shape) into this tensor's storage.
  void copy_from(const Tensor& src) {
    if (src.shape_ != shape_)
      detail::raise("ascan::Tensor::copy_from(): source has shape {}, expected {}",
                    format_shape(src.shape_), format_shape(shape_));
    if (numel_ > 0 && src.data_ != data_) std::memmove(data_, src.data_, sizeof(T) * numel_);
  }

  template <class U>
  Tensor<U> cast() const {
    auto t = Tensor<U>::empty(shape_);
    for (int64_t i = 0; i < numel_; ++i) t.data()[i] = static_cast<U>(data_[i]);
    return t;
  }

  // True when both handles view the same storage.
  bool shares_storage_with(const Tensor& other) const { return storage_ && storage_ == other.storage_; }
  // Identity of the underlying storage (for aliasing checks).
  const void* storage_id() const { return storage_.get(); }

 private:
  explicit Tensor(Shape shape) : shape_(std::move(shape)) {
    numel_ = shape_numel(shape_, "ascan::Tensor");
    storage_ = detail::allocate_storage(sizeof(T) * static_cast<size_t>(std::max<int64_t>(numel_, 1)));
    data_ = static_cast<T*>(storage_.get());
  }

  int64_t offset(std::initializer_list<int64_t> index) const {
    if (static_cast<int64_t>(index.size()) != rank())
      detail::raise("ascan::Tensor::at(): got {} indices for a tensor of rank {}, expected {}",
                    index.size(), rank(), rank());
    int64_t off = 0, d = 0;
    for (int64_t i : index) {
      if (i < 0 || i >= shape_[d])
        detail::raise("ascan::Tensor::at(): index {} is out of range on dim {} of shape {}, "
                      "expected 0 <= index < {}", i, d, format_shape(shape_), shape_[d]);
      off = off * shape_[d] + i;
      ++d;
    }
    return off;
  }

  Shape shape_;
  int64_t numel_ = 0;
  std::shared_ptr<void> storage_;
  T* data_ = nullptr;
};

// Exact comparison: same shape and equal elements (NaN != NaN).
template <class T>
bool operator==(const Tensor<T>& a, const Tensor<T>& b) {
  return a.shape() == b.shape() && std::equal(a.data(), a.data() + a.numel(), b.data());
}

// Same shape and |a - b| <= atol + rtol * |b| elementwise (NaNs compare equal to NaNs).
template <class T>
bool allclose(const Tensor<T>& a, const Tensor<T>& b, double rtol = 1e-5, double atol = 1e-8) {
  if (a.shape() != b.shape()) return false;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = static_cast<double>(a.data()[i]), y = static_cast<double>(b.data()[i]);
    if (std::isnan(x) && std::isnan(y)) continue;
    if (x == y) continue;  // equal infinities
    if (std::isinf(x) || std::isinf(y)) return false;  // an infinity is close only to itself
    if (!(std::abs(x - y) <= atol + rtol * std::abs(y))) return false;
  }
  return true;
}

}  // namespace ascan
