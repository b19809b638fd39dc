// Pictures of backward graphs, as micrograd's draw_dot: plot::to_dot writes the graph of a
// two-layer MLP's loss and of one attention layer's, with the parameters named as in
// named_parameters(), and Graphviz renders them:
//   build/release/examples/graph_picture [DIR]   -> mlp_graph.{dot,svg}, attention_graph.{dot,svg}
// (`dot` comes with Debian's graphviz package, which scripts/setup installs.)
#include <fmt/core.h>

#include <cstdlib>
#include <string>

#include "cppgrad.h"
#include "runtime/files.h"
#include "tools/graph_dot.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

namespace {

// Writes <dir>/<stem>.dot and renders <dir>/<stem>.svg with dot; false if either fails.
bool write_picture(const std::string& dir, const std::string& stem, const std::string& dot) {
  const std::string base = dir + "/" + stem;
  try {
    files::write_file_atomically(base + ".dot", std::string_view(dot), "graph_picture");  // whole or not at all
  } catch (const Error& e) {
    fmt::print(stderr, "{}\n", e.what());
    return false;
  }
  const std::string command = fmt::format("dot -Tsvg '{}.dot' -o '{}.svg'", base, base);
  const bool ok = std::system(command.c_str()) == 0;
  fmt::print("{}.dot{}\n", base, ok ? fmt::format(" -> {}.svg", base) : " (dot failed: is graphviz installed?)");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : ".";
  if (argc > 2 || dir.empty()) {  // "" would put the pictures in /
    fmt::print(stderr, "usage: graph_picture [DIR], the folder the pictures go to (. by default)\n");
    return 2;
  }
  manual_seed(0);

  // A two-layer MLP and its mean squared error.
  auto mlp = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(2, 16), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(16, 1));
  Tensor x = randn({8, 2}), y = randn({8, 1});
  Tensor mlp_loss = F::mse_loss(mlp->forward(x), y);
  bool ok = write_picture(dir, "mlp_graph", plot::to_dot(mlp_loss, mlp->named_parameters()));

  // One multi-head self-attention layer with a padding mask, batch 2, 5 tokens, 8 features, 2 heads.
  nn::MultiheadAttention attention(8, 2);
  Tensor tokens = randn({2, 5, 8});
  Tensor padding = tensor({{0, 0, 0, 1, 1}, {0, 0, 0, 0, 0}}).to(kBool);
  Tensor attention_loss =
      attention.forward(tokens, tokens, tokens, {.key_padding_mask = padding}).output.square().mean();
  ok = write_picture(dir, "attention_graph", plot::to_dot(attention_loss, attention.named_parameters())) && ok;
  return ok ? 0 : 1;
}
