// bench_attention_torch: one cell of bench_attention's table in libtorch (Debian's libtorch-dev
// 1.13), run by bench_attention for its libtorch column:
//
//   build/release/bench/bench_attention_torch --one torch T causal [--threads N] [--budget S]
//
// libtorch 1.13 has no fused attention kernel (torch.nn.functional.scaled_dot_product_attention
// came with 2.0), so this is the computation its users write: scores = q·kᵀ · scale, the causal
// mask as -inf above the diagonal, softmax, weights · v, and autograd's backward.
#include <dlfcn.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "attention_row.h"
#include "harness.h"

namespace {

// Debian's libtorch calls the pthreads OpenBLAS, whose thread pool torch::set_num_threads does
// not govern: pin it to the same count (as suite_torch does).
void set_threads(int n) {
  torch::set_num_threads(n);
  using SetThreads = void (*)(int);
  if (auto f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
}

}  // namespace

int main(int argc, char** argv) {
  bench::AttentionRow row;
  if (!bench::parse_attention_row(argc, argv, row) || row.side != "torch") {
    std::fprintf(stderr, "usage: bench_attention_torch --one torch T causal [--threads N] [--budget S]\n");
    return 2;
  }
  set_threads(row.threads);
  torch::manual_seed(0);
  const double rss_before = bench::memory_mb("VmRSS");
  const int64_t T = row.T, d = bench::kAttentionHeadDim;
  auto input = [&] { return torch::randn({bench::kAttentionBatch, bench::kAttentionHeads, T, d}); };
  torch::Tensor q = input().requires_grad_(), k = input().requires_grad_(), v = input().requires_grad_();
  torch::Tensor G = input();  // dLoss/dOutput
  torch::Tensor hidden;       // (T, T) bool, true above the diagonal
  if (row.causal) hidden = torch::ones({T, T}, torch::kBool).triu(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  auto step = [&] {
    for (torch::Tensor* t : {&q, &k, &v}) t->mutable_grad().reset();
    torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) * scale;
    if (row.causal) scores = scores.masked_fill(hidden, -std::numeric_limits<float>::infinity());
    torch::matmul(torch::softmax(scores, -1), v).backward(G);
  };
  const bench::Timing t = bench::measure(step, bench::attention_budget(row));
  bench::print_attention_line(row, t, rss_before, NAN);
  return 0;
}
