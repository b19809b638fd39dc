// plot::attention_grid: every head of every MultiheadAttention of a model on one example, in one
// call, ready for plot::draw_attention_grid.
#include <doctest/doctest.h>

#include "../nn/nn_helpers.h"
#include "tools/tools.h"

using namespace cppgrad;
using cppgrad::nntest::error_message;

namespace {

std::shared_ptr<nn::TransformerEncoder> two_layers() {
  manual_seed(3);
  return std::make_shared<nn::TransformerEncoder>(nn::TransformerLayerOptions(8, 2).dim_feedforward(16), 2);
}

}  // namespace

TEST_CASE("attention_grid: a row per attention layer, a map per head whose rows sum to 1") {
  auto model = two_layers();
  const Tensor x = randn({1, 5, 8});
  model->train();
  const plot::AttentionGrid grid = plot::attention_grid(*model, [&] { model->forward(x); }, "two layers");
  CHECK(grid.title == "two layers");
  CHECK(grid.heads == 2);
  REQUIRE(grid.rows.size() == 2);
  CHECK(grid.rows[0].heading == "layers.0.self_attn");
  CHECK(grid.rows[1].heading == "layers.1.self_attn");
  CHECK(grid.rows[0].queries == std::vector<std::string>{"0", "1", "2", "3", "4"});
  for (const auto& row : grid.rows) {
    REQUIRE(row.heads.size() == 2);
    for (const auto& map : row.heads) {
      REQUIRE(map.size() == 25);
      for (int q = 0; q < 5; ++q) {
        double sum = 0;
        for (int k = 0; k < 5; ++k) sum += map[static_cast<size_t>(5 * q + k)];
        CHECK(sum == doctest::Approx(1).epsilon(1e-6));  // a float32 softmax row
      }
    }
  }
  // The model as it was: in training mode, keeping no weights.
  CHECK(model->is_training());
  for (auto& [name, module] : model->named_modules())
    if (auto attention = std::dynamic_pointer_cast<nn::MultiheadAttention>(module)) {
      CHECK_FALSE(attention->store_attention);
      CHECK_FALSE(attention->last_attention.defined());
    }
  // The maps are what the layers computed, in eval mode: the same forward with the weights
  // returned gives the same first map.
  model->eval();
  std::shared_ptr<nn::MultiheadAttention> first;
  for (auto& [name, module] : model->named_modules())
    if (name == "layers.0.self_attn") first = std::dynamic_pointer_cast<nn::MultiheadAttention>(module);
  REQUIRE(first);
  first->store_attention = true;
  {
    NoGradGuard no_grad;
    model->forward(x);
  }
  first->store_attention = false;
  const auto expected = first->last_attention.select(0, 0).select(0, 1).to(kFloat64).contiguous().to_vector<double>();
  CHECK(grid.rows[0].heads[1] == expected);
}

TEST_CASE("attention_grid: a labeller names the rows and cuts the maps, the grid draws") {
  auto model = two_layers();
  const Tensor x = randn({1, 5, 8});
  auto label = [](const std::string& module, int64_t queries, int64_t keys) {
    CHECK(queries == 5);
    CHECK(keys == 5);
    return plot::AttentionRowLabels{"layer " + module.substr(7, 1), "self-attention", module, {"a", "b", "c"},
                                  {"a", "b", "c"}};
  };
  const plot::AttentionGrid grid = plot::attention_grid(*model, [&] { model->forward(x); }, "cut", label);
  REQUIRE(grid.rows.size() == 2);
  CHECK(grid.rows[1].heading == "layer 1");
  CHECK(grid.rows[1].detail == "layers.1.self_attn");
  CHECK(grid.rows[0].heads[0].size() == 9);
  const plot::Canvas canvas = plot::draw_attention_grid(grid);
  CHECK(plot::layout_problems(canvas).empty());
  CHECK(canvas.svg().find("layers.1.self_attn") != std::string::npos);
}

TEST_CASE("attention_grid: refuses a model without attention, a forward that runs none, bad labels") {
  auto linear = std::make_shared<nn::Linear>(2, 2);
  CHECK(error_message([&] { plot::attention_grid(*linear, [] {}, "t"); }).find("holds no MultiheadAttention") !=
        std::string::npos);
  auto model = two_layers();
  CHECK(error_message([&] { plot::attention_grid(*model, [] {}, "t"); }).find("ran none of the 2") != std::string::npos);
  auto too_many = [](const std::string&, int64_t, int64_t) {
    return plot::AttentionRowLabels{"h", "k", "", std::vector<std::string>(6, "x"), {"x"}};
  };
  const Tensor x = randn({1, 5, 8});
  CHECK(error_message([&] { plot::attention_grid(*model, [&] { model->forward(x); }, "t", too_many); })
            .find("labels 6 queries") != std::string::npos);
  // A forward that throws leaves the model as it was.
  model->train();
  CHECK_THROWS_AS(plot::attention_grid(*model, [] { throw Error("forward failed"); }, "t"), Error);
  CHECK(model->is_training());
}
