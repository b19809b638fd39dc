// The fast forms of the engine's gradient sums (skip them on a first reading: the engine's
// reference is slot = slot + g, and a slice's own backward, which pads its gradient with zeros
// to the input's shape). Used only by a backward without create_graph, outside reference mode.
#pragma once

#include "../node.h"
#include "../side_tables.h"

namespace cppgrad::autograd::fast {

// slot += g in place, when nothing else refers to slot or its memory (a gradient handed to two
// inputs, or kept by a hook, is shared), it is laid out densely, is not part of a graph, and
// matches g's shape and dtype. Returns false, having done nothing, otherwise.
bool add_in_place(Tensor& slot, const Tensor& g);

// The gradient `piece` of a slice, added into the gradient `slot` of the sliced input (of
// `shape`) at the sliced positions: dA[slice] += dC. This is what the slice's backward
// (zeros with dC written at the positions) followed by slot + that would give, but it writes
// only the slice's elements, and the slices of one tensor (the q, k and v of a fused
// projection) share one gradient instead of each padding its own with zeros.
void add_slice(Tensor& slot, const Tensor& piece, const Shape& shape, const SliceOf& at);

// The gradient `rows` (n, ...) of index_select along dim 0, added into the gradient `slot` of
// the input (of `shape`): dA[index[i]] += dC[i]. Where a gradient has arrived in slot already
// (a tied embedding's, from the output layer), only the selected rows are read and written:
// each row's contributions are summed first, in index order, and then added to slot's row, the
// additions index_select's backward (zeros with the rows added in index order) followed by
// slot + that would make, so the same bits, without a table of zeros the input's size. A fresh
// slot is that backward's table.
void add_rows(Tensor& slot, const Tensor& rows, const Shape& shape, const RowsOf& at);

}  // namespace cppgrad::autograd::fast
