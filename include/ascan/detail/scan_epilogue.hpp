// scan_epilogue.hpp — the contract between the pointwise scan and an epilogue (a transform of
// each block's output rows while they are in cache) or a prologue (inputs made per block).
#pragma once

#include "ascan/config.hpp"


namespace ascan::detail {
ASCAN_ISA_BEGIN

// No epilogue: a scan's final rows stay as they are.
struct NoEpilogue {
  static constexpr bool active = false;
  bool has_prologue() const { return false; }
};

// An epilogue transforms each block's final output rows in place before they are stored (a
// gradient computed from a scan's outputs, without writing the scan's outputs to memory and
// reading them back). It has
//   static constexpr bool active = true;
//   bool keeps(size_t leaf) const;  // whether the leaf's transformed rows are stored at all
//   void operator()(int64_t item, Ptrs rows, int64_t offset, int64_t n, int64_t w, int64_t lo,
//                   Ptrs carry) const;
// called with `n` rows of `w` lanes of one block of work item `item`, in ascending address
// order: `rows` points at the lowest one, whose output offset (in the output tensors' elements)
// is `offset` and whose logical step is `lo`; rows lie the output's row stride apart, in `rows`
// as in the output. The rows are local scans: their final value is f(carry, row) for the `w`
// lanes of `carry` (the inclusive prefix of the steps before them), or the row itself where
// `carry` holds null pointers. The epilogue applies the carry itself, fused with its own
// arithmetic: the runner's fix-up pass over the block (a read and a write of every leaf) is
// left out. Successive blocks read their predecessor's last row from a side buffer, not from
// the output, so the transform may overwrite every row.
// An epilogue may also make leaf 0's inputs (a prologue, where they are a function of other
// tensors: a scan over Jacobians evaluated per block rather than stored). It then has
//   bool has_prologue() const;  // true
//   void fill_inputs(int64_t item, T* a, T* aux, int64_t offset, int64_t n, int64_t w, int64_t lo) const;
// called before each block is scanned with the same `offset`, `n`, `w`, `lo` as above (its rows
// in address order): it writes leaf 0's input rows to `a` and may write rows of its own to
// `aux`, both laid out like the output rows (the lowest row first, the output's row stride
// apart) in the worker's scratch, with at least one row (and 64 bytes) of slack before the first
// and after the last row that it may write too. The scan reads leaf 0 from `a`, not from its
// tensor, and leaf 0 must be laid out like the output. The epilogue's calls get the `aux` row of
// their lowest row as an eighth argument (null without a prologue). Without one, has_prologue()
// is false.

ASCAN_ISA_END
}  // namespace ascan::detail
