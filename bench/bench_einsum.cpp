// Does einsum cost anything over the matmul it lowers to? The attention subscripts,
// scores = einsum("bhqd,bhkd->bhqk", q, k) and out = einsum("bhqk,bhkd->bhqd", p, v), against
// q.matmul(k.mT()) and p.matmul(v), forward and forward+backward, timed in turn run by run (so
// a neighbour's load slows both alike), with their ratio. Prints the CPU's flags, the thread
// count, OPENBLAS_CORETYPE and the load average: run it under both OpenBLAS kernels,
//
//   build/release/bench/bench_einsum [--threads N]
//   OPENBLAS_CORETYPE=Haswell build/release/bench/bench_einsum [--threads N]
#include <fmt/core.h>

#include <cstdlib>
#include <cstring>

#include "cppgrad.h"
#include "harness.h"

using namespace cppgrad;

int main(int argc, char** argv) {
  int threads = 0;
  for (int i = 1; i + 1 < argc; i += 2)
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
  if (threads > 0) set_num_threads(threads);
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  fmt::print("{}\n", bench::cpu_description());
  fmt::print("einsum against matmul, float32, {} threads; OPENBLAS_CORETYPE={}; load average {:.2f} at start\n",
             get_num_threads(), coretype ? coretype : "(unset)", bench::load_average());
  fmt::print("{:<18} {:>16} | {:>11} {:>11} {:>9}\n", "subscripts", "B, H, T, d", "einsum ms", "matmul ms",
             "ein/mat");
  struct Shape4 {
    int64_t b, h, t, d;
  };
  for (const Shape4 s : {Shape4{8, 8, 128, 64}, Shape4{4, 8, 512, 64}}) {
    Generator gen(0);
    Tensor q = randn({s.b, s.h, s.t, s.d}, kFloat32, gen).requires_grad_();
    Tensor k = randn({s.b, s.h, s.t, s.d}, kFloat32, gen).requires_grad_();
    Tensor v = randn({s.b, s.h, s.t, s.d}, kFloat32, gen).requires_grad_();
    Tensor p = randn({s.b, s.h, s.t, s.t}, kFloat32, gen).softmax(-1).detach().requires_grad_();
    struct Row {
      const char* name;
      std::function<Tensor()> einsum_form, matmul_form;
    };
    const Row rows[] = {
        {"bhqd,bhkd->bhqk", [&] { return einsum("bhqd,bhkd->bhqk", {q, k}); }, [&] { return q.matmul(k.mT()); }},
        {"bhqk,bhkd->bhqd", [&] { return einsum("bhqk,bhkd->bhqd", {p, v}); }, [&] { return p.matmul(v); }},
    };
    for (const Row& row : rows) {
      for (bool backward : {false, true}) {
        auto run = [&](const std::function<Tensor()>& f) {
          return [&f, backward, &q, &k, &v, &p] {
            if (!backward) {
              NoGradGuard no_grad;
              f();
              return;
            }
            for (Tensor* t : {&q, &k, &v, &p}) t->zero_grad();
            f().sum().backward();
          };
        };
        const auto [te, tm] = bench::measure_interleaved(run(row.einsum_form), run(row.matmul_form), {.budget_s = 2.0});
        fmt::print("{:<18} {:>16} | {:>11.3f} {:>11.3f} {:>9.3f}   {}\n", row.name,
                   fmt::format("{}, {}, {}, {}", s.b, s.h, s.t, s.d), te.median_s * 1e3, tm.median_s * 1e3,
                   te.median_s / tm.median_s, backward ? "forward+backward" : "forward");
      }
    }
  }
  return 0;
}
