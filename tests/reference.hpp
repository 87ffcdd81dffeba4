// reference.hpp — sequential reference scans (pointwise and generic), tolerances and checks for the tests.
//
// Written without the library's scan code: plain loops over [outer, T, inner] with y_0 = x_0,
// y_t = f(y_{t-1}, x_t) (reverse: from the end), our own broadcasting and our own slicing. Only
// Tensor construction and data() are used to read inputs and build generic-mode slices.
#pragma once

#include <ascan/ascan.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace ref {

using Shape = std::vector<int64_t>;

// Sanitizer builds (unoptimised, instrumented, ~20x slower here) run the largest cases at a
// quarter of their size: still many blocks, still on the thread pool. The optimised build runs
// the full sizes.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif
constexpr int64_t large(int64_t n) { return kSanitized ? n / 4 : n; }

inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t e : s) n *= e;
  return n;
}

inline std::string str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// One input leaf of a reference scan: row-major values and shape, held in the scalar type S
// in which the reference computes (double for float tensors, int64_t for exact integer checks).
template <class S>
struct Leaf {
  std::vector<S> data;
  Shape shape;
};

template <class S, class T>
Leaf<S> leaf(const ascan::Tensor<T>& t) {
  const T* p = t.data();
  Leaf<S> l{std::vector<S>(t.numel()), t.shape()};
  for (int64_t i = 0; i < t.numel(); ++i) l.data[i] = static_cast<S>(p[i]);
  return l;
}

// Element structure seen by a pointwise combine: a scalar, or a (nested) std::tuple of them;
// leaves are numbered depth-first. load/store move one element between it and flat values.
template <class E>
struct Layout {
  static constexpr size_t count = 1;
  template <class S>
  static E load(const S* v) { return static_cast<E>(v[0]); }
  template <class S, class R>
  static void store(S* v, const R& r) { v[0] = static_cast<S>(r); }
};

template <class... Es>
struct Layout<std::tuple<Es...>> {
  static constexpr size_t count = (size_t{0} + ... + Layout<Es>::count);
  static constexpr std::array<size_t, sizeof...(Es)> offsets = [] {
    std::array<size_t, sizeof...(Es)> o{};
    size_t i = 0, acc = 0;
    ((o[i++] = acc, acc += Layout<Es>::count), ...);
    return o;
  }();
  template <class S>
  static std::tuple<Es...> load(const S* v) {
    return [&]<size_t... K>(std::index_sequence<K...>) {
      return std::tuple<Es...>{Layout<Es>::load(v + offsets[K])...};
    }(std::index_sequence_for<Es...>{});
  }
  template <class S, class R>
  static void store(S* v, const R& r) {
    [&]<size_t... K>(std::index_sequence<K...>) {
      (Layout<Es>::store(v + offsets[K], std::get<K>(r)), ...);
    }(std::index_sequence_for<Es...>{});
  }
};

// Result of a reference scan: one vector per leaf, all of the common (broadcast) shape, and for
// every element the number of inputs folded into it (t + 1 counted from the scan's start).
template <class S>
struct Scan {
  Shape shape;
  std::vector<std::vector<S>> leaves;
  std::vector<int64_t> steps;
};

