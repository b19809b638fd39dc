// ONNX export without ONNX Runtime: what the file holds (initializers under state_dict names, a
// tied weight once, symbolic batch and sequence axes, opset 17), and what is refused with an Error
// naming it (an op with no ONNX form, a graph ONNX's checker rejects, options that name nothing,
// a destination that cannot be written, leaving no half-written file). The numbers a file computes
// are checked in ONNX Runtime by examples/onnx_export/check.sh.
#include <doctest/doctest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "cppgrad.h"
#include "nn/onnx/emit.h"
#include "nn/onnx/export.h"
#include "nn_helpers.h"

using namespace cppgrad;
using namespace nntest;  // TempDir, error_message
namespace fs = std::filesystem;
// cppgrad::onnx, spelt out: the test reads files back with ONNX's own classes, namespace ::onnx.
namespace ox = cppgrad::onnx;

namespace {

size_t entries(const TempDir& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()));
}

::onnx::ModelProto read_model(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  ::onnx::ModelProto model;
  REQUIRE(model.ParseFromString(bytes.str()));
  return model;
}

// A custom autograd::Function: y = 2x. It has no ONNX form, and neither has the layer that calls it.
struct Double : autograd::Function<Double> {
  static Tensor forward(autograd::FunctionCtx&, const Tensor& x) { return x.detach() * 2.0; }
  static std::vector<Tensor> backward(autograd::FunctionCtx&, const std::vector<Tensor>& grad_outputs) {
    return {grad_outputs[0] * 2.0};
  }
};
struct Doubler : nn::UnaryModule {
  Tensor forward(const Tensor& x) override { return Double::apply(x); }
  std::string type_name() const override { return "Doubler"; }
};

}  // namespace

TEST_CASE("onnx export: initializers carry the state_dict names, a tied weight once, axes stay symbolic") {
  manual_seed(3);
  {
    auto decoder = std::make_shared<nn::Decoder>(nn::DecoderOptions(11, 8, 2, 2).num_kv_heads(1).tie_embeddings(true));
    TempDir dir;
    ox::export_module(*decoder, {zeros({2, 3}, kInt64)}, dir.file("d.onnx"), {.input_names = {"tokens"}});
    const ::onnx::ModelProto model = read_model(dir.file("d.onnx"));
    CHECK(model.opset_import(0).version() == 17);
    std::set<std::string> initializers;
    for (const auto& t : model.graph().initializer())
      if (t.name().rfind("Constant", 0) != 0 && t.name().find("/Constant") == std::string::npos) initializers.insert(t.name());
    std::set<std::string> state;
    for (const auto& [name, t] : decoder->state_dict()) state.insert(name);
    CHECK(initializers == state);  // tok_embeddings.weight once, though the output uses it too
    const auto& tokens = model.graph().input(0);
    CHECK(tokens.name() == "tokens");
    REQUIRE(tokens.type().tensor_type().shape().dim_size() == 2);
    CHECK(tokens.type().tensor_type().shape().dim(0).dim_param() == "batch");
    CHECK(tokens.type().tensor_type().shape().dim(1).dim_param() == "tokens_dim1");
    CHECK(model.graph().output(0).name() == "output_0");
  }
}

TEST_CASE("onnx graph: a graph that ONNX's checker rejects is refused, a tensor the module does not own is no parameter") {
  nn::Linear linear(6, 4);
  // (B, 6) · W (4, 6) without the transpose: strict shape inference finds 6 ≠ 4.
  ox::Graph wrong(linear);
  const ox::Value x = wrong.add_input("x", kFloat32, {std::string("batch"), int64_t{6}});
  wrong.add_output("y", wrong.matmul(x, wrong.parameter(linear.weight)));
  CHECK(error_message([&] { (void)wrong.serialize_checked("0"); }).find("ONNX's checker refuses the graph of Linear") !=
        std::string::npos);
  // A tensor that is no parameter of the model must go through Graph::constant.
  ox::Graph stray(linear);
  CHECK(error_message([&] { stray.parameter(ones({4, 6})); }).find("no parameter or buffer of the exported module") !=
        std::string::npos);
}

