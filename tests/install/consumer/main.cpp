// Uses the installed cppgrad through its umbrella header: a matmul (BLAS), a backward pass
// (autograd), a printed tensor (fmt), an .npz round trip (libzip) and a BPE tokenizer (PCRE2):
// every library the installed one needs at link time. Exits 0 when each gives the right answer.
// The umbrella header holds the core only: the program tools are consumer_tools' part.
#include <cppgrad/cppgrad.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

int main() {
  using namespace cppgrad;
  Tensor x = tensor({{1, 2}, {3, 4}}, TensorOptions().requires_grad());
  Tensor w = tensor({0.5, -1}).reshape({2, 1});
  // y = sum((x w)^2), x w = [-1.5, -2.5], so y = 8.5 and dy/dx = 2 (x w) w^T.
  Tensor y = x.matmul(w).square().sum();
  y.backward();

  const std::vector<float> expected = {-1.5f, 3.0f, -2.5f, 5.0f};
  const std::vector<float> got = x.grad().to_vector<float>();
  bool ok = std::abs(y.item<float>() - 8.5f) < 1e-5f && got.size() == expected.size();
  for (size_t i = 0; ok && i < got.size(); ++i) ok = std::abs(got[i] - expected[i]) < 1e-5f;

  // .npz files (libzip): written and read back.
  const std::string npz = (std::filesystem::temp_directory_path() / "cppgrad_consumer.npz").string();
  data::save_npz(npz, {{"w", w}});
  ok = ok && data::load_npz(npz).at(0).second.to_vector<float>() == std::vector<float>{0.5f, -1.0f};
  std::filesystem::remove(npz);

  // The BPE tokenizer (PCRE2 splits the text before merging): a text round-trips.
  const data::BPETokenizer tokenizer = data::BPETokenizer::train("low lower lowest low low", 260);
  ok = ok && tokenizer.decode(tokenizer.encode("lowest low")) == "lowest low";

  std::printf("y = %g\ndy/dx = %s\n%s\n", y.item<float>(), x.grad().str().c_str(), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
