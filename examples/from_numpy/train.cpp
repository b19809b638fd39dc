// Train on arrays saved from Python (np.save("x.npy", x); np.save("y.npy", y)): from_numpy [DIR]
#include <cstdio>

#include <fmt/core.h>

#include "cppgrad.h"
#include "data/npz/npy.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

// Rows of features: 2-D, at least one row, every number finite. One NaN or infinity trains the
// whole model on nonsense (NaN weights, a loss of nan), and so do no rows at all: refused at load,
// naming the file, as a PyTorch script would check its arrays (torch.isfinite).
void require_rows(const Tensor& rows, const std::string& file) {
  if (rows.dim() != 2 || rows.size(0) == 0)
    throw Error(fmt::format("{}: shape {}, where (samples, features) with at least one sample is expected", file,
                            shape_str(rows.shape())));
  const int64_t at = first_non_finite(rows);
  if (at < 0) return;
  throw Error(fmt::format("{}: row {} (column {}) is not a finite number: data with a NaN or an infinity "
                          "would train the model on nonsense",
                          file, at / rows.size(1), at % rows.size(1)));
}

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : ".";
  if (argc > 2 || dir.empty()) throw Error("usage: from_numpy [DIR], the folder of x.npy and y.npy (. by default)");
  Tensor x = data::load_npy(dir + "/x.npy");  // (512, 2) float32
  fmt::print("x.npy: {} {}\n", shape_str(x.shape()), dtype_name(x.dtype()));
  Tensor y = data::load_npy(dir + "/y.npy");  // (512, 1) float32
  fmt::print("y.npy: {} {}\n", shape_str(y.shape()), dtype_name(y.dtype()));
  require_rows(x, dir + "/x.npy");
  require_rows(y, dir + "/y.npy");
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