TEST_CASE("onnx export: options that name nothing, and destinations that cannot be written") {
  TempDir dir;
  nn::Linear linear(3, 2);
  const std::vector<Tensor> x = {zeros({1, 3})};
  CHECK(error_message([&] { ox::export_module(linear, x, dir.file("a.onnx"), {.opset_version = 18}); })
            .find("only opset 17 is written") != std::string::npos);
  CHECK(error_message([&] { ox::export_module(linear, x, dir.file("a.onnx"), {.input_names = {"a", "b"}}); })
            .find("2 input_names for 1 example inputs") != std::string::npos);
  CHECK(error_message([&] { ox::export_module(linear, x, dir.file("a.onnx"), {.dynamic_axes = {{"x", {{0, "batch"}}}}}); })
            .find("dynamic_axes names 'x', which is no input") != std::string::npos);
  CHECK(error_message([&] { ox::export_module(linear, x, dir.file("a.onnx"), {.dynamic_axes = {{"input_0", {{2, "n"}}}}}); })
            .find("axis 2 ('n') is not an axis") != std::string::npos);
  CHECK(entries(dir) == 0);

  // No such directory, and a "directory" that is a file: an Error naming the path.
  const std::string missing = dir.file("no/such/dir/model.onnx");
  CHECK(error_message([&] { ox::export_module(linear, x, missing); }).find("export_module: " + missing) != std::string::npos);
  std::ofstream(dir.file("plain")) << "x";
  CHECK(error_message([&] { ox::export_module(linear, x, dir.file("plain/model.onnx")); }).find("cannot create a temporary file") !=
        std::string::npos);
  // A failed export leaves an existing file as it was.
  std::ofstream(dir.file("keep.onnx")) << "old";
  Doubler doubler;
  CHECK_THROWS_AS(ox::export_module(doubler, x, dir.file("keep.onnx")), Error);
  std::ifstream kept(dir.file("keep.onnx"));
  std::string content;
  kept >> content;
  CHECK(content == "old");
  CHECK(entries(dir) == 2);  // plain and keep.onnx: no temporary left behind
}

// ---- export_module: the graph traced from the forward -----------------------------------------

namespace {

// A module of one's own made of existing ops, with no ONNX code: a gated mean over the sequence.
struct Pool : nn::Module {
  Pool() {
    proj = register_module("proj", std::make_shared<nn::Linear>(4, 6));
    norm = register_module("norm", std::make_shared<nn::RMSNorm>(Shape{3}));
  }
  Tensor forward(const Tensor& x) {  // (B, T, 4) -> (B, 2, 3)
    const int64_t B = x.size(0), T = x.size(1);
    Tensor h = proj->forward(x).reshape({B, T, 2, 3}).relu();  // (B, T, 2, 3)
    return norm->forward(h.mean({1}) * h.narrow(1, 0, 1).squeeze(1).sigmoid());
  }
  std::shared_ptr<nn::Linear> proj;
  std::shared_ptr<nn::RMSNorm> norm;
};

}  // namespace

TEST_CASE("onnx export_module: a module of one's own exports with no ONNX code, its sizes read from the graph") {
  manual_seed(5);
  TempDir dir;
  Pool pool;
  ox::export_module(pool, {randn({2, 3, 4})}, dir.file("pool.onnx"), {.input_names = {"x"}, .output_names = {"y"}});
  const ::onnx::ModelProto model = read_model(dir.file("pool.onnx"));
  std::set<std::string> parameters;
  for (const auto& t : model.graph().initializer())
    if (t.name().find("Constant") == std::string::npos) parameters.insert(t.name());
  CHECK(parameters == std::set<std::string>{"proj.weight", "proj.bias", "norm.weight"});
  const auto& x = model.graph().input(0).type().tensor_type().shape();
  CHECK(x.dim(0).dim_param() == "batch");
  CHECK(x.dim(1).dim_param() == "x_dim1");
  CHECK(x.dim(2).dim_value() == 4);
  // The reshape to (B, T, 2, 3) takes B and T from x's shape, not from the example's 2 and 3.
  std::set<std::string> shape_sources;
  for (const auto& node : model.graph().node())
    if (node.op_type() == "Shape") shape_sources.insert(node.input(0));
  CHECK(shape_sources == std::set<std::string>{"x"});
  CHECK(model.graph().output(0).name() == "y");
}