// Pointwise reference: broadcasts the leaves NumPy-style (the scan length too), resolves dim
// against leaf 0 and right-aligns it like every other dim, then folds each (outer, inner)
// sequence in a plain loop. E is the element structure the combine receives.
template <class E, class S, class F>
Scan<S> pointwise(const F& f, const std::vector<Leaf<S>>& xs, int64_t dim, bool reverse = false) {
  constexpr size_t L = Layout<E>::count;
  if (xs.size() != L) throw std::logic_error("ref::pointwise: leaf count does not match E");
  size_t rank = 0;
  for (const auto& x : xs) rank = std::max(rank, x.shape.size());
  Shape out(rank, 1);
  for (const auto& x : xs) {
    const size_t lead = rank - x.shape.size();
    for (size_t i = 0; i < x.shape.size(); ++i) {
      int64_t& o = out[lead + i];
      const int64_t e = x.shape[i];
      if (o == 1) o = e;
      else if (e != 1 && e != o) throw std::logic_error("ref::pointwise: shapes do not broadcast");
    }
  }
  const int64_t rank0 = static_cast<int64_t>(xs[0].shape.size());
  const int64_t axis = (dim < 0 ? dim + rank0 : dim) + static_cast<int64_t>(rank) - rank0;
  // Strides of each leaf in the output's index space: 0 where it is stretched or absent.
  std::vector<Shape> strides(L, Shape(rank, 0));
  for (size_t l = 0; l < L; ++l) {
    const Shape& s = xs[l].shape;
    const size_t lead = rank - s.size();
    int64_t st = 1;
    for (size_t i = s.size(); i-- > 0;) {
      strides[l][lead + i] = s[i] == 1 ? 0 : st;
      st *= s[i];
    }
  }
  const int64_t T = out[axis];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= out[d];
  for (size_t d = axis + 1; d < rank; ++d) inner *= out[d];

  Scan<S> r{out, std::vector<std::vector<S>>(L, std::vector<S>(numel(out))),
            std::vector<int64_t>(numel(out))};
  Shape idx(rank, 0);
  std::array<S, L> vals{}, tmp{};
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      // Multi-index of (o, ., i) and each leaf's offset at step 0.
      int64_t rem = o;
      for (int64_t d = axis; d-- > 0;) idx[d] = rem % out[d], rem /= out[d];
      rem = i;
      for (int64_t d = static_cast<int64_t>(rank); --d > axis;) idx[d] = rem % out[d], rem /= out[d];
      std::array<int64_t, L> base{};
      for (size_t l = 0; l < L; ++l)
        for (size_t d = 0; d < rank; ++d)
          if (static_cast<int64_t>(d) != axis) base[l] += idx[d] * strides[l][d];
      E acc{};
      for (int64_t k = 0; k < T; ++k) {
        const int64_t t = reverse ? T - 1 - k : k;
        for (size_t l = 0; l < L; ++l) vals[l] = xs[l].data[base[l] + t * strides[l][axis]];
        const E x = Layout<E>::load(vals.data());
        if (k == 0) {
          acc = x;
        } else {
          Layout<E>::store(tmp.data(), f(acc, x));
          acc = Layout<E>::load(tmp.data());
        }
        Layout<E>::store(tmp.data(), acc);
        const int64_t pos = (o * T + t) * inner + i;
        for (size_t l = 0; l < L; ++l) r.leaves[l][pos] = tmp[l];
        r.steps[pos] = k + 1;
      }
    }
  }
  return r;
}

// Bicyclic monoid: (a, b) ∘ (c, d) = (a + c - min(b, c), b + d - min(b, c)); associative, not
// commutative, exact in integers: a non-commutative test combine whose results compare exactly.
constexpr auto bicyclic = [](auto l, auto r) {
  auto [a, b] = l;
  auto [c, d] = r;
  const auto m = b < c ? b : c;
  return std::tuple{a + c - m, b + d - m};
};

// Entries of +-1 (seeded): products of them are exact in any association.
inline ascan::Tensor<int64_t> random_signs(const Shape& shape, uint64_t seed) {
  auto a = ascan::Tensor<int64_t>::random(shape, seed, 0, 1);
  for (int64_t i = 0; i < a.numel(); ++i) a.data()[i] = 2 * a.data()[i] - 1;
  return a;
}

// ---- generic mode: slices cut and stacked here, the combine called in a sequential loop -----

template <class T>
std::vector<ascan::Tensor<T>> slices(const ascan::Tensor<T>& x, int64_t dim) {
  const Shape& s = x.shape();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= s[d];
  for (size_t d = dim + 1; d < s.size(); ++d) inner *= s[d];
  Shape slice_shape;
  for (size_t d = 0; d < s.size(); ++d)
    if (static_cast<int64_t>(d) != dim) slice_shape.push_back(s[d]);
  std::vector<ascan::Tensor<T>> out;
  for (int64_t t = 0; t < s[dim]; ++t) {
    std::vector<T> v;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) v.push_back(x.data()[(o * s[dim] + t) * inner + i]);
    out.push_back(ascan::Tensor<T>::from(std::move(v), slice_shape));
  }
  return out;
}

