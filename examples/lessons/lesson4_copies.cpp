// Lesson 4's mechanism, with no rounding luck in it: what happens to heads that start as copies.
//
// In exact arithmetic two heads with the same weights get the same gradients (the loss treats
// them alike), so an optimiser moves them alike and they stay copies for ever. Whatever makes
// them differ must be an asymmetry put in from outside: the random initialisation, dropout's
// masks, or the rounding of arithmetic that treats the heads' columns differently. Training
// then decides what becomes of a small difference: near the symmetric point it grows (or
// shrinks) in proportion to its size, so it is the growth rate, not the seed, that the model
// decides.
//
// To see that without depending on any BLAS kernel, the heads here are separate tensors, each
// computed by its own calls of the same shapes (a head is its own projections, scores, softmax
// and output block, the layer's output their sum, which is exactly multi-head attention
// written per head; lesson 2). Identical inputs of identical shapes go through the same
// arithmetic, so identical heads get bit-identical results under every kernel and thread count,
// and the gaps measured are those the starts put in, grown by training (float64).
//
// The task: fit a fixed two-head "teacher" attention layer whose heads differ, with a two-head
// student, full batch, Adam. The student's heads can only fit it by becoming different.
#include <fmt/core.h>

#include <cmath>

#include "lessons/lessons.h"
#include "lessons/measure.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