TEST_CASE("onnx export_module: what the trace cannot write is refused, naming the op and where it ran") {
  TempDir dir;
  auto seq = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 4), std::make_shared<Doubler>());
  std::string message = error_message([&] { ox::export_module(*seq, {zeros({2, 4})}, dir.file("m.onnx")); });
  CHECK(message.find("op 'Double' (near '0' of Sequential) has no ONNX form") != std::string::npos);
  nn::Linear linear(4, 4);
  // A graph that depends on the sizes: other ops at other sizes.
  ox::Forward branching = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0].size(0) == 2 ? linear.forward(in[0]).relu() : linear.forward(in[0]).tanh()};
  };
  message = error_message([&] { ox::export_module(linear, branching, {zeros({2, 4})}, dir.file("m.onnx")); });
  CHECK(message.find("runs other ops at other sizes (op 1 is relu at the example's sizes, tanh at others") !=
        std::string::npos);
  // A tensor made outside the traced ops whose shape follows the input's: the file could not resize it.
  ox::Forward untraced = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{linear.forward(in[0]) + zeros(in[0].shape())};
  };
  message = error_message([&] { ox::export_module(linear, untraced, {zeros({2, 4})}, dir.file("m.onnx")); });
  CHECK(message.find("add (op 1, near the exported module itself) reads a [2,4] tensor made by an op with no ONNX "
                     "form, whose shape follows the inputs' ([3,4] at other sizes)") != std::string::npos);
  // Two dynamic axes the example gives one size: the trace could not tell them apart.
  message = error_message([&] { ox::export_module(linear, {zeros({3, 3, 4})}, dir.file("m.onnx")); });
  CHECK(message.find("dynamic axes 0 and 1 have the same size 3") != std::string::npos);
  // A dynamic axis that other_inputs leave at the example's size: it would be written as a constant.
  message = error_message([&] {
    ox::export_module(linear, {zeros({2, 5, 4})}, dir.file("m.onnx"), {.other_inputs = {zeros({3, 5, 4})}});
  });
  CHECK(message.find("dynamic axis 1 ('input_0_dim1') has size 5 in both traces") != std::string::npos);
  message = error_message([&] {
    ox::export_module(linear, {zeros({2, 4})}, dir.file("m.onnx"), {.other_inputs = {zeros({3, 5})}});
  });
  CHECK(message.find("fixed axis 1 is 4 in the example, 5 in other_inputs") != std::string::npos);
  // An op whose ONNX form reads arguments, recorded without them (by record(), not noted): a clamp
  // without its bounds would be written as the identity.
  ox::Forward unnoted = [&](const std::vector<Tensor>& in) {
    Tensor y;
    {
      autograd::TraceScope hidden;  // clamp's own note is not made: the scope ends without one
      y = linear.forward(in[0]).clamp(-0.5, 0.5);
    }
    autograd::trace_record("clamp", y, {in[0]});
    return std::vector<Tensor>{y};
  };
  message = error_message([&] { ox::export_module(linear, unnoted, {zeros({2, 4})}, dir.file("m.onnx")); });
  CHECK(message.find("op 'clamp' (near the exported module itself of Linear) was recorded without its arguments") !=
        std::string::npos);
  // A size-1 dim einsum broadcasts against a named one: ONNX's Einsum does not.
  Tensor row = randn({1, 4});
  ox::Forward broadcasting = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{einsum("bi,bi->bi", {in[0], row})};
  };
  message = error_message([&] { ox::export_module(linear, broadcasting, {zeros({2, 4})}, dir.file("m.onnx")); });
  CHECK(message.find("einsum: dim 0 of operand 1 [1,4] broadcasts (size 1) against index b") != std::string::npos);
  CHECK(entries(dir) == 0);
}

