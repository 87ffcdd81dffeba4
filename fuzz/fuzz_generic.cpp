// fuzz_generic.cpp — libFuzzer target: Generic and batched Generic scans of k x k signed
// permutation matrices (a non-commutative monoid whose products stay exact in int64), composed
// as matmul(later, earlier), with an optional second leaf of k x 1 vectors (an affine map:
// (A, b) then (A', b') is (A' A, A' b + b')). Bytes decode into the length, k, a leading batch
// dim (scanning dim 1 of [m, T, k, k]), reverse, the mode, the thread count and in place or not;
// results are checked against a sequential fold with a hand-written matrix product. Any
// mismatch, crash or sanitizer report is a finding (abort).
#include <ascan/ascan.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <tuple>
#include <vector>

#include "fuzz_input.hpp"

namespace {

using ascan::Shape;
using ascan::Tensor;
using fuzz::Input;

[[noreturn]] void finding(const char* what, int64_t at) {
  std::fprintf(stderr, "fuzz_generic: %s (element %lld)\n", what, static_cast<long long>(at));
  std::abort();
}

// k x k signed permutation matrices, one per slice of `count` slices.
Tensor<int64_t> permutations(Input& in, const Shape& shape, int64_t k) {
  Tensor<int64_t> t = Tensor<int64_t>::zeros(shape);
  for (int64_t m = 0; m < t.numel() / (k * k); ++m) {
    std::vector<int64_t> perm(k);
    for (int64_t i = 0; i < k; ++i) perm[i] = i;
    for (int64_t i = k - 1; i > 0; --i) std::swap(perm[i], perm[in.below(static_cast<int>(i) + 1)]);
    for (int64_t i = 0; i < k; ++i) t.data()[m * k * k + i * k + perm[i]] = in.below(2) ? 1 : -1;
  }
  return t;
}

// c = a b for k x k (b: k x n) row-major blocks.
void mul(const int64_t* a, const int64_t* b, int64_t* c, int64_t k, int64_t n) {
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t s = 0;
      for (int64_t l = 0; l < k; ++l) s += a[i * k + l] * b[l * n + j];
      c[i * n + j] = s;
    }
}

void run(Input& in) {
  const int64_t T = in.below(8) == 0 ? in.below(3000) : in.below(40);
  const int64_t k = 1 + in.below(3);
  const int64_t batch = in.below(2) ? 0 : 1 + in.below(4);  // 0: no leading dim
  const bool reverse = in.below(2), batched = in.below(2), affine = in.below(2), in_place = in.below(2);
  ascan::set_num_threads(1 + in.below(3));
  const int64_t dim = batch ? 1 : 0;
  const Shape sa = batch ? Shape{batch, T, k, k} : Shape{T, k, k};
  const Shape sb = batch ? Shape{batch, T, k, 1} : Shape{T, k, 1};
  const Tensor<int64_t> A = permutations(in, sa, k);
  Tensor<int64_t> b = Tensor<int64_t>::empty(sb);
  for (int64_t i = 0; i < b.numel(); ++i) b.data()[i] = in.below(19) - 9;
  const ascan::ScanOptions o{.reverse = reverse};

  Tensor<int64_t> yA, yb;
  if (affine) {
    const auto f = [](const auto& l, const auto& r) {
      return std::tuple{ascan::matmul(std::get<0>(r), std::get<0>(l)),
                        ascan::matmul(std::get<0>(r), std::get<1>(l)) + std::get<1>(r)};
    };
    const auto xs = std::tuple{A, b};
    if (in_place) {
      yA = A.clone();
      yb = b.clone();
      if (batched) ascan::associative_scan(ascan::generic_batched(f), std::tuple{yA, yb}, dim, o, std::tie(yA, yb));
      else ascan::associative_scan(ascan::generic(f), std::tuple{yA, yb}, dim, o, std::tie(yA, yb));
    } else if (batched) {
      std::tie(yA, yb) = ascan::associative_scan(ascan::generic_batched(f), xs, dim, o);
    } else {
      std::tie(yA, yb) = ascan::associative_scan(ascan::generic(f), xs, dim, o);
    }
  } else {
    const auto f = [](const Tensor<int64_t>& l, const Tensor<int64_t>& r) { return ascan::matmul(r, l); };
    if (in_place) {
      yA = A.clone();
      if (batched) ascan::associative_scan(ascan::generic_batched(f), yA, dim, o, yA);
      else ascan::associative_scan(ascan::generic(f), yA, dim, o, yA);
    } else {
      yA = batched ? ascan::associative_scan(ascan::generic_batched(f), A, dim, o)
                   : ascan::associative_scan(ascan::generic(f), A, dim, o);
    }
  }
  if (yA.shape() != sa || (affine && yb.shape() != sb)) finding("result shape", -1);

  // The fold: acc_A = x_A acc_A, acc_b = x_A acc_b + x_b along each line.
  std::vector<int64_t> accA(k * k), accb(k), tA(k * k), tb(k);
  for (int64_t m = 0; m < std::max<int64_t>(batch, 1); ++m)
    for (int64_t step = 0; step < T; ++step) {
      const int64_t t = reverse ? T - 1 - step : step;
      const int64_t ia = (m * T + t) * k * k, ib = (m * T + t) * k;
      if (step == 0) {
        std::copy(A.data() + ia, A.data() + ia + k * k, accA.begin());
        std::copy(b.data() + ib, b.data() + ib + k, accb.begin());
      } else {
        mul(A.data() + ia, accA.data(), tA.data(), k, k);
        mul(A.data() + ia, accb.data(), tb.data(), k, 1);
        for (int64_t i = 0; i < k; ++i) tb[i] += b.data()[ib + i];
        accA = tA;
        accb = tb;
      }
      for (int64_t i = 0; i < k * k; ++i)
        if (yA.data()[ia + i] != accA[i]) finding("matrix product differs from the fold", ia + i);
      if (affine)
        for (int64_t i = 0; i < k; ++i)
          if (yb.data()[ib + i] != accb[i]) finding("affine offset differs from the fold", ib + i);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  run(in);
  return 0;
}
