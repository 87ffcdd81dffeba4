// tensor.hpp — ascan::Tensor<T>: dynamic-rank, row-major, contiguous host tensor.
//
// A Tensor is a cheap handle: copying one shares its storage (an intrusive reference count), so
// passing tensors by value never copies elements. clone() makes a deep copy. Storage comes from
// the caching allocator (allocator.hpp): one block holds the shape and the elements, so making a
// small tensor takes no malloc in a steady state. Supported element types: float, double,
// int32_t, int64_t.
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
class Tensor;

namespace detail {
// The shape of default-constructed (and moved-from) tensors.
inline const Shape& empty_tensor_shape() {
  static const Shape shape{0};
  return shape;
}
// Sets the shape of a fresh header (a reused block usually has a shape of the same rank already:
// then a plain copy). Releases the header and rethrows when the vector cannot grow.
inline void set_header_shape(StorageHeader* h, const int64_t* dims, size_t rank) {
  if (h->shape.size() == rank) {
    std::copy_n(dims, rank, h->shape.data());
    return;
  }
  try {
    h->shape.assign(dims, dims + rank);
  } catch (...) {
    release_storage(h);
    throw;
  }
}
// Construction paths for the library's own code (shapes from raw extents, views of slices).
template <class T>
struct TensorAccess;
}  // namespace detail

template <class T>
class Tensor {
  static_assert(is_tensor_element_v<T>,
                "ascan::Tensor<T>: T must be float, double, int32_t or int64_t");

 public:
  using value_type = T;

  // An empty tensor of shape [0]. It owns no storage (default-constructed tensors are placeholders
  // in containers and results, so they do not allocate).
  Tensor() = default;
  Tensor(const Tensor& o) : h_(o.h_), data_(o.data_), numel_(o.numel_) {
    if (h_) detail::retain_storage(h_);
  }
  Tensor(Tensor&& o) noexcept : h_(o.h_), data_(o.data_), numel_(o.numel_) {
    o.h_ = nullptr;
    o.data_ = nullptr;
    o.numel_ = 0;
  }
  Tensor& operator=(const Tensor& o) {
    if (o.h_) detail::retain_storage(o.h_);
    if (h_) detail::release_storage(h_);
    h_ = o.h_;
    data_ = o.data_;
    numel_ = o.numel_;
    return *this;
  }
  Tensor& operator=(Tensor&& o) noexcept {
    if (this != &o) {
      if (h_) detail::release_storage(h_);
      h_ = o.h_;
      data_ = o.data_;
      numel_ = o.numel_;
      o.h_ = nullptr;
      o.data_ = nullptr;
      o.numel_ = 0;
    }
    return *this;
  }
  ~Tensor() {
    if (h_) detail::release_storage(h_);
  }

  // Uninitialised elements (storage may hold stale values from the cache).
  static Tensor empty(const Shape& shape) { return Tensor(shape.data(), shape.size()); }

  static Tensor zeros(const Shape& shape) { return full(shape, T(0)); }

  static Tensor full(const Shape& shape, T value) {
    Tensor t = empty(shape);
    std::fill_n(t.data_, t.numel_, value);
    return t;
  }

  // Takes the row-major values; throws ascan::Error when their count does not match the shape.
  static Tensor from(std::vector<T> values, const Shape& shape) {
    Tensor t = empty(shape);
    if (static_cast<int64_t>(values.size()) != t.numel_)
      detail::raise("ascan::Tensor::from(): got {} values for shape {}, expected {}", values.size(),
                    format_shape(t.shape()), t.numel_);
    std::copy(values.begin(), values.end(), t.data_);
    return t;
  }