namespace {

// Heads that mix their features through a weight of their own, by einsum: (B, T, 8) -> (B, T, 8).
struct HeadMixer : nn::Module {
  HeadMixer() {
    proj = register_module("proj", std::make_shared<nn::Linear>(8, 8));
    mix = register_parameter("mix", randn({2, 4, 4}));
  }
  Tensor forward(const Tensor& x) {
    const int64_t B = x.size(0), T = x.size(1);
    Tensor h = proj->forward(x).reshape({B, T, 2, 4});
    return einsum("bthi,hij->bthj", {h, mix}).reshape({B, T, 8});
  }
  std::shared_ptr<nn::Linear> proj;
  nn::Parameter mix;
};

}  // namespace

TEST_CASE("onnx export_module: einsum is one Einsum node, its equation spelt from the trace") {
  manual_seed(6);
  TempDir dir;
  HeadMixer mixer;
  ox::export_module(mixer, {randn({2, 3, 8})}, dir.file("mix.onnx"), {.input_names = {"x"}});
  const ::onnx::ModelProto model = read_model(dir.file("mix.onnx"));
  std::vector<std::string> equations;
  for (const auto& node : model.graph().node())
    if (node.op_type() == "Einsum") equations.push_back(node.attribute(0).s());
  CHECK(equations == std::vector<std::string>{"bthi,hij->bthj"});
  // "..." takes letters the equation does not use; an implicit output is spelt out.
  Tensor w = randn({4, 5});
  ox::Forward ellipsis = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{einsum("...i,ij", {in[0], w})}; };
  nn::Linear unused(1, 1);
  ox::export_module(unused, ellipsis, {randn({2, 3, 4})}, dir.file("ell.onnx"));
  equations.clear();
  const ::onnx::ModelProto ell = read_model(dir.file("ell.onnx"));
  for (const auto& node : ell.graph().node())
    if (node.op_type() == "Einsum") equations.push_back(node.attribute(0).s());
  CHECK(equations == std::vector<std::string>{"ABi,ij->ABj"});
}

TEST_CASE("onnx export_module: every elementwise row of the op tables has an ONNX form") {
  CHECK(ox::ops_without_onnx_form().empty());
}

// As torch.onnx.export: a model left in training mode is traced in eval mode (its dropout the
// identity, batch norm by its running statistics, which the two traced forwards leave as they
// were), and each submodule gets its own mode back, a child set to eval inside a training model
// included.
TEST_CASE("onnx export_module: traces in eval mode and gives every submodule its mode back") {
  manual_seed(7);
  TempDir dir;
  auto norm = std::make_shared<nn::BatchNorm1d>(4);
  auto drop = std::make_shared<nn::Dropout>(0.5);
  auto frozen = std::make_shared<nn::Dropout>(0.5);
  auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 4), norm, drop, frozen);
  net->train();
  frozen->eval();
  const std::vector<double> mean_before = values(norm->running_mean);
  ox::export_module(*net, {randn({3, 4})}, dir.file("bn.onnx"), {.input_names = {"x"}});
  CHECK(values(norm->running_mean) == mean_before);
  CHECK(net->is_training());
  CHECK(norm->is_training());
  CHECK(drop->is_training());
  CHECK_FALSE(frozen->is_training());
  CHECK(read_model(dir.file("bn.onnx")).graph().node_size() > 0);  // a dropout in training mode has no ONNX form
  // A throw inside the export gives the modes back too.
  CHECK_THROWS_AS(ox::export_module(*net, {randn({3, 4})}, dir.file("bn.onnx"), {.opset_version = 18}), Error);
  CHECK(net->is_training());
  CHECK_FALSE(frozen->is_training());
}
