// fuzz_out.cpp — libFuzzer target: the out-overload, aliasing included. Bytes decode into a scan
// of one or two float64 leaves (add; the linear recurrence as the builtin, as a user pointwise
// combine, in Generic and batched Generic mode on a tuple and in Generic mode on a std::vector),
// and into each output's placement: a new tensor, the same handle as an input leaf, a view of an
// input leaf with the leaf's shape, a view of it with another shape, the other output's handle,
// a tensor of the wrong shape. A request the library documents as invalid (an output of the
// wrong shape, two outputs sharing storage, an output sharing storage with an input of another
// shape, a list of outputs of the wrong length) must throw ascan::Error and leave every buffer
// as it was; any other request must give the sequential fold of the inputs as they were before
// the call, exactly: the decays are -1, 0 or 1 and the other values multiples of 1/8 below 4 in
// magnitude, at most 20000 of them, so every product and sum is exact whatever the association.
#include <ascan/ascan.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
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
using TD = Tensor<double>;

[[noreturn]] void finding(const char* what, int64_t at) {
  std::fprintf(stderr, "fuzz_out: %s (element %lld)\n", what, static_cast<long long>(at));
  std::abort();
}

enum class Mode { add, linrec_builtin, linrec_lambda, generic, generic_batched, generic_list, count };

const auto affine = [](auto l, auto r) {
  auto [a1, b1] = l;
  auto [a2, b2] = r;
  return std::tuple{a1 * a2, a2 * b1 + b2};
};
const auto affine_slices = [](const auto& l, const auto& r) {
  const auto& [a1, b1] = l;
  const auto& [a2, b2] = r;
  return std::tuple{a1 * a2, a2 * b1 + b2};
};

