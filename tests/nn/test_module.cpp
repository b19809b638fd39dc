// nn::Module: the registry of parameters, buffers and children, dotted names, shared
// parameters, modes, zero_grad, dtype conversion, and state_dict / load_state_dict.
#include <doctest/doctest.h>

#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
using namespace cppgrad::nn;
using namespace nntest;  // the helpers of nn_helpers.h

namespace {

// A leaf module with one parameter, one persistent and one non-persistent buffer.
struct Cell : Module {
  Cell() {
    scale = register_parameter("scale", full({2}, 3.0));
    count = register_buffer("count", zeros({1}));
    scratch = register_buffer("scratch", ones({4}), /*persistent=*/false);
  }
  std::string type_name() const override { return "Cell"; }
  Tensor scale, count, scratch;
};

// Two levels: a parameter of its own, a Cell and a Linear(3, 2).
struct Net : Module {
  Net() {
    bias = register_parameter("bias", zeros({2}));
    cell = register_module("cell", std::make_shared<Cell>());
    fc = register_module("fc", std::make_shared<Linear>(3, 2));
  }
  std::string type_name() const override { return "Net"; }
  Tensor bias;
  std::shared_ptr<Cell> cell;
  std::shared_ptr<Linear> fc;
};

// Holds whatever tensor it is given: two of these given the same tensor tie a weight.
struct Holder : Module {
  explicit Holder(const Tensor& w) { weight = register_parameter("weight", w); }
  Tensor weight;
};

std::vector<std::string> names_of(const NamedTensors& named) {
  std::vector<std::string> names;
  for (const auto& [name, t] : named) names.push_back(name);
  return names;
}

}  // namespace

TEST_CASE("Module registers parameters and buffers and children under dotted names") {
  Net net;
  CHECK(names_of(net.named_parameters()) ==
        std::vector<std::string>{"bias", "cell.scale", "fc.weight", "fc.bias"});
  CHECK(names_of(net.named_parameters(/*recurse=*/false)) == std::vector<std::string>{"bias"});
  CHECK(names_of(net.named_buffers()) == std::vector<std::string>{"cell.count", "cell.scratch"});
  // The registry hands out the very tensors the module holds.
  auto params = net.named_parameters();
  CHECK(params[1].second.is_same(net.cell->scale));
  CHECK(params[2].second.is_same(net.fc->weight));
  // Parameters require grad; buffers do not.
  for (const Tensor& p : net.parameters()) CHECK(p.requires_grad());
  for (const auto& [name, b] : net.named_buffers()) CHECK_FALSE(b.requires_grad());
  // children() and named_children() list the direct children only, in registration order.
  auto children = net.children();
  REQUIRE(children.size() == 2);
  CHECK(children[0].get() == net.cell.get());
  CHECK(children[1].get() == net.fc.get());
  CHECK(net.named_children()[1].first == "fc");
  CHECK(net.cell->children().empty());
  // named_modules() walks depth first; "" is the module itself.
  std::vector<std::string> module_names;
  for (const auto& [name, m] : net.named_modules()) module_names.push_back(name);
  CHECK(module_names == std::vector<std::string>{"", "cell", "fc"});
  CHECK(net.named_modules()[2].second.get() == net.fc.get());
  auto owned = std::make_shared<Net>();  // held by a shared_ptr, the root entry is the module itself
  CHECK(owned->named_modules()[0].second.get() == owned.get());
  CHECK(net.named_modules()[0].second == nullptr);  // on the stack, there is no shared_ptr to hand out
  // 2 + 2 + 3·2 + 2
  CHECK(net.parameter_count() == 12);
}

TEST_CASE("Module registry rejects bad names and duplicates") {
  Cell cell;
  CHECK(contains(error_message([&] { cell.register_parameter("a.b", zeros({1})); }), "register_parameter"));
  CHECK(contains(error_message([&] { cell.register_parameter("", zeros({1})); }), "invalid name"));
  CHECK(contains(error_message([&] { cell.register_parameter("scale", zeros({1})); }), "already registered"));
  CHECK(contains(error_message([&] { cell.register_buffer("count", zeros({1})); }), "already registered"));
  CHECK(contains(error_message([&] { cell.register_module("x", std::shared_ptr<Module>()); }), "null"));
}

