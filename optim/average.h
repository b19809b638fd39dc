// optim::ExponentialMovingAverage: a running average of a model's parameters, updated after each
// optimizer step,
//   average = decay · average + (1 - decay) · parameter
// and swapped into the model to evaluate it. The last steps of a training run move the weights
// back and forth around a minimum; their average usually sits closer to it (Polyak averaging;
// the paper averaged its last checkpoints instead). PyTorch's equivalent is AveragedModel with
// an EMA averaging function.
//
//   optim::ExponentialMovingAverage average(model->parameters(), 0.99);
//   ... opt.step(); average.update();
//   average.swap();   // the model now holds the averages; evaluate it
//   average.swap();   // and the trained weights again
#pragma once

#include <vector>

#include "../nn/safetensors.h"
#include "../tensor/tensor.h"

namespace cppgrad::optim {

class ExponentialMovingAverage {
 public:
  // The averages start as copies of the parameters. decay in [0, 1): 0 keeps the last values.
  ExponentialMovingAverage(std::vector<Tensor> params, double decay);

  void update();  // average = decay · average + (1 - decay) · parameter, for every parameter
  void swap();    // exchanges each parameter's values with its average (twice: back as before)

  double decay() const { return decay_; }
  const std::vector<Tensor>& averages() const { return averages_; }

  // "<i>" per parameter, in order; load expects as many tensors, of the same shapes.
  nn::NamedTensors state_dict() const;
  void load_state_dict(const nn::NamedTensors& state);

 private:
  std::vector<Tensor> params_, averages_;
  double decay_;
};

}  // namespace cppgrad::optim