  // Uniform random values in [lo, hi) (integers: [lo, hi]) from a seeded 64-bit Mersenne
  // Twister, so the same seed gives the same tensor on every run.
  static Tensor random(const Shape& shape, uint64_t seed, T lo = T(0), T hi = T(1)) {
    Tensor t = empty(shape);
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
  static Tensor randn(const Shape& shape, uint64_t seed) {
    static_assert(std::is_floating_point_v<T>, "ascan::Tensor::randn(): needs a floating type");
    Tensor t = empty(shape);
    std::mt19937_64 gen(seed);
    for (int64_t i = 0; i < t.numel_; ++i) {  // Box-Muller, one value per pair of uniforms
      const double u1 = (static_cast<double>(gen() >> 11) + 1.0) * 0x1.0p-53;
      const double u2 = static_cast<double>(gen() >> 11) * 0x1.0p-53;
      t.data_[i] = static_cast<T>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    }
    return t;
  }

  const Shape& shape() const { return h_ ? h_->shape : detail::empty_tensor_shape(); }
  int64_t rank() const { return static_cast<int64_t>(shape().size()); }
  int64_t numel() const { return numel_; }
  // Extent of `dim` (negative counts from the end); throws ascan::Error when out of range.
  int64_t size(int64_t dim) const {
    return shape()[resolve_dim(dim, rank(), "ascan::Tensor::size()", "the tensor")];
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
      }
    }
    if (infer < 0) {
      known = shape_numel(new_shape, "ascan::Tensor::reshape()");  // throws beyond int64_t
    } else {
      Shape rest = new_shape;
      rest.erase(rest.begin() + infer);
      known = shape_numel(rest, "ascan::Tensor::reshape()");
    }
    // known: the product of the extents other than the -1, or of all of them.
    const bool fits = infer < 0 ? known == numel_ : known > 0 && numel_ % known == 0;
    if (fits && infer >= 0) new_shape[infer] = numel_ / known;
    if (!fits)
      detail::raise("ascan::Tensor::reshape(): cannot view {} elements of shape {} as shape {}",
                    numel_, format_shape(shape()), format_shape(new_shape));
    // A view header with the new shape on the same elements.
    Tensor t;
    detail::StorageHeader* h = detail::allocate_storage(0);
    detail::set_header_shape(h, new_shape.data(), new_shape.size());
    t.h_ = h;
    if (h_) {
      t.h_->base = h_->base ? h_->base : h_;
      detail::retain_storage(t.h_->base);
    }
    t.data_ = data_;
    t.numel_ = numel_;
    return t;
  }

  Tensor clone() const {
    Tensor t = empty(shape());
    if (numel_ > 0) std::memcpy(t.data_, data_, sizeof(T) * numel_);
    return t;
  }

  // Copies the elements of `src` (same shape) into this tensor's storage.
  void copy_from(const Tensor& src) {
    if (src.shape() != shape())
      detail::raise("ascan::Tensor::copy_from(): source has shape {}, expected {}",
                    format_shape(src.shape()), format_shape(shape()));
    if (numel_ > 0 && src.data_ != data_) std::memmove(data_, src.data_, sizeof(T) * numel_);
  }

  template <class U>
  Tensor<U> cast() const {
    auto t = Tensor<U>::empty(shape());
    for (int64_t i = 0; i < numel_; ++i) t.data()[i] = static_cast<U>(data_[i]);
    return t;
  }

  // True when both handles view the same storage (the same allocation, at any offset).
  bool shares_storage_with(const Tensor& other) const {
    return h_ && other.h_ && h_->identity() == other.h_->identity();
  }
  // Identity of the underlying storage (for aliasing checks).
  const void* storage_id() const { return h_ ? h_->identity() : nullptr; }

  // A tensor over elements it does not own (another library's buffer, e.g. a torch::Tensor's),
  // without a copy. `data` holds numel(shape) row-major elements, aligned for T, and must stay
  // valid until `release()` runs, which happens once, when the last handle on them (views
  // included) goes; it must not throw. `identity` names the allocation that owns `data`, for the
  // aliasing checks of the `out` overloads (tensors with one identity may overlap): pass the
  // other library's storage pointer; nullptr: this tensor overlaps no other. Never overwritten
  // in place by the library's own ops (as a tensor that other handles share). When external()
  // throws (a bad argument, no memory for the header), release() has run.
  template <class Release = void (*)()>
  static Tensor external(T* data, const Shape& shape, Release release = [] {}, const void* identity = nullptr) {
    struct Holder final : detail::ExternalStorage {
      explicit Holder(Release&& r) : release(std::move(r)) {}
      ~Holder() override { release(); }
      Release release;
    };
    static_assert(std::is_invocable_v<Release&>, "ascan::Tensor::external(): release must be callable with no arguments");
    auto holder = std::make_unique<Holder>(std::move(release));  // releases if what follows throws
    holder->identity = identity;
    const int64_t n = shape_numel(shape, "ascan::Tensor::external()");
    if (data == nullptr && n > 0)
      detail::raise("ascan::Tensor::external(): data is null for shape {} ({} elements), expected a buffer",
                    format_shape(shape), n);
    if (reinterpret_cast<uintptr_t>(data) % alignof(T) != 0)
      detail::raise("ascan::Tensor::external(): data is not aligned for its element type, expected a "
                    "multiple of {} bytes", alignof(T));
    detail::StorageHeader* h = detail::allocate_storage(0);
    detail::set_header_shape(h, shape.data(), shape.size());
    h->external = holder.release();
    Tensor t;
    t.h_ = h;
    t.data_ = data;
    t.numel_ = n;
    return t;
  }

 private:
  friend struct detail::TensorAccess<T>;

  // Uninitialised elements of shape dims[0 .. rank).
  Tensor(const int64_t* dims, size_t rank) {
    const int64_t n = shape_numel(dims, rank, "ascan::Tensor");
    if (n > detail::kMaxStorageBytes / static_cast<int64_t>(sizeof(T)))
      detail::raise("ascan::Tensor: shape {} needs {} elements of {} bytes, more than the {} bytes a storage may "
                    "hold",
                    format_shape(Shape(dims, dims + rank)), n, sizeof(T), detail::kMaxStorageBytes);
    detail::StorageHeader* h = detail::allocate_storage(sizeof(T) * static_cast<size_t>(std::max<int64_t>(n, 1)));
    detail::set_header_shape(h, dims, rank);
    h_ = h;
    data_ = static_cast<T*>(h_->payload());
    numel_ = n;
  }

  int64_t offset(std::initializer_list<int64_t> index) const {
    if (static_cast<int64_t>(index.size()) != rank())
      detail::raise("ascan::Tensor::at(): got {} indices for a tensor of rank {}, expected {}",
                    index.size(), rank(), rank());
    int64_t off = 0, d = 0;
    for (int64_t i : index) {
      const int64_t extent = shape()[d];
      if (i < 0 || i >= extent)
        detail::raise("ascan::Tensor::at(): index {} is out of range on dim {} of shape {}, "
                      "expected 0 <= index < {}", i, d, format_shape(shape()), extent);
      off = off * extent + i;
      ++d;
    }
    return off;
  }

  detail::StorageHeader* h_ = nullptr;  // null: the empty placeholder of shape [0]
  T* data_ = nullptr;
  int64_t numel_ = 0;
};

