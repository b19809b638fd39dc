#include "tools/attention_maps.h"

#include <algorithm>

#include "nn/attention.h"

namespace cppgrad::plot {

namespace {

AttentionRowLabels numbered(const std::string& module, int64_t queries, int64_t keys) {
  AttentionRowLabels labels{module, "attention", "", {}, {}};
  for (int64_t q = 0; q < queries; ++q) labels.queries.push_back(std::to_string(q));
  for (int64_t k = 0; k < keys; ++k) labels.keys.push_back(std::to_string(k));
  return labels;
}

}  // namespace

AttentionGrid attention_grid(nn::Module& model, const std::function<void()>& forward, const std::string& title,
                                   const AttentionLabeller& label) {
  std::vector<std::pair<std::string, std::shared_ptr<nn::MultiheadAttention>>> layers;
  for (auto& [name, module] : model.named_modules())
    if (auto attention = std::dynamic_pointer_cast<nn::MultiheadAttention>(module)) {
      attention->last_attention = Tensor();
      attention->store_attention = true;
      layers.emplace_back(name, attention);
    }
  CPPGRAD_CHECK(!layers.empty(), "attention_grid: {} holds no MultiheadAttention", model.type_name());
  {
    struct Restore {  // the layers as they were, also when forward throws
      std::vector<std::pair<std::string, std::shared_ptr<nn::MultiheadAttention>>>& layers;
      ~Restore() {
        for (auto& [name, attention] : layers) attention->store_attention = false;
      }
    } restore{layers};
    nn::EvalModeGuard eval_mode(model);  // each submodule's own mode back after
    NoGradGuard no_grad;
    forward();
  }

  plot::AttentionGrid grid{title, {}, 0, {}};
  for (auto& [name, attention] : layers) {
    if (!attention->last_attention.defined()) continue;  // not run by this forward
    const Tensor weights = attention->last_attention.select(0, 0);  // (B, H, T, S) -> (H, T, S)
    attention->last_attention = Tensor();
    const AttentionRowLabels labels =
        (label ? label : numbered)(name, weights.size(1), weights.size(2));
    const auto queries = static_cast<int64_t>(labels.queries.size()), keys = static_cast<int64_t>(labels.keys.size());
    CPPGRAD_CHECK(queries <= weights.size(1) && keys <= weights.size(2),
                  "attention_grid: {} labels {} queries and {} keys of a map of {} x {}", name, queries, keys,
                  weights.size(1), weights.size(2));
    plot::AttentionRow row{labels.heading, labels.kind, labels.detail, labels.queries, labels.keys, {}};
    for (int64_t h = 0; h < weights.size(0); ++h)
      row.heads.push_back(
          weights.select(0, h).narrow(0, 0, queries).narrow(1, 0, keys).to(kFloat64).contiguous().to_vector<double>());
    grid.heads = std::max(grid.heads, static_cast<int>(weights.size(0)));
    grid.rows.push_back(std::move(row));
  }
  CPPGRAD_CHECK(!grid.rows.empty(), "attention_grid: the forward ran none of the {} MultiheadAttention layers of {}",
                layers.size(), model.type_name());
  return grid;
}

}  // namespace cppgrad::plot