namespace lessons {

namespace {

// One head's weights as stored: W_Q, W_K, W_V (d_k, d_model) and its block of W_O (d_model, d_k).
struct Head {
  Tensor w_q, w_k, w_v, w_o;
  std::vector<Tensor> all() const { return {w_q, w_k, w_v, w_o}; }
};

Head draw_head(int64_t d_model, int64_t d_k, double bound, Generator& gen) {
  auto draw = [&](Shape shape) { return (rand(shape, kFloat64, gen) * 2.0 - 1.0) * bound; };
  return {draw({d_k, d_model}), draw({d_k, d_model}), draw({d_k, d_model}), draw({d_model, d_k})};
}

Head copy_of(const Head& h) {
  return {h.w_q.clone(), h.w_k.clone(), h.w_v.clone(), h.w_o.clone()};
}

// Σ_i softmax(q_i·k_iᵀ/√d_k)·v_i·W_O_iᵀ: multi-head attention (no biases), a head at a time.
// Dropout, when p > 0, on each head's attention weights, each head drawing its own mask.
Tensor attend(const std::vector<Head>& heads, const Tensor& x, double dropout, Generator& gen) {
  Tensor out;
  for (const Head& h : heads) {
    Tensor q = x.matmul(h.w_q.t()), k = x.matmul(h.w_k.t()), v = x.matmul(h.w_v.t());  // (B, T, d_k)
    Tensor p = (q.matmul(k.mT()) * (1.0 / std::sqrt(static_cast<double>(h.w_q.size(0))))).softmax(-1);
    if (dropout > 0.0) p = F::dropout(p, dropout, true, gen);
    Tensor y = p.matmul(v).matmul(h.w_o.t());  // (B, T, d_model)
    out = out.defined() ? out + y : y;
  }
  return out;
}

// The largest difference between any head's parameters and head 0's (or their gradients).
double apart(const std::vector<Head>& heads, bool gradients) {
  double gap = 0.0;
  for (size_t i = 1; i < heads.size(); ++i)
    for (size_t j = 0; j < 4; ++j) {
      const Tensor a = heads[i].all()[j], b = heads[0].all()[j];
      gap = worst_of(gap, gradients ? max_abs_diff(a.grad(), b.grad()) : max_abs_diff(a, b));
    }
  return gap;
}

}  // namespace

Lesson4Copies run_lesson4_copies() {
  Lesson4Copies r;
  const int64_t E = r.d_model, d_k = E / r.heads;
  Generator gen(r.seed);
  // The teacher: heads drawn independently, three times the student's scale so that its maps are
  // sharp and its heads clearly different.
  const double default_bound = std::sqrt(6.0 / static_cast<double>(E + 3 * E));  // Xavier over (3E, E), as nn::MultiheadAttention
  std::vector<Head> teacher;
  for (int64_t i = 0; i < r.heads; ++i) teacher.push_back(draw_head(E, d_k, 3.0 * default_bound, gen));
  const Tensor x = randn({r.sequences, r.tokens, E}, kFloat64, gen);
  Tensor target;
  {
    NoGradGuard no_grad;
    target = attend(teacher, x, 0.0, gen);
  }
  const Head first = draw_head(E, d_k, default_bound, gen);
  const Head second = draw_head(E, d_k, default_bound, gen);  // the default initialisation's other head
  const Tensor direction = rand({4, d_k * E}, kFloat64, gen) * 2.0 - 1.0;  // the perturbation's, |.| <= 1

  for (int64_t s = 1; s <= r.steps; s *= 10) {
    r.steps_measured.push_back(s);
    if (3 * s <= r.steps) r.steps_measured.push_back(3 * s);
  }
  if (r.steps_measured.back() != r.steps) r.steps_measured.push_back(r.steps);
  r.steps_measured.insert(r.steps_measured.begin(), 0);

  auto run = [&](const std::string& what, double epsilon, double dropout, bool independent) {
    Lesson4Copies::Start start{what, epsilon, dropout, {}, 0.0, 0.0};
    std::vector<Head> heads{copy_of(first)};
    for (int64_t i = 1; i < r.heads; ++i) {
      Head h = copy_of(independent ? second : first);
      if (epsilon > 0.0) {
        NoGradGuard no_grad;
        h.w_q.add_(direction.select(0, 0).reshape({d_k, E}) * epsilon);
        h.w_k.add_(direction.select(0, 1).reshape({d_k, E}) * epsilon);
        h.w_v.add_(direction.select(0, 2).reshape({d_k, E}) * epsilon);
        h.w_o.add_(direction.select(0, 3).reshape({E, d_k}) * epsilon);
      }
      heads.push_back(h);
    }
    std::vector<Tensor> parameters;
    for (Head& h : heads)
      for (Tensor* p : {&h.w_q, &h.w_k, &h.w_v, &h.w_o}) {
        p->requires_grad_(true);
        parameters.push_back(*p);
      }
    optim::Adam adam(parameters, optim::AdamOptions(r.lr));
    Generator masks(r.seed + 1);
    size_t next = 0;
    for (int64_t step = 0; step <= r.steps; ++step) {
      if (step == r.steps_measured[next]) {
        start.apart.push_back(apart(heads, false));
        ++next;
      }
      if (step == r.steps) break;
      adam.zero_grad();
      Tensor loss = F::mse_loss(attend(heads, x, start.dropout, masks), target);
      loss.backward();
      start.gradients_apart = worst_of(start.gradients_apart, apart(heads, true));
      adam.step();
    }
    {
      NoGradGuard no_grad;
      start.loss_end = F::mse_loss(attend(heads, x, 0.0, masks), target).item();
    }
    r.starts.push_back(start);
  };
  r.target_size = 0.0;
  {
    NoGradGuard no_grad;
    r.target_size = F::mse_loss(target, zeros_like(target)).item();
  }
  run("exact copies", 0.0, 0.0, false);
  for (double epsilon : r.epsilons) run(fmt::format("copies, one moved by {:.0e}", epsilon), epsilon, 0.0, false);
  run(fmt::format("copies, attention dropout {}", r.dropout), 0.0, r.dropout, false);
  run("default initialisation", 0.0, 0.0, true);
  return r;
}

namespace {

// The last measured step (its index) at which the smallest ε's gap is still below 1e-3.
size_t last_small_step(const Lesson4Copies& r) {
  const auto& smallest = r.starts.at(1);
  size_t at = 1;
  while (at + 1 < r.steps_measured.size() && smallest.apart[at + 1] < 1e-3) ++at;
  return at;
}

}  // namespace

double growth_per_step(const Lesson4Copies& r) {
  const auto& smallest = r.starts.at(1);
  const size_t at = last_small_step(r);
  const auto steps = static_cast<double>(r.steps_measured[at] - r.steps_measured[at - 1]);
  return std::pow(smallest.apart[at] / smallest.apart[at - 1], 1.0 / steps);
}

void print(const Lesson4Copies& r) {
  fmt::print("1. The mechanism, without rounding luck. A {}-head attention layer (d_model {}, no biases), each head\n",
             r.heads, r.d_model);
  fmt::print("   its own tensors and calls of the same shapes, so identical heads get bit-identical arithmetic\n");
  fmt::print("   under any BLAS kernel and thread count, learns to imitate a teacher layer whose {} heads\n", r.heads);
  fmt::print("   differ ({} sequences of {} tokens, full batch, Adam at {}, float64; the teacher's output has\n",
             r.sequences, r.tokens, r.lr);
  fmt::print("   mean square {:.3g}). The largest difference between head 1's weights and head 0's, by step:\n",
             r.target_size);
  fmt::print("     {:<34}", "start");
  for (int64_t s : r.steps_measured) fmt::print("{:>9}", s);
  fmt::print("   loss at {}\n", r.steps);
  for (const auto& s : r.starts) {
    fmt::print("     {:<34}", s.what);
    for (double a : s.apart) fmt::print("{:>9.2g}", a);
    fmt::print("   {:.3g}\n", s.loss_end);
  }
  const auto& exact = r.starts.front();
  fmt::print("   Exact copies: the gradients of the two heads differed by at most {:.3g} over {} steps, so the\n",
             exact.gradients_apart, r.steps);
  fmt::print("   heads are still copies ({:.3g} apart) and the layer is one head repeated: its loss ends\n",
             exact.apart.back());
  double lowest = exact.loss_end, highest = 0.0;
  for (size_t i = 1; i < r.starts.size(); ++i) {
    lowest = std::min(lowest, r.starts[i].loss_end);
    highest = std::max(highest, r.starts[i].loss_end);
  }
  fmt::print("   at {:.3g}, where every start whose heads differ reaches {:.3g} to {:.3g}.\n", exact.loss_end, lowest,
             highest);
  // The growth rate, read where the smallest ε's gap is still small (below 1e-3): between the
  // two measured steps before that, per step.
  const size_t at = last_small_step(r);
  const int64_t from = r.steps_measured[at - 1], to = r.steps_measured[at];
  fmt::print("   A copy moved by ε grows apart at a rate that training sets, not ε. The gap divided by ε at\n");
  fmt::print("   step {}:", to);
  for (size_t i = 1; i <= r.epsilons.size(); ++i)
    fmt::print("{} {:.3g} (ε = {:.0e})", i == 1 ? "" : ",", r.starts[i].apart[at] / r.epsilons[i - 1], r.epsilons[i - 1]);
  fmt::print(":\n   the same factor for every ε while the gap is small; from step {} to {} it grew {:.3g} times a step.\n",
             from, to, growth_per_step(r));
  fmt::print("   A large ε grows less (its gap nears the size of the weights themselves).\n");
  const auto& dropped = r.starts[r.epsilons.size() + 1];
  fmt::print("   Attention dropout draws a different mask for each head: from exact copies it puts {:.2g}\n",
             dropped.apart[1]);
  fmt::print("   between them at the first step and {:.2g} by step {}. The default initialisation draws each\n",
             dropped.apart.back(), r.steps);
  fmt::print("   head independently: {:.2g} apart at step 0, the difference every head starts with.\n\n",
             r.starts.back().apart.front());
}

}  // namespace lessons
