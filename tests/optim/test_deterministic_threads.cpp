// The same bits at any thread count (runtime/parallel.h, deterministic_threads()): a small
// decoder trained with AdamW for a few steps, from one seed, at 1 thread, at 2, and at 2 with the
// load back-off forced on and off mid-run (between forward and backward, and between steps),
// gives bit-identical parameters, in float32 and float64. The products are large enough to be
// split into blocks (tensor/kernels/gemm.h) and, with the parallel grain lowered, every loop
// takes its threaded path. Bit equality is the claim here, not a shortcut: every run goes
// through the same BLAS calls on the same blocks.
#include <cstring>
#include <functional>

#include "optim_helpers.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

namespace {

// Two thread counts and their switches, as the run goes.
enum class Threads { One, Two, TwoSwitching };

std::vector<std::vector<char>> train(DType dtype, Threads threads) {
  const int64_t saved_grain = parallel_grain();
  set_parallel_grain(4096);
  set_num_threads(threads == Threads::One ? 1 : 2);
  manual_seed(2601);
  // d_model 128, feed-forward 352, 2 layers, batch 4 × 64 tokens: the projections are 256 × 128 ×
  // 352 and the like, cut into 4 blocks of 64 rows.
  nn::Decoder lm(nn::DecoderOptions(64, 128, 2, 4).dropout(0.1).tie_embeddings(true));
  lm.to(dtype);
  lm.train();
  optim::AdamW opt(lm.parameters(), optim::AdamWOptions(1e-3).weight_decay(0.1));
  Generator data(2602);
  for (int step = 0; step < 3; ++step) {
    const bool switching = threads == Threads::TwoSwitching;
    if (switching) force_backed_off(step % 2 == 1);  // steps 1: one thread; 0 and 2: two
    Tensor tokens = randint(0, 64, {4, 65}, data);
    Tensor logits = lm.forward(tokens.narrow(1, 0, 64));
    Tensor loss = F::cross_entropy(logits.reshape({-1, 64}), tokens.narrow(1, 1, 64).reshape({-1}));
    if (switching) force_backed_off(step % 2 == 0);  // the backward on the other count
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  force_backed_off(false);
  set_parallel_grain(saved_grain);
  std::vector<std::vector<char>> bytes;
  for (const Tensor& p : lm.parameters()) {
    const Tensor c = p.detach().contiguous();
    const char* data_bytes = static_cast<const char*>(c.raw_data());
    bytes.emplace_back(data_bytes, data_bytes + c.numel() * int64_t(dtype_size(c.dtype())));
  }
  return bytes;
}

}  // namespace

TEST_CASE("deterministic threads: a decoder trained at 1 thread, 2, and 2 with the back-off switching, bit for bit") {
  REQUIRE(deterministic_threads());  // the default
  const int saved = get_num_threads();
  for (DType dtype : {kFloat32, kFloat64}) {
    CAPTURE(dtype_name(dtype));
    const auto one = train(dtype, Threads::One);
    const auto two = train(dtype, Threads::Two);
    const auto switching = train(dtype, Threads::TwoSwitching);
    REQUIRE(one.size() == two.size());
    CHECK(one == two);
    CHECK(one == switching);
  }
  set_num_threads(saved);
}

TEST_CASE("deterministic threads: a product's blocks depend on its shape alone") {
  // The same product at 1 and 2 threads, large enough to be cut, in both operand layouts the
  // blocks read (rows of A; columns of B when the result is wider than tall).
  const int saved = get_num_threads();
  Generator gen(2603);
  const Tensor a = randn({300, 200}, kFloat32, gen), b = randn({200, 500}, kFloat32, gen);
  for (bool transposed : {false, true}) {
    const Tensor x = transposed ? a.t().contiguous().t() : a, y = transposed ? b.t().contiguous().t() : b;
    set_num_threads(1);
    const Tensor tall = matmul(x, y.narrow(1, 0, 100)), wide = matmul(x.narrow(0, 0, 100), y);
    set_num_threads(2);
    const Tensor tall2 = matmul(x, y.narrow(1, 0, 100)), wide2 = matmul(x.narrow(0, 0, 100), y);
    CHECK(std::memcmp(tall.raw_data(), tall2.raw_data(), tall.numel() * 4) == 0);
    CHECK(std::memcmp(wide.raw_data(), wide2.raw_data(), wide.numel() * 4) == 0);
  }
  set_num_threads(saved);
}

TEST_CASE("deterministic threads: a bias gradient's and layer norm's column sums, a block of columns a task") {
  // Rows of 300 columns: one block of columns at 1 thread, two at 2, each summed on one thread,
  // its rows in order; the sums must not depend on how the columns were split.
  const int saved = get_num_threads();
  const int64_t saved_grain = parallel_grain();
  set_parallel_grain(4096);
  Generator gen(2604);
  const Tensor x0 = randn({700, 300}, kFloat32, gen), g = randn({700, 300}, kFloat32, gen);
  const Tensor w0 = randn({300}, kFloat32, gen), b0 = randn({300}, kFloat32, gen);
  auto run = [&](int threads) {
    set_num_threads(threads);
    Tensor x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_(), b = b0.detach().requires_grad_();
    Tensor bias_grad = g.sum({0});
    (F::layer_norm(x, {300}, w, b) * g).sum().backward();
    return std::vector<Tensor>{bias_grad, x.grad(), w.grad(), b.grad()};
  };
  const std::vector<Tensor> one = run(1), two = run(2);
  for (size_t i = 0; i < one.size(); ++i) {
    CAPTURE(i);
    CHECK(std::memcmp(one[i].raw_data(), two[i].raw_data(), one[i].numel() * 4) == 0);
  }
  set_parallel_grain(saved_grain);
  set_num_threads(saved);
}

TEST_CASE("deterministic threads: the switch, and the back-off forced on, read back") {
  const int saved = get_num_threads();
  set_num_threads(2);
  force_backed_off(true);
  CHECK(get_num_threads() == 2);  // the set count, while regions run on one
  force_backed_off(false);
  set_deterministic_threads(false);
  CHECK(!deterministic_threads());
  set_deterministic_threads(true);
  CHECK(deterministic_threads());
  set_num_threads(saved);
}