TEST_CASE("a parameter shared by two modules is listed and counted once") {
  Tensor shared = full({3, 2}, 0.5);
  Module root;
  auto a = root.register_module("a", std::make_shared<Holder>(shared));
  auto b = root.register_module("b", std::make_shared<Holder>(shared));
  auto extra = root.register_parameter("extra", zeros({4}));
  auto named = root.named_parameters();
  CHECK(names_of(named) == std::vector<std::string>{"extra", "a.weight"});  // first name it was reached by
  CHECK(root.parameters().size() == 2);
  CHECK(root.parameter_count() == 6 + 4);
  CHECK(a->weight.is_same(b->weight));

  // A gradient through both uses accumulates in the one tensor.
  Tensor x = ones({1, 3});
  (x.matmul(a->weight).sum() + x.matmul(b->weight).sum()).backward();
  CHECK(values(shared.grad()) == std::vector<double>(6, 2.0));

  // Converting the root converts the shared tensor once, gradient included; both holders see it.
  root.to(kFloat64);
  CHECK(a->weight.dtype() == kFloat64);
  CHECK(b->weight.is_same(a->weight));
  CHECK(values(b->weight) == std::vector<double>(6, 0.5));
  CHECK(shared.grad().dtype() == kFloat64);
  CHECK(values(shared.grad()) == std::vector<double>(6, 2.0));
}

TEST_CASE("train and eval propagate to every descendant") {
  Net net;
  CHECK(net.is_training());
  CHECK(net.cell->is_training());
  net.eval();
  CHECK_FALSE(net.is_training());
  CHECK_FALSE(net.cell->is_training());
  CHECK_FALSE(net.fc->is_training());
  net.fc->train();  // a child alone can be switched back
  CHECK(net.fc->is_training());
  CHECK_FALSE(net.cell->is_training());
  net.train();
  CHECK(net.cell->is_training());

  // Dropout obeys it: identity in eval.
  auto drop = std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<UnaryModule>>{
      std::make_shared<Dropout>(0.9)});
  drop->eval();
  Tensor x = full({50}, 2.0);
  CHECK(values(drop->forward(x)) == std::vector<double>(50, 2.0));
}

