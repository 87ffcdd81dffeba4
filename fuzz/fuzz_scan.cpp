// fuzz_scan.cpp — libFuzzer target: bytes decode into a scan (rank, extents, dim, reverse,
// broadcast leaves, the combine and its dtype, the thread count, the out-overload: a new result,
// a preallocated output or in place) and the result is checked against a sequential fold
// written here. Exact for int64 add, an int64 affine map mod 7 (a non-commutative monoid) and
// max / min on doubles with NaNs and infinities; double add within the rounding bound of the
// fold. A deliberately invalid request (a dim out of range, a wrong output shape) must throw
// ascan::Error. Any mismatch, crash, sanitizer report or other exception is a finding (abort).
#include <ascan/ascan.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <tuple>
#include <vector>

#include "fold.hpp"
#include "fuzz_input.hpp"

namespace {

using ascan::Shape;
using ascan::Tensor;
using fuzz::at;
using fuzz::fold;
using fuzz::Input;
using fuzz::leaf_shape;

enum class Kind { add_i64, affine_mod7, add_f64, max_f64, min_f64 };

[[noreturn]] void finding(const char* what, int64_t at) {
  std::fprintf(stderr, "fuzz_scan: %s (element %lld)\n", what, static_cast<long long>(at));
  std::abort();
}

template <class T>
Tensor<T> values(Input& in, const Shape& s, Kind kind) {
  Tensor<T> t = Tensor<T>::empty(s);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int r = in.below(64);
    if constexpr (std::is_same_v<T, double>) {
      if (kind == Kind::max_f64 || kind == Kind::min_f64) {
        if (r == 0) { t.data()[i] = std::numeric_limits<double>::quiet_NaN(); continue; }
        if (r == 1) { t.data()[i] = std::numeric_limits<double>::infinity(); continue; }
        if (r == 2) { t.data()[i] = -std::numeric_limits<double>::infinity(); continue; }
      }
      t.data()[i] = (r - 32) * 0.375;
    } else {
      t.data()[i] = kind == Kind::affine_mod7 ? r % 7 : r - 32;
    }
  }
  return t;
}

// Output placement: 0 a new result, 1 a preallocated output, 2 in place (when the leaf has the
// full shape).
template <class T, class F>
Tensor<T> scan1(const F& f, const Tensor<T>& x, const Shape& full, int64_t dim, bool reverse, int place) {
  const ascan::ScanOptions o{.reverse = reverse};
  if (place == 0) return ascan::associative_scan(f, x, dim, o);
  if (place == 2 && x.shape() == full) {
    Tensor<T> y = x.clone();
    ascan::associative_scan(f, y, dim, o, y);
    return y;
  }
  Tensor<T> y = Tensor<T>::full(full, T(99));
  ascan::associative_scan(f, x, dim, o, y);
  return y;
}

// add, exact for both types: int64, and doubles that are multiples of 1/8 below 12 in
// magnitude, at most 40000 of them, so every partial sum is a multiple of 1/8 below 2^19, exact
// in double whatever the association.
template <class T>
void check_add(Input& in, const Shape& full, int64_t dim, int64_t signed_dim, bool reverse, int place, Kind kind) {
  const Tensor<T> x = values<T>(in, full, kind);
  const Tensor<T> y = scan1(ascan::add, x, full, signed_dim, reverse, place);
  T acc = 0;
  fold(full, dim, reverse, [&](bool first, int64_t i) {
    acc = first ? at(x, full, i) : acc + at(x, full, i);
    if (y.data()[i] != acc) finding("add differs from the fold", i);
  });
}

