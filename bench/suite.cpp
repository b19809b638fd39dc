// suite: the benchmark suite of issue #8, cppgrad's side. suite_torch runs the same rows in
// libtorch; scripts/bench runs both and prints one table with the ratios.
//
//   suite                      # every row at 1 and 2 threads, in this one process
//   suite --only copy-step --threads 2 --tsv    # one row, one thread count (what scripts/bench does)
//   suite --list               # the row ids
//   suite --profile            # time per kernel kind of one copy-task step, at 1 and 2 threads
//   suite --profile --only mha-B-fwdbwd --threads 1   # ... of one run of another row
//
// Rows (rows.h has the shapes and the flop formulas):
//   mm-*          one float32 matrix product, Tensor::matmul, timed interleaved with a direct
//                 cblas_sgemm on the same memory (the "cblas ms" column);
//   mha-*         MultiheadAttention self-attention, configs A and B, forward (no grad, eval) or
//                 forward + backward, without mask or causal (is_causal = true);
//   copy-step     one training step of examples/seq2seq's copy-task model: forward,
//                 cross-entropy, backward, Adam step;
//   lm-step       the same for a decoder-only language model (DecoderLM below).
// Each row: warm-up, then repeated runs; median and min per run. Peak memory is the process's
// VmHWM, and "row MB" what the row added to the resident size it started from: run each row in
// its own process (--only) to get a per-row peak.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fmt/core.h>
#include <memory>

#include "copy_task_row.h"
#include "harness.h"
#include "matmul_cblas.h"
#include "rows.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;
using bench::CopyTaskRow;
using bench::kBatches;

namespace {

// ---- the rows' work: each class sets up its row, then step() is one timed run ----------------

// MultiheadAttention over x (B, T, E), self-attention, no dropout.
class AttentionRow {
 public:
  AttentionRow(const bench::AttentionConfig& c, bool causal, bool backward)
      : causal_(causal), backward_(backward),
        attention_(std::make_shared<nn::MultiheadAttention>(nn::MultiheadAttentionOptions(c.d_model, c.heads))),
        x_(randn({c.batch, c.seq, c.d_model})),   // (B, T, E)
        grad_(randn({c.batch, c.seq, c.d_model})) {  // dLoss/dOutput, (B, T, E)
    if (backward_) {
      x_.requires_grad_();  // as inside a model: the input's gradient is computed too
    } else {
      attention_->eval();
    }
  }

  void step() {
    if (!backward_) {
      NoGradGuard no_grad;
      attention_->forward(x_, x_, x_, {.need_weights = false, .is_causal = causal_});
      return;
    }
    attention_->zero_grad();
    x_.zero_grad();
    Tensor out = attention_->forward(x_, x_, x_, {.need_weights = false, .is_causal = causal_}).output;
    out.backward(grad_);
  }

 private:
  bool causal_, backward_;
  std::shared_ptr<nn::MultiheadAttention> attention_;
  Tensor x_, grad_;
};

// A decoder-only language model: token embedding scaled by √d_model plus sinusoidal positions,
// post-norm Transformer encoder layers made causal (an encoder layer under a causal mask is a
// decoder-only block), a final LayerNorm, and logits from the embedding matrix itself (tied).
class DecoderLM : public nn::Module {
 public:
  explicit DecoderLM(const bench::LanguageModelConfig& c) : d_model(c.d_model) {
    embed = register_module("embed", std::make_shared<nn::Embedding>(c.vocab, c.d_model));
    nn::init::normal_(embed->weight, 0.0, 1.0 / std::sqrt(static_cast<double>(c.d_model)));
    positions = register_module("positions", std::make_shared<nn::PositionalEncoding>(c.d_model, c.dropout, c.seq));
    layers = register_module("layers", std::make_shared<nn::TransformerEncoder>(
                                           nn::TransformerLayerOptions(c.d_model, c.heads)
                                               .dim_feedforward(c.ff)
                                               .dropout(c.dropout),
                                           c.layers, /*final_norm=*/true));
  }

  // tokens (B, T) int64 -> logits (B, T, vocab)
  Tensor forward(const Tensor& tokens) {
    Tensor x = positions->forward(embed->forward(tokens) * std::sqrt(static_cast<double>(d_model)));  // (B, T, E)
    Tensor h = layers->forward(x, {}, {}, /*is_causal=*/true);                                       // (B, T, E)
    return F::linear(h, embed->weight);  // (B, T, E) · (vocab, E)ᵀ -> (B, T, vocab)
  }
  std::string type_name() const override { return "DecoderLM"; }

  int64_t d_model;
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::PositionalEncoding> positions;
  std::shared_ptr<nn::TransformerEncoder> layers;
};

// One training step of DecoderLM on random tokens: predict token t + 1 from tokens ≤ t.
class LanguageModelRow : public bench::TrainingRow {
 public:
  explicit LanguageModelRow(const bench::LanguageModelConfig& c) : vocab_(c.vocab) {
    model_ = std::make_shared<DecoderLM>(c);
    model_->train();
    make_optimizer(model_->parameters());
    Generator data(1);
    for (int i = 0; i < kBatches; ++i) {
      Tensor tokens = randint(0, c.vocab, {c.batch, c.seq + 1}, data);     // (B, T + 1)
      inputs_.push_back(tokens.narrow(1, 0, c.seq).contiguous());          // (B, T)
      targets_.push_back(tokens.narrow(1, 1, c.seq).reshape({-1}));        // (B·T)
    }
  }

  void step() {
    const size_t i = next_++ % inputs_.size();
    Tensor logits = model_->forward(inputs_[i]);  // (B, T, vocab)
    update(F::cross_entropy(logits.reshape({-1, vocab_}), targets_[i]));
  }