TD values(Input& in, const Shape& s, bool decay) {
  TD t = TD::empty(s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = decay ? in.below(3) - 1 : (in.below(64) - 32) / 8.0;
  return t;
}

bool same_bits(const TD& a, const TD& b) {
  if (a.shape() != b.shape()) return false;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (a.data()[i] != b.data()[i]) return false;
  return true;
}

void run(Input& in) {
  const int rank = 1 + in.below(3);
  Shape full(rank);
  for (auto& e : full) e = in.below(16) == 0 ? 7 + in.below(600) : in.below(6);
  if (fuzz::leaf_numel_bound(full) > 20000) return;
  const int64_t dim = in.below(rank);
  const bool reverse = in.below(2);
  const auto mode = static_cast<Mode>(in.below(static_cast<int>(Mode::count)));
  ascan::set_num_threads(1 + in.below(3));
  const int leaves = mode == Mode::add ? 1 : 2;
  const bool pointwise = mode == Mode::add || mode == Mode::linrec_builtin || mode == Mode::linrec_lambda;

  // Inputs: in pointwise modes a leaf may broadcast (then the result has the full shape).
  std::vector<TD> xs;
  for (int l = 0; l < leaves; ++l)
    xs.push_back(values(in, pointwise && in.below(4) == 0 ? fuzz::leaf_shape(in, full) : full, l == 0 && leaves == 2));
  const Shape out_shape = pointwise ? (leaves == 2 ? ascan::broadcast_shapes(xs[0].shape(), xs[1].shape(), "fuzz_out")
                                                   : xs[0].shape())
                                    : full;

  // Outputs, and whether the request is valid.
  std::vector<TD> ys;
  std::vector<int> source;  // the allocation each output uses: -1 its own, else the input leaf's
  bool valid = true;
  for (int o = 0; o < leaves; ++o) {
    const int place = in.below(o == 0 ? 5 : 6);
    const int l = in.below(leaves);
    const TD& x = xs[l];
    TD y;
    switch (place) {
      case 0: y = TD::full(out_shape, 99); break;
      case 1: y = x; break;                        // the input's own handle
      case 2: y = x.reshape(x.shape()); break;     // a view of it, same shape
      case 3: y = x.reshape({x.numel()}); break;  // a view of it, flattened
      case 4: {                                    // a wrong shape
        Shape s = out_shape;
        s[in.below(rank)] += 1;
        y = TD::full(s, 99);
        break;
      }
      case 5: y = ys[0]; break;  // the other output's handle
    }
    source.push_back(place == 5 ? source[0] : place >= 1 && place <= 3 ? l : -1);
    if (y.shape() != out_shape) valid = false;
    if (y.numel() > 0 && source[o] >= 0 && xs[source[o]].shape() != y.shape()) valid = false;
    if (place == 5 && y.numel() > 0) valid = false;
    if (o == 1 && source[0] >= 0 && source[0] == source[1] && y.numel() > 0 && ys[0].numel() > 0) valid = false;
    ys.push_back(y);
  }
  const bool short_list = mode == Mode::generic_list && in.below(8) == 0;
  if (short_list) valid = false;

  std::vector<TD> xs_before, ys_before;
  for (const TD& x : xs) xs_before.push_back(x.clone());
  for (const TD& y : ys) ys_before.push_back(y.clone());

  if (std::getenv("FUZZ_VERBOSE"))
  {
    std::fprintf(stderr, "fuzz_out: shape %s dim %lld reverse %d mode %d valid %d\n", ascan::format_shape(full).c_str(),
                 static_cast<long long>(dim), reverse, static_cast<int>(mode), valid);
    for (size_t l = 0; l < xs.size(); ++l)
      std::fprintf(stderr, "  input %zu: %s\n", l, ascan::format_shape(xs[l].shape()).c_str());
    for (size_t o = 0; o < ys.size(); ++o)
      std::fprintf(stderr, "  output %zu: %s, storage of input %d\n", o, ascan::format_shape(ys[o].shape()).c_str(),
                   source[o]);
  }
  const ascan::ScanOptions opts{.reverse = reverse};
  bool refused = false;
  try {
    switch (mode) {
      case Mode::add: ascan::associative_scan(ascan::add, xs[0], dim, opts, ys[0]); break;
      case Mode::linrec_builtin:
        ascan::associative_scan(ascan::linear_recurrence, std::tuple{xs[0], xs[1]}, dim, opts, std::tie(ys[0], ys[1]));
        break;
      case Mode::linrec_lambda:
        ascan::associative_scan(affine, std::tuple{xs[0], xs[1]}, dim, opts, std::tie(ys[0], ys[1]));
        break;
      case Mode::generic:
        ascan::associative_scan(ascan::generic(affine_slices), std::tuple{xs[0], xs[1]}, dim, opts,
                                std::tie(ys[0], ys[1]));
        break;
      case Mode::generic_batched:
        ascan::associative_scan(ascan::generic_batched(affine_slices), std::tuple{xs[0], xs[1]}, dim, opts,
                                std::tie(ys[0], ys[1]));
        break;
      case Mode::generic_list: {
        const auto list_affine = [](const std::vector<TD>& l, const std::vector<TD>& r) {
          return std::vector<TD>{l[0] * r[0], r[0] * l[1] + r[1]};
        };
        std::vector<TD> outs = ys;
        if (short_list) outs.pop_back();
        ascan::associative_scan(ascan::generic(list_affine), xs, dim, opts, outs);
        break;
      }
      case Mode::count: break;
    }
  } catch (const ascan::Error&) {
    refused = true;
  }
  if (refused != !valid) finding(valid ? "a valid request was refused" : "an invalid request was not refused", -1);
  if (refused) {
    for (size_t l = 0; l < xs.size(); ++l)
      if (!same_bits(xs[l], xs_before[l])) finding("a refused request changed an input", static_cast<int64_t>(l));
    for (size_t o = 0; o < ys.size(); ++o)
      if (!same_bits(ys[o], ys_before[o])) finding("a refused request changed an output", static_cast<int64_t>(o));
    return;
  }

  // The fold of the inputs as they were: h = a h + b (or acc + x for add).
  double ra = 0, rb = 0;
  fold(out_shape, dim, reverse, [&](bool first, int64_t i) {
    if (leaves == 1) {
      const double x = at(xs_before[0], out_shape, i);
      rb = first ? x : rb + x;
      if (ys[0].data()[i] != rb) finding("add differs from the fold", i);
      return;
    }
    const double a = at(xs_before[0], out_shape, i), b = at(xs_before[1], out_shape, i);
    ra = first ? a : a * ra;
    rb = first ? b : a * rb + b;
    if (ys[0].data()[i] != ra || ys[1].data()[i] != rb) finding("the affine scan differs from the fold", i);
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  run(in);
  return 0;
}
