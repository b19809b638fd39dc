// What the engine keeps about some nodes beside the graph, so that autograd/node.h carries only
// the graph: the autocast state a forward ran in (its backward runs in it too), and where a
// slice was cut or which rows were selected (the engine's fast form adds its gradient straight
// in there). Each is a table
// keyed by the node, filled when the node is recorded and emptied when it dies; a run that
// slices nothing and never autocasts leaves them empty. A first reading skips this file.
#pragma once

#include <cstdint>
#include <optional>

#include "../tensor/autocast.h"
#include "../tensor/tensor.h"

namespace cppgrad::autograd {

struct Node;

// Kept by record for every node: the calling thread's autocast state, when autocast is on.
void note_forward_state(const Node& node);
// The state a node's backward runs in: its forward's (off when its forward ran without autocast).
autocast::State forward_autocast(const Node& node);

// Set by slice (and so narrow, split, chunk): the output is positions start, start + step, ...
// of dim `dim` of the input. The engine's fast form then adds the gradient straight into the
// input's gradient at those positions, instead of calling the node's backward, which pads it
// with zeros to the input's shape first (autograd/fast/accumulate.h).
struct SliceOf {
  int64_t dim, start, step;
};
void note_slice(const Node& node, SliceOf at);
std::optional<SliceOf> slice_of(const Node& node);

// Set by index_select along dim 0 (and so embedding): the output's row i is the input's row
// index[i]. The engine's fast form then adds the rows' gradients into the input's gradient where
// one has arrived already (a tied embedding's, from the output layer), instead of calling the
// node's backward, which adds them into a table of zeros the input's size first
// (autograd/fast/accumulate.h).
struct RowsOf {
  Tensor index;  // int64 (n)
};
void note_rows(const Node& node, RowsOf rows);
std::optional<RowsOf> rows_of(const Node& node);

// Called by ~Node: the node's entries go.
void forget_side_tables(const Node* node);

}  // namespace cppgrad::autograd