void run(Input& in) {
  const int rank = 1 + in.below(4);
  Shape full(rank);
  for (auto& e : full) e = in.below(16) == 0 ? 7 + in.below(300) : in.below(7);
  if (fuzz::leaf_numel_bound(full) > 40000) return;
  const int64_t dim = in.below(rank);
  const bool reverse = in.below(2);
  const Kind kind = static_cast<Kind>(in.below(5));
  const int place = in.below(3);
  ascan::set_num_threads(1 + in.below(3));
  const int64_t signed_dim = in.below(2) ? dim : dim - rank;  // -rank .. -1 names the same dim

  // Invalid requests must be refused with ascan::Error.
  if (in.below(32) == 0) {
    const Tensor<int64_t> x = Tensor<int64_t>::zeros(full);
    bool refused = false;
    try {
      if (in.below(2)) {
        ascan::associative_scan(ascan::add, x, rank + in.below(3));  // dim out of range
      } else {
        Shape wrong = full;
        wrong[0] += 1;
        Tensor<int64_t> y = Tensor<int64_t>::zeros(wrong);
        ascan::associative_scan(ascan::add, x, dim, {}, y);
      }
    } catch (const ascan::Error&) {
      refused = true;
    }
    if (!refused) finding("an invalid request was not refused", -1);
    return;
  }

  if (std::getenv("FUZZ_VERBOSE"))
    std::fprintf(stderr, "fuzz_scan: shape %s dim %lld (as %lld) reverse %d kind %d place %d threads %d\n",
                 ascan::format_shape(full).c_str(), static_cast<long long>(dim), static_cast<long long>(signed_dim),
                 reverse, static_cast<int>(kind), place, ascan::num_threads());
  switch (kind) {
    case Kind::add_i64: check_add<int64_t>(in, full, dim, signed_dim, reverse, place, kind); break;
    case Kind::affine_mod7: {
      // (a1, b1) then (a2, b2): x -> a2 (a1 x + b1) + b2, mod 7.
      const auto affine = [](auto l, auto r) {
        auto [a1, b1] = l;
        auto [a2, b2] = r;
        return std::tuple{(a2 * a1) % 7, (a2 * b1 + b2) % 7};
      };
      // Two leaves broadcast against each other (the result has their broadcast shape).
      const Tensor<int64_t> a = values<int64_t>(in, leaf_shape(in, full), kind);
      const Tensor<int64_t> b = values<int64_t>(in, leaf_shape(in, full), kind);
      full = ascan::broadcast_shapes(a.shape(), b.shape(), "fuzz_scan");
      const ascan::ScanOptions o{.reverse = reverse};
      Tensor<int64_t> ya, yb;
      if (place == 0) {
        std::tie(ya, yb) = ascan::associative_scan(affine, std::tuple{a, b}, signed_dim, o);
      } else {
        ya = Tensor<int64_t>::full(full, 99);
        yb = Tensor<int64_t>::full(full, 99);
        ascan::associative_scan(affine, std::tuple{a, b}, signed_dim, o, std::tie(ya, yb));
      }
      int64_t ra = 1, rb = 0;
      fold(full, dim, reverse, [&](bool first, int64_t i) {
        const int64_t xa = at(a, full, i), xb = at(b, full, i);
        if (first) {
          ra = xa;
          rb = xb;
        } else {
          rb = (xa * rb + xb) % 7;
          ra = (xa * ra) % 7;
        }
        if (ya.data()[i] != ra || yb.data()[i] != rb) finding("affine mod 7 differs from the fold", i);
      });
      break;
    }
    case Kind::add_f64: check_add<double>(in, full, dim, signed_dim, reverse, place, kind); break;
    case Kind::max_f64:
    case Kind::min_f64: {
      const bool is_max = kind == Kind::max_f64;
      const Tensor<double> x = values<double>(in, full, kind);
      const Tensor<double> y = is_max ? scan1(ascan::max, x, full, signed_dim, reverse, place)
                                      : scan1(ascan::min, x, full, signed_dim, reverse, place);
      double acc = 0;
      fold(full, dim, reverse, [&](bool first, int64_t i) {
        const double v = at(x, full, i);
        if (first || std::isnan(v)) acc = !first && std::isnan(acc) ? acc : v;
        else if (!std::isnan(acc)) acc = is_max ? std::max(acc, v) : std::min(acc, v);
        const double got = y.data()[i];
        if (std::isnan(acc) ? !std::isnan(got) : got != acc) finding("max/min differs from the fold", i);
      });
      break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  run(in);
  return 0;
}
