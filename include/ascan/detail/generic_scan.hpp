// generic_scan.hpp — the host Generic-mode scan: odd/even tree over slices.
//
// Level by level (as in JAX and PyTorch): combine adjacent pairs, scan the half-length sequence
// of pair results recursively, then fill the even positions with one more combine each. About
// 2T combines in 2·log2(T) levels; the combines of one level run in parallel. The association
// order depends only on T, so results are identical for any thread count.
// On Tensors the cost per combine is the combine's own: the slices of the inputs are views, each
// level's results are packed into one contiguous block per leaf (the combine's result is copied
// there and its block goes straight back to the thread's cache, so the next combine reuses it
// while it is in L1), and the last level writes into the output tensors.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "ascan/detail/tree.hpp"
#include "ascan/parallel.hpp"
#include "ascan/tensor_ops.hpp"

namespace ascan::detail {

// Calls fn on every leaf of a (nested) tuple structure, depth first.
template <class S, class Fn>
void visit_leaves(const S& s, Fn&& fn) {
  if constexpr (is_std_tuple_v<S>) {
    std::apply([&](const auto&... c) { (visit_leaves(c, fn), ...); }, s);
  } else {
    fn(s);
  }
}

// A runtime-length list of same-typed leaves (Generic mode only).
template <class X> struct is_tensor_list : std::false_type {};
template <class T> struct is_tensor_list<std::vector<Tensor<T>>> : std::true_type {};

// Calls fn(l, leaf) on every Tensor leaf of a slice structure (a Tensor, a nested std::tuple of
// them, or a std::vector of Tensors), l counting the leaves depth first.
template <class S, class Fn>
void for_each_leaf(S& s, Fn&& fn, size_t& l) {
  if constexpr (is_std_tuple_v<S>) {
    std::apply([&](auto&... c) { (for_each_leaf(c, fn, l), ...); }, s);
  } else if constexpr (is_tensor_list<std::remove_const_t<S>>::value) {
    for (auto& t : s) fn(l++, t);
  } else {
    fn(l++, s);
  }
}
template <class S, class Fn>
void for_each_leaf(S& s, Fn&& fn) {
  size_t l = 0;
  for_each_leaf(s, fn, l);
}
template <class Leaf>
using leaf_value_t = typename std::decay_t<Leaf>::value_type;

// n slice structures whose leaf l lies at first_l + i * step_l (a packed [n, slice...] block, or
// the slices of an input), held as handles bound to one view header per leaf: making and dropping
// a level costs no atomic operation per element (the header's count covers all its handles).
template <class X>
class SliceLevel {
 public:
  struct Leaf {
    StorageHeader* header = nullptr;  // a view header with one reference, taken over by the level
    char* first = nullptr;
    std::ptrdiff_t step = 0;  // bytes from one element to the next
    size_t bytes = 0;         // bytes of one slice
    int64_t numel = 0;
  };

  explicit SliceLevel(int64_t n) : n_(n) {}
  SliceLevel(const SliceLevel&) = delete;
  SliceLevel& operator=(const SliceLevel&) = delete;
  ~SliceLevel() {
    if (items_) {
      for (int64_t i = 0; i < n_; ++i)
        for_each_leaf(items_[i], [](size_t, auto& t) { TensorAccess<leaf_value_t<decltype(t)>>::unbind(t); });
      std::destroy_n(items_, n_);
      release_storage(items_block_);
    }
    for (const Leaf& lf : leaves_) release_storage(lf.header, items_ ? n_ + 1 : 1);
  }

  void add_leaf(const Leaf& lf) {
    try {
      leaves_.push_back(lf);
    } catch (...) {
      release_storage(lf.header);
      throw;
    }
  }
  // Makes the n structures (copies of `blank`, whose leaves are empty; in a block of the caching
  // allocator, as a level can hold many) and binds their leaves.
  void bind_all(const X& blank) {
    StorageHeader* block = allocate_storage(sizeof(X) * static_cast<size_t>(n_));
    try {
      std::uninitialized_fill_n(static_cast<X*>(block->payload()), n_, blank);
    } catch (...) {
      release_storage(block);
      throw;
    }
    items_block_ = block;
    items_ = static_cast<X*>(block->payload());
    for (int64_t i = 0; i < n_; ++i)
      for_each_leaf(items_[i], [&](size_t l, auto& t) {
        using T = leaf_value_t<decltype(t)>;
        const Leaf& lf = leaves_[l];
        TensorAccess<T>::bind(t, lf.header, reinterpret_cast<T*>(lf.first + i * lf.step), lf.numel);
      });
    for (const Leaf& lf : leaves_) retain_storage(lf.header, n_);
  }