TEST_CASE("zero_grad clears or zeroes every parameter's gradient") {
  Net net;
  Tensor x = ones({4, 3});
  (net.fc->forward(x).sum() + (net.cell->scale * net.bias).sum()).backward();
  for (const Tensor& p : net.parameters()) REQUIRE(p.grad().defined());
  CHECK(values(net.fc->bias.grad()) == std::vector<double>{4.0, 4.0});

  net.zero_grad(/*set_to_none=*/false);
  for (const Tensor& p : net.parameters()) {
    REQUIRE(p.grad().defined());
    for (double g : values(p.grad())) CHECK(g == 0.0);
  }
  net.zero_grad();  // set_to_none defaults to true
  for (const Tensor& p : net.parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("to(kFloat64) converts values in place and keeps handles valid") {
  Net net;
  Tensor weight_handle = net.fc->weight;
  std::vector<double> before = values(weight_handle);
  net.to(kFloat64);
  // The handle taken before the conversion sees float64 now, with the same values.
  CHECK(weight_handle.dtype() == kFloat64);
  CHECK(net.fc->weight.dtype() == kFloat64);
  CHECK(values(weight_handle) == before);
  CHECK(weight_handle.is_same(net.fc->weight));
  CHECK(weight_handle.requires_grad());
  for (const auto& [name, t] : net.state_dict()) CHECK(t.dtype() == kFloat64);
  CHECK(net.cell->scratch.dtype() == kFloat64);  // non-persistent buffers too
  // A float64 forward works and its gradient reaches the converted parameters.
  Tensor x = nntest::randn64({2, 3}, 5);
  net.fc->forward(x).sum().backward();
  REQUIRE(net.fc->weight.grad().defined());
  CHECK(net.fc->weight.grad().dtype() == kFloat64);
  CHECK(values(net.fc->bias.grad()) == std::vector<double>{2.0, 2.0});
  // Back to float32: values rounded to the nearest float.
  net.to(kFloat32);
  CHECK(weight_handle.dtype() == kFloat32);
  CHECK(values(weight_handle) == before);
  CHECK(contains(error_message([&] { net.to(kInt64); }), "Module::to"));
}

TEST_CASE("state_dict lists parameters and persistent buffers") {
  Net net;
  auto state = net.state_dict();
  CHECK(names_of(state) == std::vector<std::string>{"bias", "cell.scale", "cell.count", "fc.weight", "fc.bias"});
  CHECK(state[3].second.is_same(net.fc->weight));
}

TEST_CASE("load_state_dict copies values by name") {
  Net source, target;
  {
    NoGradGuard no_grad;
    source.fc->weight.fill_(0.25);
    source.cell->count.fill_(7.0);
  }
  Tensor handle = target.fc->weight;
  target.load_state_dict(source.state_dict());
  CHECK(values(handle) == std::vector<double>(6, 0.25));
  CHECK(values(target.cell->count) == std::vector<double>{7.0});
  CHECK(values(target.fc->bias) == values(source.fc->bias));
  CHECK(target.fc->weight.requires_grad());
  // The copy is a copy: changing the source afterwards leaves the target alone.
  {
    NoGradGuard no_grad;
    source.fc->weight.fill_(1.0);
  }
  CHECK(values(handle) == std::vector<double>(6, 0.25));
}

TEST_CASE("strict load_state_dict lists missing and unexpected keys and shape mismatches in one Error") {
  Net net;
  std::vector<double> fc_before = values(net.fc->weight);
  NamedTensors state = net.state_dict();
  // Drop "cell.count", add "fc.extra", and give "fc.weight" the wrong shape.
  NamedTensors broken;
  for (const auto& [name, t] : state) {
    if (name == "cell.count") continue;
    broken.emplace_back(name, name == "fc.weight" ? zeros({2, 4}) : t);
  }
  broken.emplace_back("fc.extra", zeros({1}));
  std::string msg = error_message([&] { net.load_state_dict(broken); });
  CHECK(contains(msg, "load_state_dict"));
  CHECK(contains(msg, "Net"));
  CHECK(contains(msg, "missing keys: cell.count"));
  CHECK(contains(msg, "unexpected keys: fc.extra"));
  CHECK(contains(msg, "fc.weight"));
  CHECK(contains(msg, "[2,4]"));
  CHECK(contains(msg, "[2,3]"));
  // Nothing was loaded.
  CHECK(values(net.fc->weight) == fc_before);

  // Only a missing key is enough to fail.
  NamedTensors partial(state.begin(), state.end() - 1);
  std::string missing = error_message([&] { net.load_state_dict(partial); });
  CHECK(contains(missing, "missing keys: fc.bias"));
  CHECK_FALSE(contains(missing, "unexpected"));
}

TEST_CASE("non-strict load_state_dict loads the matching keys and ignores the rest") {
  Net net;
  std::vector<double> weight_before = values(net.fc->weight);
  NamedTensors partial{{"fc.bias", tensor({5.0, 6.0})}, {"somewhere.else", zeros({3})}};
  net.load_state_dict(partial, /*strict=*/false);
  CHECK(values(net.fc->bias) == std::vector<double>{5.0, 6.0});
  CHECK(values(net.fc->weight) == weight_before);
  // A shape mismatch is an error even when not strict.
  NamedTensors wrong{{"fc.bias", zeros({3})}};
  CHECK(contains(error_message([&] { net.load_state_dict(wrong, false); }), "fc.bias: checkpoint [3] vs model [2]"));
}

TEST_CASE("str prints the module tree") {
  Net net;
  std::string s = net.str();
  CHECK(contains(s, "Net(\n"));
  CHECK(contains(s, "(cell): Cell()"));
  CHECK(contains(s, "(fc): Linear(in_features=3, out_features=2, bias=true)"));
}

namespace user_code {
// A user's modules that do not override type_name(): they print under their own class names.
struct TwoLayerNet : Module {
  TwoLayerNet() { fc = register_module("fc", std::make_shared<Linear>(2, 2)); }
  std::shared_ptr<Linear> fc;
};
template <int N>
struct Block : Module {};
}  // namespace user_code

TEST_CASE("a module that does not name itself prints its C++ class name, not Module") {
  user_code::TwoLayerNet net;
  CHECK(net.type_name() == "TwoLayerNet");
  CHECK(net.str().starts_with("TwoLayerNet(\n"));
  CHECK(user_code::Block<3>().type_name() == "Block<3>");
  Holder holder(zeros({1}));  // in an anonymous namespace
  CHECK(holder.type_name() == "Holder");
}

TEST_CASE("assigning to a Buffer member replaces the registered buffer, as a Parameter member's parameter") {
  struct Counter : Module {
    Counter() {
      steps = register_buffer("steps", zeros({}, kInt64));
      gain = register_parameter("gain", ones({2}));
    }
    Buffer steps;
    Parameter gain;
  } m;
  m.steps = full({}, 7.0, kInt64);
  CHECK(m.named_buffers().at(0).second.is_same(m.steps));
  CHECK(m.state_dict().at(1).second.item() == 7.0);
  Buffer copy = m.steps;  // a copy is a plain handle: assigning to it leaves the module alone
  copy = zeros({}, kInt64);
  CHECK(m.named_buffers().at(0).second.item() == 7.0);
  Tensor other = zeros({2}, TensorOptions().requires_grad());
  m.gain = other;
  CHECK(m.named_parameters().at(0).second.is_same(other));
  CHECK(contains(error_message([&] { m.gain = other * 2.0; }), "computed"));
}

TEST_CASE("a module cannot be registered inside itself, and a shared one may sit in two places") {
  // s->push_back(s) was accepted, and parameters() and str() then overflowed the stack.
  auto s = std::make_shared<Sequential>();
  s->push_back(std::make_shared<Linear>(2, 2));
  CHECK(contains(error_message([&] { s->push_back(s); }), "register_module: '1' is this module, or holds it"));
  auto outer = std::make_shared<ModuleList<>>();
  auto inner = std::make_shared<ModuleList<>>();
  outer->push_back(inner);
  CHECK(contains(error_message([&] { inner->push_back(outer); }), "a module cannot be inside itself"));
  CHECK(s->parameters().size() == 2);
  // The same module under two names (shared weights) is allowed, and its parameters counted once.
  auto shared = std::make_shared<Linear>(2, 2);
  auto twice = std::make_shared<ModuleList<>>();
  twice->push_back(shared);
  twice->push_back(shared);
  CHECK(twice->parameters().size() == 2);
  CHECK(contains(error_message([&] { (void)(*twice)[2]; }), "ModuleList: index 2 out of range for 2 modules"));
}

TEST_CASE("a stack of more layers than memory holds is refused before they are built") {
  // TransformerEncoder(options, 2^40) once built layers until it was stopped.
  const auto o = TransformerLayerOptions(8, 2).dim_feedforward(16);
  CHECK(contains(error_message([&] { TransformerEncoder(o, int64_t{1} << 40); }),
                 "TransformerEncoder: 1099511627776 layers of"));
  CHECK(contains(error_message([&] { TransformerDecoder(o, int64_t{1} << 40); }), "more than this machine's"));
  CHECK(TransformerEncoder(o, 3).layers->size() == 3);
}
