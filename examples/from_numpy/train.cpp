// Train on arrays saved from Python (np.save("x.npy", x); np.save("y.npy", y)): from_numpy [DIR]
#include <cstdio>

#include <fmt/core.h>

#include "cppgrad.h"
#include "data/npz/npy.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

// One NaN or infinity in the data trains the whole model on nonsense (NaN weights, a loss of nan):
// refused at load, naming the file and the row, as a PyTorch script would with torch.isfinite.
void require_finite(const Tensor& rows, const std::string& file) {
  const int64_t at = first_non_finite(rows);
  if (at < 0) return;
  const int64_t row_size = rows.numel() / rows.size(0);
  throw Error(fmt::format("{}: row {} (column {}) is not a finite number: data with a NaN or an infinity "
                          "would train the model on nonsense",
                          file, at / row_size, at % row_size));
}

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : ".";
  Tensor x = data::load_npy(dir + "/x.npy");  // (512, 2) float32
  fmt::print("x.npy: {} {}\n", shape_str(x.shape()), dtype_name(x.dtype()));
  Tensor y = data::load_npy(dir + "/y.npy");  // (512, 1) float32
  fmt::print("y.npy: {} {}\n", shape_str(y.shape()), dtype_name(y.dtype()));
  require_finite(x, dir + "/x.npy");
  require_finite(y, dir + "/y.npy");
  auto dataset = std::make_shared<data::TensorDataset>(data::NamedTensors{{"x", x}, {"y", y}});
  data::DataLoader loader(dataset, data::DataLoaderOptions(32).shuffle(true).seed(0));

  manual_seed(0);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(x.size(1), 64), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(64, y.size(1))});
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));

  for (int epoch = 1; epoch <= 40; ++epoch) {
    double total = 0;
    for (const data::Batch& batch : loader) {  // one epoch: 16 shuffled batches of 32
      Tensor loss = F::mse_loss(model->forward(batch["x"]), batch["y"]);
      opt.zero_grad();
      loss.backward();
      opt.step();
      total += loss.item() * static_cast<double>(batch["x"].size(0));
    }
    if (epoch % 10 == 0) fmt::print("epoch {:>2}  loss {:.5f}\n", epoch, total / static_cast<double>(x.size(0)));
  }
  nn::save(*model, "from_numpy.safetensors");  // reload with nn::load(*model, path)
  return 0;
} catch (const std::exception& e) {  // reported here: escaping main, it would abort unflushed output
  std::fflush(stdout);
  fmt::print(stderr, "from_numpy: {}\n", e.what());
  return 1;
}