  // Fresh packed blocks for n structures with the leaf types and slice shapes of `proto`.
  static std::unique_ptr<SliceLevel> packed(const X& proto, const X& blank, int64_t n) {
    auto level = std::make_unique<SliceLevel>(n);
    for_each_leaf(proto, [&](size_t, const auto& t) {
      using T = leaf_value_t<decltype(t)>;
      Shape dims{n};
      dims.insert(dims.end(), t.shape().begin(), t.shape().end());
      auto block = Tensor<T>::empty(dims);
      const size_t bytes = sizeof(T) * static_cast<size_t>(t.numel());
      level->add_leaf({TensorAccess<T>::make_view_header(block, t.shape().data(), t.shape().size()),
                       reinterpret_cast<char*>(block.data()), static_cast<std::ptrdiff_t>(bytes), bytes,
                       t.numel()});
    });
    level->bind_all(blank);
    return level;
  }

  const X* items() const { return items_; }
  int64_t size() const { return n_; }
  // Copies y (slice shapes checked by the scan) into element i of a packed level.
  void store(int64_t i, const X& y) {
    for_each_leaf(y, [&](size_t l, const auto& t) {
      const Leaf& lf = leaves_[l];
      std::memcpy(lf.first + i * lf.step, t.data(), lf.bytes);
    });
  }

 private:
  int64_t n_;
  std::vector<Leaf> leaves_;
  StorageHeader* items_block_ = nullptr;
  X* items_ = nullptr;  // n_ structures once bound
};

template <class X>
struct GenericScan {
  std::vector<Shape> slice_shapes;  // expected shape of each leaf's slices
  std::string_view where;
  int64_t grain = 1;
  bool parallel = true;  // false for slices that live on a (single-threaded) autodiff tape

  template <class Body>
  void for_range(int64_t n, const Body& body) const {
    if (parallel) parallel_for(n, grain, body); else body(0, n);
  }

  // Calls f and checks that the result has one leaf per input leaf, each of its slice shape.
  template <class F>
  X combine(const F& f, const X& a, const X& b) const {
    X r = f(a, b);
    if constexpr (is_tensor_list<X>::value) {
      if (r.size() != slice_shapes.size())
        raise("{}: the generic combine returned {} leaves, expected {} (one per input leaf)", where,
              r.size(), slice_shapes.size());
      for (size_t l = 0; l < r.size(); ++l) check_leaf(l, r[l].shape());
    } else {
      size_t leaf = 0;
      visit_leaves(r, [&](const auto& t) { check_leaf(leaf++, t.shape()); });
    }
    return r;
  }

  void check_leaf(size_t leaf, const Shape& got) const {
    const Shape& want = slice_shapes[leaf];
    bool same = got.size() == want.size();  // (a loop: a memcmp call costs more for rank 2)
    for (size_t i = 0; same && i < got.size(); ++i) same = got[i] == want[i];
    if (!same)
      raise("{}: the generic combine returned leaf {} of shape {}, expected {} (the slice shape "
            "of leaf {}: its input shape without the scan dim)", where, leaf, format_shape(got),
            format_shape(slice_shapes[leaf]), leaf);
  }