template <class T>
ascan::Tensor<T> stack(const std::vector<ascan::Tensor<T>>& ys, const Shape& shape, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  std::vector<T> v(numel(shape));
  for (int64_t t = 0; t < shape[dim]; ++t)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i)
        v[(o * shape[dim] + t) * inner + i] = ys[t].data()[o * inner + i];
  return ascan::Tensor<T>::from(std::move(v), shape);
}

// Generic reference on a single tensor: y_t = g(y_{t-1}, x_t) on slices.
template <class T, class G>
ascan::Tensor<T> generic(const G& g, const ascan::Tensor<T>& x, int64_t dim, bool reverse = false) {
  if (dim < 0) dim += x.rank();
  std::vector<ascan::Tensor<T>> xs = slices(x, dim), ys(xs.size());
  const int64_t n = static_cast<int64_t>(xs.size());
  for (int64_t k = 0; k < n; ++k) {
    const int64_t t = reverse ? n - 1 - k : k, prev = reverse ? t + 1 : t - 1;
    ys[t] = k == 0 ? xs[t] : g(ys[prev], xs[t]);
  }
  return stack(ys, x.shape(), dim);
}

// Generic reference on a flat tuple of tensors (each may have its own shape).
template <class... Ts, class G>
std::tuple<ascan::Tensor<Ts>...> generic(const G& g, const std::tuple<ascan::Tensor<Ts>...>& xs,
                                         int64_t dim, bool reverse = false) {
  if (dim < 0) dim += std::get<0>(xs).rank();
  using X = std::tuple<ascan::Tensor<Ts>...>;
  return [&]<size_t... K>(std::index_sequence<K...>) {
    auto cut = std::make_tuple(slices(std::get<K>(xs), dim)...);
    const int64_t n = static_cast<int64_t>(std::get<0>(cut).size());
    std::vector<X> ys(n);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t t = reverse ? n - 1 - k : k, prev = reverse ? t + 1 : t - 1;
      const X x{std::get<K>(cut)[t]...};
      ys[t] = k == 0 ? x : X(g(ys[prev], x));
    }
    auto column = [&](auto k) {
      std::vector<std::tuple_element_t<k, X>> v;
      for (const X& y : ys) v.push_back(std::get<k>(y));
      return stack(v, std::get<k>(xs).shape(), dim);
    };
    return X{column(std::integral_constant<size_t, K>{})...};
  }(std::index_sequence_for<Ts...>{});
}

// ---- library settings for a scope ---------------------------------------------------------

// Sets a library setting for one scope and restores the previous value.
template <class V>
class ScopedSetting {
 public:
  ScopedSetting(V (*get)(), void (*set)(V), V value) : set_(set), saved_(get()) { set_(value); }
  ~ScopedSetting() { set_(saved_); }
  ScopedSetting(const ScopedSetting&) = delete;
  ScopedSetting& operator=(const ScopedSetting&) = delete;

 private:
  void (*set_)(V);
  V saved_;
};

struct ThreadCount : ScopedSetting<int> {
  explicit ThreadCount(int n) : ScopedSetting(ascan::num_threads, ascan::set_num_threads, n) {}
};
struct FlushSetting : ScopedSetting<bool> {
  explicit FlushSetting(bool on) : ScopedSetting(ascan::flush_denormals, ascan::set_flush_denormals, on) {}
};

// ---- tolerances ----------------------------------------------------------------------------
//
// A scan output y_t is a binary tree of t combines over x_0..x_t, whatever association the
// library picks (blocks, carries, the odd/even tree). Each combine of a sum-like f commits a
// rounding error of at most u·|partial result| (u = eps/2, the unit roundoff of the result type),
// and the errors reach y_t with weights of magnitude <= 1 in these tests (sums; products and
// linear recurrences with |a| <= 1; logaddexp whose partial derivatives are a softmax).
// Worst case that gives |y_t - y_t*| <= t·u·M_t, with M_t the magnitude of the partials:
//   add: sum|x_i|;  mul: |y_t|;  linear recurrence: the same recurrence on |a|, |b|;
//   logaddexp: max|x_i| + |y_t| + 1 (exp/log1p add ~1 ulp of O(1) each).
// The rounding errors are independent and zero-mean, so the realised error grows like
// sqrt(t)·u·M_t; we allow c·sqrt(t+1)·u·M_t with c = 8 (more than 10 standard deviations of a
// random walk) plus `floor` for underflow. The float64 reference computes on the float32
// inputs exactly, so only the library's rounding is measured. Integers, max and min (which only
// select values) are compared exactly.
template <class T>
inline constexpr double kUnitRoundoff = std::numeric_limits<T>::epsilon() / 2;

