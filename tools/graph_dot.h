// A picture of the backward graph: plot::to_dot writes it in Graphviz's DOT language, as
// micrograd's draw_dot does, to be rendered with `dot -Tsvg graph.dot -o graph.svg`.
//
//   Tensor loss = F::mse_loss(model->forward(x), y);
//   std::ofstream("graph.dot") << plot::to_dot(loss, model->named_parameters());
//
// What it draws, data flowing downwards from the parameters to the output:
//   - one box per op (its graph node): "MatmulBackward", the op's output shape and dtype;
//   - one ellipse per leaf that gets a gradient, labelled with its parameter name when `names`
//     gives one ("0.weight [64,1] float32"), else "leaf";
//   - the output tensor at the bottom; a node used by several ops is drawn once with several
//     edges out, so shared subgraphs (tied weights, residuals) show;
//   - saved tensors as dashed edges: from the leaf or op that produced the tensor when it is in
//     the picture, else from a small "saved" note (a constant, or the op's own output).
// A graph larger than max_nodes stops being expanded there, with a note saying how many ops
// were left out (a Transformer's backward has thousands).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "../autograd/node.h"
#include "../tensor/options.h"

namespace cppgrad::plot {

struct DotOptions {
  CPPGRAD_ARG(int64_t, max_nodes, 400)   // op nodes drawn at most; the rest is summarised
  CPPGRAD_ARG(bool, show_saved, true)    // the dashed edges of saved tensors
};

std::string to_dot(const Tensor& output, const std::vector<std::pair<std::string, Tensor>>& names = {},
                   const DotOptions& options = {});

}  // namespace cppgrad::plot