  template <class F>
  std::vector<X> scan(const F& f, std::vector<X> xs) const {
    const int64_t n = static_cast<int64_t>(xs.size());
    if (n < 2) return xs;
    std::vector<X> pairs(n / 2);
    for_range(n / 2, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) pairs[i] = combine(f, xs[2 * i], xs[2 * i + 1]);
    });
    std::vector<X> odd = scan(f, std::move(pairs));  // odd[i] = y_{2i+1}
    std::vector<X> ys(n);
    ys[0] = xs[0];
    for (int64_t i = 0; i < n / 2; ++i) ys[2 * i + 1] = std::move(odd[i]);
    for_range((n - 1) / 2, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ys[2 * i + 2] = combine(f, ys[2 * i + 1], xs[2 * i + 2]);
    });
    return ys;
  }

  struct StoreInto {
    SliceLevel<X>* level;
    void operator()(int64_t i, const X& y) const { level->store(i, y); }
  };

  // The same scan on slices held in SliceLevels, handing each y_t to emit(t, y_t) (once per t,
  // concurrently for different t) instead of collecting them. `blank`: X with empty leaves.
  template <class F, class Emit>
  void scan_levels(const F& f, const X* xs, int64_t n, const X& blank, const Emit& emit) const {
    if (n == 0) return;
    emit(0, xs[0]);
    if (n == 1) return;
    const int64_t m = n / 2;
    const auto odd = SliceLevel<X>::packed(xs[0], blank, m);  // y_{2i+1}
    {
      const auto pairs = SliceLevel<X>::packed(xs[0], blank, m);
      for_range(m, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) pairs->store(i, combine(f, xs[2 * i], xs[2 * i + 1]));
      });
      scan_levels(f, pairs->items(), m, blank, StoreInto{odd.get()});  // (one Emit type below the top)
    }
    const X* ys = odd->items();
    for_range(m, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        emit(2 * i + 1, ys[i]);
        if (2 * i + 2 < n) emit(2 * i + 2, combine(f, ys[i], xs[2 * i + 2]));
      }
    });
  }
};

// Where the slices of one output leaf go: step t of a [outer, length, inner] block.
struct SliceWriter {
  char* data = nullptr;
  size_t elem_bytes = 0;
  ScanView view;

  template <class T>
  static SliceWriter of(Tensor<T>& out, int64_t dim) {
    return {reinterpret_cast<char*>(out.data()), sizeof(T), scan_view(out.shape(), dim)};
  }
  // Copies slice `s` (shape checked by the scan: outer * inner elements) to step t.
  template <class T>
  void write(int64_t t, const Tensor<T>& s) const {
    write_bytes(t, reinterpret_cast<const char*>(s.data()));
  }
  // The same from the outer * inner contiguous elements at src.
  void write_bytes(int64_t t, const char* src) const {
    const size_t run = elem_bytes * static_cast<size_t>(view.inner);
    if (view.outer == 1) {
      std::memcpy(data + static_cast<size_t>(t) * run, src, run);
      return;
    }
    for (int64_t o = 0; o < view.outer; ++o)
      std::memcpy(data + static_cast<size_t>(o * view.length + t) * run, src + static_cast<size_t>(o) * run, run);
  }
};

// An input whose storage an output shares (in place) is copied first: the scan reads views of its
// inputs while it writes the outputs.
template <class T, class Outs>
Tensor<T> unaliased_input(const Tensor<T>& x, const Outs& outs) {
  bool shared = false;
  for_each_leaf(outs, [&](size_t, const auto& y) { shared = shared || y.storage_id() == x.storage_id(); });
  return shared && x.numel() > 0 ? x.clone() : x;
}

// Rows of one leaf: row i at first + i * step (bytes), `bytes` each.
struct RowSet {
  char* first = nullptr;
  std::ptrdiff_t step = 0;
  size_t bytes = 0;

  char* row(int64_t i) const { return first + i * step; }
  // Rows start, start + stride, start + 2 * stride, ...
  RowSet every(int64_t start, int64_t stride) const { return {row(start), step * stride, bytes}; }
};

// The slices of input leaf x along dim, in scan order: x's own rows when they are contiguous (dim
// is the outermost non-trivial axis), else the rows of one gathered copy. `hold` keeps the
// storage they lie in (a copy of x when an output shares it).
template <class T, class Outs>
RowSet input_rows(const Tensor<T>& x_in, const Outs& outs, int64_t dim, bool reverse, Tensor<T>& hold) {
  hold = unaliased_input(x_in, outs);  // (a handle: its elements are only read)
  const ScanView v = scan_view(hold.shape(), dim);
  const int64_t numel = v.outer * v.inner;
  const size_t bytes = sizeof(T) * static_cast<size_t>(numel);
  const auto step = static_cast<std::ptrdiff_t>(bytes);
  if (v.outer == 1) {
    T* first = hold.data() + (reverse ? (v.length - 1) * v.inner : 0);
    return {reinterpret_cast<char*>(first), reverse ? -step : step, bytes};
  }
  Shape dims{v.length};
  const Shape slice = remove_dim(hold.shape(), dim);
  dims.insert(dims.end(), slice.begin(), slice.end());
  auto block = Tensor<T>::empty(dims);
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t t = 0; t < v.length; ++t)
      std::memcpy(block.data() + (reverse ? v.length - 1 - t : t) * numel + o * v.inner,
                  hold.data() + (o * v.length + t) * v.inner, sizeof(T) * v.inner);
  hold = block;
  return {reinterpret_cast<char*>(block.data()), step, bytes};
}