template <class T>
std::vector<double> tolerance(const std::vector<int64_t>& steps, const std::vector<double>& magnitude,
                              double c = 8, double floor = 0) {
  std::vector<double> tol(steps.size());
  for (size_t i = 0; i < steps.size(); ++i)
    tol[i] = c * kUnitRoundoff<T> * std::sqrt(static_cast<double>(steps[i])) * std::abs(magnitude[i]) +
             floor;
  return tol;
}

// Worst-case (linear in the depth) bound for tree-shaped float64 computations such as matrix
// chains: |fl(A·B) - A·B| <= k·u·|A|·|B| entrywise, so c·(t+1)·u·(product of |A_i|).
template <class T>
std::vector<double> linear_tolerance(const std::vector<int64_t>& steps,
                                     const std::vector<double>& magnitude, double c = 4) {
  std::vector<double> tol(steps.size());
  for (size_t i = 0; i < steps.size(); ++i)
    tol[i] = c * kUnitRoundoff<T> * static_cast<double>(steps[i] + 1) * std::abs(magnitude[i]);
  return tol;
}

// ---- comparisons ---------------------------------------------------------------------------

inline std::string index_of(int64_t flat, const Shape& shape) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) idx[d] = flat % shape[d], flat /= shape[d];
  return str(idx);
}

// Exact: same shape, every element equal to the reference (compared in the reference's type).
template <class T, class S>
::testing::AssertionResult exact(const ascan::Tensor<T>& got, const std::vector<S>& want,
                                 const Shape& shape) {
  if (got.shape() != shape)
    return ::testing::AssertionFailure() << "shape " << str(got.shape()) << ", expected " << str(shape);
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < got.numel(); ++i)
    if (!(static_cast<S>(got.data()[i]) == want[i]) && ++bad == 1) first = i;
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(17);
  os << bad << " of " << got.numel() << " elements differ; first at " << index_of(first, shape)
     << ": got " << +got.data()[first] << ", expected " << +want[first];
  return ::testing::AssertionFailure() << os.str();
}

// Within tolerance: |got - want| <= tol elementwise; NaN matches NaN, infinities must be equal.
template <class T>
::testing::AssertionResult near(const ascan::Tensor<T>& got, const std::vector<double>& want,
                                const Shape& shape, const std::vector<double>& tol) {
  if (got.shape() != shape)
    return ::testing::AssertionFailure() << "shape " << str(got.shape()) << ", expected " << str(shape);
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = static_cast<double>(got.data()[i]), w = want[i];
    const bool ok = std::isnan(w)   ? std::isnan(g)
                    : std::isinf(w) ? g == w
                                    : std::abs(g - w) <= tol[i];
    if (!ok && ++bad == 1) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(17);
  os << bad << " of " << got.numel() << " elements out of tolerance; first at "
     << index_of(first, shape) << ": got " << static_cast<double>(got.data()[first]) << ", expected "
     << want[first] << " +- " << tol[first];
  return ::testing::AssertionFailure() << os.str();
}

// Tensors with seeded values in a range suited to the element type.
template <class T>
ascan::Tensor<T> data(const Shape& shape, uint64_t seed, double lo = -1, double hi = 1) {
  return ascan::Tensor<T>::random(shape, seed, static_cast<T>(lo), static_cast<T>(hi));
}

inline std::vector<double> abs(std::vector<double> v) {
  for (double& x : v) x = std::abs(x);
  return v;
}

template <class S>
Leaf<S> abs(Leaf<S> l) {
  for (S& x : l.data) x = x < 0 ? -x : x;
  return l;
}

}  // namespace ref