  int64_t parameter_count() const { return model_->parameter_count(); }

 private:
  int64_t vocab_;
  std::shared_ptr<DecoderLM> model_;
  std::vector<Tensor> inputs_, targets_;
};

// ---- running a row ----------------------------------------------------------------------------

// A comment line under a training row: the same model on both sides has the same parameter
// count, and the two losses are of the same size.
void describe_training(const bench::RowSpec& row, int64_t parameters, const bench::Timing& t, double loss) {
  std::printf("# %s: %lld parameters; loss %.3f after %d steps\n", row.id.c_str(), static_cast<long long>(parameters),
              loss, t.reps + bench::budget_for(row, {}).warm_up);
}

bench::Result run_row(const bench::RowSpec& row, int threads, const bench::Options& options) {
  set_num_threads(threads);
  manual_seed(0);
  bench::Result r;
  r.row = row.id;
  r.threads = threads;
  r.tokens = row.tokens;
  r.gemm_flops = row.gemm_flops;
  const bench::Budget budget = bench::budget_for(row, options);
  const double resident_before = bench::memory_mb("VmRSS");
  double loss = 0;  // a training row's last loss: a NaN would mean the step computes nonsense

  switch (row.kind) {
    case bench::Kind::Matmul: {
      NoGradGuard no_grad;
      bench::MatmulOperands o = bench::make_operands(row.matmul);
      if (!bench::same_result(row.matmul, o)) throw Error(row.id + ": cppgrad and cblas_sgemm give different products");
      std::tie(r.time, r.reference) = bench::measure_interleaved([&] { bench::cppgrad_matmul(o); },
                                                                 [&] { bench::raw_sgemm(row.matmul, o); }, budget);
      break;
    }
    case bench::Kind::Attention: {
      AttentionRow work(row.attention, row.causal, row.backward);
      r.time = bench::measure([&] { work.step(); }, budget);
      break;
    }
    case bench::Kind::CopyTask: {
      CopyTaskRow work{bench::CopyTaskConfig{}};
      r.time = bench::measure([&] { work.step(); }, budget);
      loss = work.last_loss;
      describe_training(row, work.parameter_count(), r.time, loss);
      break;
    }
    case bench::Kind::LanguageModel: {
      LanguageModelRow work{bench::LanguageModelConfig{}};
      r.time = bench::measure([&] { work.step(); }, budget);
      loss = work.last_loss;
      describe_training(row, work.parameter_count(), r.time, loss);
      break;
    }
  }
  if (!std::isfinite(loss)) throw Error(fmt::format("{}: the training loss is {}", row.id, loss));
  r.peak_mb = bench::memory_mb("VmHWM");
  r.row_mb = r.peak_mb - resident_before;
  return r;
}

// The per-kernel profile of one run of a row (the copy-task step unless --only names another),
// after ten runs of warm-up.
void profile_row(const bench::RowSpec& row, int threads) {
  set_num_threads(threads);
  manual_seed(0);
  auto profile_one = [&](auto&& step) {
    for (int i = 0; i < 10; ++i) step();
    profile::set_enabled(true);
    profile::reset();
    step();
    profile::set_enabled(false);
    fmt::print("profile of one {} run ({} thread{}):\n{}\n", row.id, threads, threads == 1 ? "" : "s",
               profile::report());
  };
  switch (row.kind) {
    case bench::Kind::Matmul: {
      NoGradGuard no_grad;
      bench::MatmulOperands o = bench::make_operands(row.matmul);
      profile_one([&] { bench::cppgrad_matmul(o); });
      break;
    }
    case bench::Kind::Attention: {
      AttentionRow work(row.attention, row.causal, row.backward);
      profile_one([&] { work.step(); });
      break;
    }
    case bench::Kind::CopyTask: {
      CopyTaskRow work{bench::CopyTaskConfig{}};
      profile_one([&] { work.step(); });
      break;
    }
    case bench::Kind::LanguageModel: {
      LanguageModelRow work{bench::LanguageModelConfig{}};
      profile_one([&] { work.step(); });
      break;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  bench::Options options;
  int exit_code = 0;
  if (!bench::parse_options(argc, argv, /*has_profile=*/true, options, exit_code)) return exit_code;
  const std::vector<bench::RowSpec> rows = bench::all_rows();
  if (options.list) {
    for (const bench::RowSpec& row : rows) std::printf("%s\n", row.id.c_str());
    return 0;
  }
  bench::BusyLoad busy(options.load);  // --load N: N busy processes until main returns
  try {
    if (options.profile) {
      const std::string id = options.only.empty() ? "copy-step" : options.only;
      auto row = std::find_if(rows.begin(), rows.end(), [&](const bench::RowSpec& r) { return r.id == id; });
      if (row == rows.end()) {
        std::fprintf(stderr, "no row '%s' (suite --list shows them)\n", id.c_str());
        return 2;
      }
      for (int threads : options.threads) profile_row(*row, threads);
      return 0;
    }
    double load = 0;
    getloadavg(&load, 1);
    std::printf("# cppgrad; %s; load average %.2f at start; %d busy process(es) beside\n", openblas_get_config(), load,
                busy.processes());
    options.tsv ? bench::print_tsv_header() : bench::print_header();
    bool found = false;
    for (const bench::RowSpec& row : rows) {
      if (!options.only.empty() && row.id != options.only) continue;
      found = true;
      for (int threads : options.threads) {
        bench::Result r = run_row(row, threads, options);
        options.tsv ? bench::print_tsv(r) : bench::print_row(r);
      }
    }
    if (!found) {
      std::fprintf(stderr, "no row '%s' (suite --list shows them)\n", options.only.c_str());
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "suite: %s\n", e.what());
    return 1;
  }
  return 0;
}