// Adds the slices of input leaf x along dim, in scan order, to `level` (views of input_rows).
template <class X, class T, class Outs>
void add_input_leaf(SliceLevel<X>& level, const Tensor<T>& x_in, const Outs& outs, int64_t dim, bool reverse) {
  Tensor<T> hold;
  const RowSet rows = input_rows(x_in, outs, dim, reverse, hold);
  const Shape slice = remove_dim(x_in.shape(), dim);
  level.add_leaf({TensorAccess<T>::make_view_header(hold, slice.data(), slice.size()), rows.first, rows.step,
                  rows.bytes, static_cast<int64_t>(rows.bytes / sizeof(T))});
}

// Scans the flat leaves `xs` (each already validated: rank > dim, equal length T on dim) into
// `ys` (same shapes).
template <class X, class F>
void generic_scan(const F& f, const typename Tree<X>::Flat& xs, const typename Tree<X>::Flat& ys,
                  int64_t dim, bool reverse, std::string_view where) {
  using Node = Tree<X>;
  constexpr size_t L = Node::num_leaves;
  const int64_t T = std::get<0>(xs).shape()[dim];
  if (T == 0) return;
  GenericScan<X> scanner;
  scanner.where = where;
  int64_t slice_elems = 0;
  [&]<size_t... I>(std::index_sequence<I...>) {
    (scanner.slice_shapes.push_back(remove_dim(std::get<I>(xs).shape(), dim)), ...);
    ((slice_elems += shape_numel(scanner.slice_shapes[I])), ...);
  }(std::make_index_sequence<L>{});
  scanner.grain = std::max<int64_t>(1, 2048 / std::max<int64_t>(slice_elems, 1));

  SliceLevel<X> input(T);
  [&]<size_t... I>(std::index_sequence<I...>) {
    (add_input_leaf(input, std::get<I>(xs), ys, dim, reverse), ...);
  }(std::make_index_sequence<L>{});
  input.bind_all(X{});

  const std::array<SliceWriter, L> writers = [&]<size_t... I>(std::index_sequence<I...>) {
    return std::array<SliceWriter, L>{
        SliceWriter::of(const_cast<std::tuple_element_t<I, typename Node::Flat>&>(std::get<I>(ys)), dim)...};
  }(std::make_index_sequence<L>{});
  scanner.scan_levels(f, input.items(), T, X{}, [&](int64_t t, const X& y) {
    const int64_t dst = reverse ? T - 1 - t : t;
    for_each_leaf(y, [&](size_t l, const auto& s) { writers[l].write(dst, s); });
  });
}

// The same for a std::vector of leaves; `ys` holds one output per leaf.
template <class T, class F>
void generic_scan_list(const F& f, const std::vector<Tensor<T>>& xs, std::vector<Tensor<T>>& ys,
                       int64_t dim, bool reverse, std::string_view where) {
  using X = std::vector<Tensor<T>>;
  const size_t L = xs.size();
  const int64_t T_len = xs[0].shape()[dim];
  if (T_len == 0) return;
  GenericScan<X> scanner;
  scanner.where = where;
  int64_t slice_elems = 0;
  SliceLevel<X> input(T_len);
  for (size_t l = 0; l < L; ++l) {
    scanner.slice_shapes.push_back(remove_dim(xs[l].shape(), dim));
    slice_elems += shape_numel(scanner.slice_shapes[l]);
    add_input_leaf(input, xs[l], ys, dim, reverse);
  }
  scanner.grain = std::max<int64_t>(1, 2048 / std::max<int64_t>(slice_elems, 1));
  input.bind_all(X(L));
  std::vector<SliceWriter> writers;
  for (size_t l = 0; l < L; ++l) writers.push_back(SliceWriter::of(ys[l], dim));
  scanner.scan_levels(f, input.items(), T_len, X(L), [&](int64_t t, const X& y) {
    const int64_t dst = reverse ? T_len - 1 - t : t;
    for (size_t l = 0; l < L; ++l) writers[l].write(dst, y[l]);
  });
}

}  // namespace ascan::detail
