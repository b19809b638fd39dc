// The small network the data-parallel tests train, and how they compare two of them.
#pragma once

#include <algorithm>
#include <memory>

#include <doctest/doctest.h>

#include "cppgrad.h"

namespace ddptest {
using namespace cppgrad;

// fc1 -> fc2 (or, `tied`, fc1's square weight again) -> head; `branch` is a second head that
// forward() adds only when told to, and `spare` is a layer nothing uses (a parameter that never
// gets a gradient, which DDP must handle).
class Net : public nn::Module {
 public:
  Net(bool tied, bool with_branch, bool with_spare) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 6));
    if (tied) {
      shared_weight = register_parameter("fc2_weight", fc1->weight);  // the same tensor, twice
    } else {
      fc2 = register_module("fc2", std::make_shared<nn::Linear>(6, 6));
    }
    head = register_module("head", std::make_shared<nn::Linear>(6, 3));
    if (with_branch) branch = register_module("branch", std::make_shared<nn::Linear>(6, 3));
    if (with_spare) spare = register_module("spare", std::make_shared<nn::Linear>(6, 3));
  }
  Tensor forward(const Tensor& x, bool use_branch = false) {
    Tensor h = fc1->forward(x).tanh();
    h = fc2 ? fc2->forward(h).tanh() : nn::functional::linear(h, shared_weight).tanh();
    Tensor y = head->forward(h);
    if (use_branch) y = y + branch->forward(h);
    return y;
  }
  std::shared_ptr<nn::Linear> fc1, fc2, head, branch, spare;
  Tensor shared_weight;
};

// The largest difference between two models' parameters, name by name.
inline double max_difference(const nn::Module& a, const nn::Module& b) {
  double worst = 0;
  auto pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    REQUIRE(pa[i].first == pb[i].first);
    Tensor d = (pa[i].second - pb[i].second).abs().max().to(kFloat64);
    worst = std::max(worst, d.item<double>());
  }
  return worst;
}

}  // namespace ddptest
