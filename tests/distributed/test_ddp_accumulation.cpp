// Gradient accumulation under no_sync() with parameters that some micro-batches do not use:
// whatever a rank's micro-batches touched since the last synchronised backward is averaged,
// so W ranks end where one process ends on the same global loss. Also accumulation across
// synchronised backwards (no zero_grad() between them, with or without no_sync()): a
// parameter a rank does not reach brings the average already in its .grad, not zeros. The one-process reference
// computes that loss in one backward: the sum over every rank's every micro-batch of its loss
// / (micro-batches * ranks), each micro-batch taking the path it took on its rank. Each
// micro-batch has its own rows (seeded by step, rank and micro-batch), so the test runs at any
// world size; CTest runs it at 1, 2 and 3 ranks.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <memory>

#include "cppgrad.h"
#include "ddp_net.h"
#include "distributed/distributed.h"

using namespace cppgrad;
using namespace cppgrad::distributed;
using ddptest::max_difference;
using ddptest::Net;

namespace {
constexpr int64_t kRows = 2;  // rows of one micro-batch
constexpr int kSteps = 4;

// A tiny language model whose head is its embedding (tied as examples/gpt ties them: one
// tensor, one parameter, used twice in a forward that takes both roles). Each forward takes
// one of three paths, so that the tied tensor is reached twice, once or not at all:
//   kTied:      tokens -> emb -> fc -> tanh -> emb.weightᵀ     (the tied tensor in both roles)
//   kEmbedOnly: tokens -> emb -> fc -> tanh -> out              (as an embedding only)
//   kNoEmbed:   features      -> fc -> tanh -> out              (not at all)
enum class Path { kTied, kEmbedOnly, kNoEmbed };
constexpr int64_t kVocab = 5, kDim = 4;

class TiedLM : public nn::Module {
 public:
  TiedLM() {
    emb = register_module("emb", std::make_shared<nn::Embedding>(kVocab, kDim));
    fc = register_module("fc", std::make_shared<nn::Linear>(kDim, kDim));
    head = register_module("head", std::make_shared<nn::Linear>(kDim, kVocab, /*bias=*/false));
    head->weight = emb->weight;  // tied
    out = register_module("out", std::make_shared<nn::Linear>(kDim, kVocab));
  }
  // tokens (B,) int64, features (B, kDim) -> (B, kVocab)
  Tensor forward(const Tensor& tokens, const Tensor& features, Path path) {
    Tensor h = path == Path::kNoEmbed ? features : emb->forward(tokens);  // (B,) -> (B, kDim)
    h = fc->forward(h).tanh();
    return path == Path::kTied ? head->forward(h) : out->forward(h);
  }
  std::shared_ptr<nn::Embedding> emb;
  std::shared_ptr<nn::Linear> fc, head, out;
};

// Which micro-batches of a step run their backward synchronised; the others run it under
// no_sync(). The last one is always synchronised (that is the step's all-reduce).
enum class Sync {
  kLastOnly,      // the usual accumulation: all but the last under no_sync()
  kEvery,         // no no_sync() at all: every backward averages, .grad accumulates averages
  kFirstAndLast,  // synchronised, then no_sync(), ..., then synchronised
};
bool synchronised(Sync sync, int m, int micro) {
  if (m + 1 == micro || sync == Sync::kEvery) return true;
  return sync == Sync::kFirstAndLast && m == 0;
}

// The loss of one micro-batch (not yet divided by the number of micro-batches).
template <class Model>
using MicroLoss = std::function<Tensor(Model&, int64_t step, int64_t rank, int micro)>;

// kSteps of SGD with momentum; each rank computes `micro` micro-batches, those that `sync`
// does not synchronise under no_sync(). Checks every rank's gradients and weights against the one process after
// every step: equal where the reference has a gradient, absent where it has none (a parameter
// no micro-batch of any rank used). Without find_unused_parameters every parameter must have
// been used since the last sync on every rank.
template <class Model>
void accumulation_against_one_process(const std::function<std::shared_ptr<Model>(uint64_t)>& make,
                                      const MicroLoss<Model>& micro_loss, int micro, bool find_unused,
                                      Sync sync) {
  const int64_t world = world_size();
  auto reference = make(21);
  auto model = make(21 + rank());  // DDP's broadcast gives it rank 0's weights
  DistributedDataParallel ddp(model,
                              DistributedDataParallelOptions().find_unused_parameters(find_unused).bucket_cap_mb(0.0002));
  CHECK(ddp.bucket_count() > 1);
  auto initial = make(21);
  optim::SGD opt_ref(reference->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  for (int64_t step = 0; step < kSteps; ++step) {
    CAPTURE(step);
    opt_ref.zero_grad();
    Tensor global = zeros({}, kFloat64);
    for (int64_t r = 0; r < world; ++r)
      for (int m = 0; m < micro; ++m) global = global + micro_loss(*reference, step, r, m);
    (global / static_cast<double>(micro * world)).backward();

    opt.zero_grad();
    for (int m = 0; m < micro; ++m) {
      auto micro_backward = [&] { (micro_loss(*model, step, rank(), m) / static_cast<double>(micro)).backward(); };
      if (!synchronised(sync, m, micro)) {
        auto guard = ddp.no_sync();
        micro_backward();
      } else {
        micro_backward();
      }
    }

    auto expected = reference->named_parameters(), got = model->named_parameters();
    REQUIRE(expected.size() == got.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      CAPTURE(expected[i].first);
      const Tensor& e = expected[i].second.grad();
      const Tensor& g = got[i].second.grad();
      if (!e.defined()) {
        CHECK_FALSE(g.defined());
        continue;
      }
      REQUIRE(g.defined());
      // float64 sums of the same terms grouped differently (per rank, then averaged): rounding
      // of about 1e-16 relative on gradients of order 1.
      CHECK((g - e).abs().max().item<double>() < 1e-12);
    }
    opt_ref.step();
    opt.step();
    // Momentum carries each step's error forward; a few steps keep it far below 1e-12.
    CHECK(max_difference(*model, *reference) < 1e-12);
  }
  CHECK(max_difference(*model, *initial) > 1e-3);  // training moved the weights
}

// ---- Net (ddp_net.h): `branch` used in some micro-batches, fc1 tied to fc2's place ----

// Whether micro-batch `micro` of `rank` in `step` adds the branch.
using UsesBranch = std::function<bool(int64_t step, int64_t rank, int micro)>;

void net_against_one_process(const UsesBranch& uses_branch, bool tied, int micro = 2, bool find_unused = true,
                             Sync sync = Sync::kLastOnly) {
  auto make = [&](uint64_t seed) {
    manual_seed(seed);
    auto net = std::make_shared<Net>(tied, /*with_branch=*/true, /*with_spare=*/find_unused);
    net->to(kFloat64);
    return net;
  };
  MicroLoss<Net> loss = [&](Net& net, int64_t step, int64_t r, int m) {
    Generator gen(500 + 100 * step + 10 * r + m);
    Tensor x = randn({kRows, 6}, kFloat64, gen), y = randn({kRows, 3}, kFloat64, gen);
    return nn::functional::mse_loss(net.forward(x, uses_branch(step, r, m)), y);
  };
  accumulation_against_one_process<Net>(make, loss, micro, find_unused, sync);
}

// ---- TiedLM: the tied embedding/head on different paths in different micro-batches ----

using ChoosePath = std::function<Path(int64_t step, int64_t rank, int micro)>;

void tied_lm_against_one_process(const ChoosePath& path, int micro = 2, bool find_unused = true,
                                 Sync sync = Sync::kLastOnly) {
  auto make = [](uint64_t seed) {
    manual_seed(seed);
    auto net = std::make_shared<TiedLM>();
    net->to(kFloat64);
    return net;
  };
  MicroLoss<TiedLM> loss = [&](TiedLM& net, int64_t step, int64_t r, int m) {
    Generator gen(700 + 100 * step + 10 * r + m);
    Tensor tokens = randint(0, kVocab, {kRows}, gen);
    Tensor features = randn({kRows, kDim}, kFloat64, gen), target = randn({kRows, kVocab}, kFloat64, gen);
    return nn::functional::mse_loss(net.forward(tokens, features, path(step, r, m)), target);
  };
  accumulation_against_one_process<TiedLM>(make, loss, micro, find_unused, sync);
}
}  // namespace

TEST_CASE("ddp accumulation: a parameter used only in the no_sync micro-batches keeps its gradient") {
  for (bool tied : {false, true}) {
    CAPTURE(tied);
    // Every rank uses the branch in its first micro-batch only: in the synchronised backward no
    // rank reaches it, yet its accumulated gradient must still be averaged.
    net_against_one_process([](int64_t, int64_t, int m) { return m == 0; }, tied);
    // Three micro-batches, the branch in the first two only, or in the first only.
    net_against_one_process([](int64_t, int64_t, int m) { return m < 2; }, tied, /*micro=*/3);
    net_against_one_process([](int64_t, int64_t, int m) { return m == 0; }, tied, /*micro=*/3);
  }
}

TEST_CASE("ddp accumulation: ranks that used a parameter in different micro-batches agree") {
  for (bool tied : {false, true}) {
    CAPTURE(tied);
    // Rank 0 uses the branch only in its no_sync micro-batch, rank 1 only in its last one, the
    // others never; and in odd steps nobody uses it, so its gradient must stay unset there.
    net_against_one_process(
        [](int64_t step, int64_t r, int m) { return step % 2 == 0 && ((r == 0 && m == 0) || (r == 1 && m == 1)); },
        tied);
    // Every micro-batch on every rank uses it: the ordinary path, for contrast.
    net_against_one_process([](int64_t, int64_t, int) { return true; }, tied);
  }
}

TEST_CASE("ddp accumulation: without find_unused_parameters, a parameter used since the last sync is not unused") {
  // Every rank uses the branch in its first micro-batch only; every parameter has a gradient
  // since the last sync, so this is no error, and the average is the one process's.
  for (bool tied : {false, true}) {
    CAPTURE(tied);
    net_against_one_process([](int64_t, int64_t, int m) { return m == 0; }, tied, 2, /*find_unused=*/false);
  }
}

TEST_CASE("ddp accumulation: a tied embedding/head used in one micro-batch and not in another") {
  auto lm = std::make_shared<TiedLM>();
  CHECK(lm->parameters().size() == 5);  // emb (= head), fc weight and bias, out weight and bias
  // Both roles in the no_sync micro-batch, neither in the synchronised one.
  tied_lm_against_one_process([](int64_t, int64_t, int m) { return m == 0 ? Path::kTied : Path::kNoEmbed; });
  // Both roles in the no_sync micro-batch, the embedding role alone in the synchronised one.
  tied_lm_against_one_process([](int64_t, int64_t, int m) { return m == 0 ? Path::kTied : Path::kEmbedOnly; });
  // Once in the no_sync micro-batch, twice in the synchronised one.
  tied_lm_against_one_process([](int64_t, int64_t, int m) { return m == 0 ? Path::kEmbedOnly : Path::kTied; });
  // Three micro-batches: twice, not at all, once.
  tied_lm_against_one_process(
      [](int64_t, int64_t, int m) { return m == 0 ? Path::kTied : m == 1 ? Path::kNoEmbed : Path::kEmbedOnly; },
      /*micro=*/3);
  // Rank-dependent, and in odd steps nobody reaches the tied tensor, so its gradient stays unset:
  // rank 0 both roles in its no_sync micro-batch only, rank 1 the embedding role in its last
  // one only, rank 2 both roles in both, the others never.
  tied_lm_against_one_process([](int64_t step, int64_t r, int m) {
    if (step % 2 == 1) return Path::kNoEmbed;
    if (r == 0) return m == 0 ? Path::kTied : Path::kNoEmbed;
    if (r == 1) return m == 1 ? Path::kEmbedOnly : Path::kNoEmbed;
    if (r == 2) return Path::kTied;
    return Path::kNoEmbed;
  });
}

TEST_CASE("ddp accumulation: without find_unused_parameters, a tied embedding/head used before the sync") {
  // Every rank reaches every parameter since the last sync, the tied tensor only before it.
  tied_lm_against_one_process([](int64_t, int64_t, int m) { return m == 0 ? Path::kTied : Path::kNoEmbed; }, 2,
                              /*find_unused=*/false);
  tied_lm_against_one_process([](int64_t, int64_t, int m) { return m == 0 ? Path::kNoEmbed : Path::kTied; }, 2,
                              /*find_unused=*/false);
}

TEST_CASE("ddp accumulation: across synchronised backwards, a parameter a rank skips keeps the average in .grad") {
  // No zero_grad() between the micro-batches, and every (or the first and the last) backward
  // synchronised: after the first, .grad holds an average that is the same on every rank, and
  // a rank that does not reach a parameter in a later backward must bring that average to the
  // all-reduce (as PyTorch brings a defined .grad), not zeros, or the average is halved.
  // (Few cases: each runs a few seconds under the sanitizers.)
  // Every backward synchronised, fc1 tied: rank 0 uses the branch in the first micro-batch, rank
  // 1 in the last; in odd steps nobody does.
  net_against_one_process(
      [](int64_t step, int64_t r, int m) { return step % 2 == 0 && ((r == 0 && m == 0) || (r == 1 && m == 2)); },
      /*tied=*/true, 3, true, Sync::kEvery);
  // The first and the last synchronised, no_sync() between: rank 0 uses the branch in the first
  // micro-batch only, rank 1 in the no_sync one only.
  net_against_one_process([](int64_t, int64_t r, int m) { return (r == 0 && m == 0) || (r == 1 && m == 1); },
                          /*tied=*/false, 3, true, Sync::kFirstAndLast);
  // The tied embedding/head, every backward synchronised: both roles first, then not at all,
  // then the embedding alone; rank 1 the other way round.
  tied_lm_against_one_process(
      [](int64_t, int64_t r, int m) {
        const Path order[3] = {Path::kTied, Path::kNoEmbed, Path::kEmbedOnly};
        return order[r == 1 ? 2 - m : m];
      },
      3, true, Sync::kEvery);
}