namespace detail {
template <class T>
struct TensorAccess {
  // Whether `t` is the only handle on its elements (no other handle, no view): then an op that
  // consumes it may overwrite it.
  static bool unique(const Tensor<T>& t) {
    return t.h_ && !t.h_->base && !t.h_->external && t.h_->refs.load(std::memory_order_acquire) == 1;
  }
  // Uninitialised elements of shape dims[0 .. rank) (no Shape vector on the way).
  static Tensor<T> empty(const int64_t* dims, size_t rank) { return Tensor<T>(dims, rank); }

  // A view header of shape dims[0 .. rank) on the storage of `a` (keeps it alive), with one
  // reference, for handles made by bind().
  static StorageHeader* make_view_header(const Tensor<T>& a, const int64_t* dims, size_t rank) {
    StorageHeader* h = allocate_storage(0);
    set_header_shape(h, dims, rank);
    if (a.h_) {
      h->base = a.h_->base ? a.h_->base : a.h_;
      retain_storage(h->base);
    }
    return h;
  }
  // Points the empty handle `t` at `data` under header `h` without touching the reference count:
  // the caller holds one reference per bound handle (taken in bulk) and unbinds them all.
  static void bind(Tensor<T>& t, StorageHeader* h, T* data, int64_t numel) {
    t.h_ = h;
    t.data_ = data;
    t.numel_ = numel;
  }
  static void unbind(Tensor<T>& t) {
    t.h_ = nullptr;
    t.data_ = nullptr;
    t.numel_ = 0;
  }

  // `count` handles of shape dims[0 .. rank) at a.data() + i * stride (i < count), sharing one
  // view header: the slices of a tensor without copying elements.
  static void views(const Tensor<T>& a, const int64_t* dims, size_t rank, int64_t stride,
                    int64_t count, Tensor<T>* out) {
    if (count == 0) return;
    StorageHeader* h = make_view_header(a, dims, rank);
    int64_t n = 1;
    for (size_t i = 0; i < rank; ++i) n *= dims[i];
    retain_storage(h, count - 1);  // one reference per handle
    for (int64_t i = 0; i < count; ++i) {
      Tensor<T> t;
      bind(t, h, a.data_ + i * stride, n);
      out[i] = std::move(t);
    }
  }
};
}  // namespace detail

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
