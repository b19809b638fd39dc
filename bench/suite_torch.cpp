// suite_torch: the benchmark suite's rows in libtorch (Debian's libtorch-dev 1.13), the twin of
// suite.cpp: the same rows, shapes, harness and command line (rows.h, harness.h), so that
// scripts/bench can set the two side by side. Built only where CMake finds libtorch.
//
// libtorch 1.13's C++ Transformer and MultiheadAttention are sequence-first: (T, B, E). The
// data here is made in that layout from the start (token ids are transposed, which is cheap),
// so that libtorch runs the way its users would feed it and pays for no float transposes that
// cppgrad's batch-first layout does not need. The models are the same as suite's:
//   mm-*         torch::matmul on the same shapes and transposed views, under NoGradGuard;
//   mha-*        torch::nn::MultiheadAttention self-attention, need_weights = false, causal
//                through a float attn_mask (libtorch 1.13's C++ API has no is_causal);
//   copy-step    torch::nn::Transformer with examples/seq2seq's embedding, positions and
//                generator, padding masks, cross-entropy with ignore_index, Adam;
//   lm-step      torch::nn::TransformerEncoder under a causal mask with a final LayerNorm and an
//                output tied to the embedding.
// Gradients are set to none before each backward, as cppgrad's zero_grad does.
#include <dlfcn.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "harness.h"
#include "rows.h"

namespace {

namespace F = torch::nn::functional;
using torch::Tensor;

constexpr int64_t kPad = 0, kBos = 1, kEos = 2, kFirstSymbol = 3;  // examples/seq2seq's tokens
constexpr int kBatches = 8;  // made before timing and used in turn: data making is not timed

// Debian's libtorch calls the pthreads OpenBLAS, whose thread pool torch::set_num_threads does
// not govern: pin it to the same count, found at run time so that another BLAS also works.
void set_threads(int n) {
  torch::set_num_threads(n);
  using SetThreads = void (*)(int);
  if (auto f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
}

const char* blas_config() {
  using GetConfig = const char* (*)();
  auto f = reinterpret_cast<GetConfig>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  return f ? f() : "BLAS: not OpenBLAS";
}

int64_t count_parameters(const torch::nn::Module& model) {
  int64_t n = 0;
  for (const Tensor& p : model.parameters()) n += p.numel();
  return n;
}

void set_grads_to_none(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) t.mutable_grad().reset();
}

// The paper's sinusoidal positions, (len, E): PE(pos, 2i) = sin(pos / 10000^(2i/E)), PE(pos, 2i+1) = cos(...).
Tensor sinusoids(int64_t len, int64_t E) {
  Tensor pos = torch::arange(len, torch::kFloat32).unsqueeze(1);                            // (len, 1)
  Tensor inv_freq = torch::exp(torch::arange(0, E, 2, torch::kFloat32) * (-std::log(10000.0) / E));  // (E/2)
  Tensor pe = torch::zeros({len, E});
  pe.slice(1, 0, E, 2).copy_(torch::sin(pos * inv_freq));
  pe.slice(1, 1, E, 2).copy_(torch::cos(pos * inv_freq));
  return pe;
}

torch::optim::AdamOptions adam_options() { return torch::optim::AdamOptions(1e-4).betas({0.9, 0.98}).eps(1e-9); }

// ---- matmul ------------------------------------------------------------------------------------

class MatmulRow {
 public:
  explicit MatmulRow(const bench::MatmulCase& c) {
    const int64_t m = c.fold ? c.m / c.batch : c.m;
    auto stored = [](bool trans, int64_t rows, int64_t cols) {
      return trans ? std::vector<int64_t>{cols, rows} : std::vector<int64_t>{rows, cols};
    };
    std::vector<int64_t> sa = stored(c.trans_a, m, c.k), sb = stored(c.trans_b, c.k, c.n);
    if (c.batch > 0) sa.insert(sa.begin(), c.batch);
    if (c.batch > 0 && !c.fold) sb.insert(sb.begin(), c.batch);
    a_ = torch::randn(sa);
    b_ = torch::randn(sb);
    if (c.trans_a) a_ = a_.transpose(-2, -1);
    if (c.trans_b) b_ = b_.transpose(-2, -1);
  }
  void step() {
    torch::NoGradGuard no_grad;
    Tensor out = torch::matmul(a_, b_);
  }

 private:
  Tensor a_, b_;
};

// ---- MultiheadAttention ------------------------------------------------------------------------

class AttentionRow {
 public:
  AttentionRow(const bench::AttentionConfig& c, bool causal, bool backward)
      : backward_(backward), attention_(torch::nn::MultiheadAttentionOptions(c.d_model, c.heads)),
        x_(torch::randn({c.seq, c.batch, c.d_model})),     // (T, B, E)
        grad_(torch::randn({c.seq, c.batch, c.d_model})) {  // dLoss/dOutput, (T, B, E)
    if (causal) mask_ = torch::nn::TransformerImpl::generate_square_subsequent_mask(c.seq);  // (T, T), -inf above
    if (backward_) {
      x_.requires_grad_();
    } else {
      attention_->eval();
    }
  }

  void step() {
    if (!backward_) {
      torch::NoGradGuard no_grad;
      attention_->forward(x_, x_, x_, {}, /*need_weights=*/false, mask_);
      return;
    }
    set_grads_to_none(attention_->parameters());
    set_grads_to_none({x_});
    Tensor out = std::get<0>(attention_->forward(x_, x_, x_, {}, /*need_weights=*/false, mask_));
    out.backward(grad_);
  }

 private:
  bool backward_;
  torch::nn::MultiheadAttention attention_;
  Tensor x_, grad_, mask_;
};

// ---- the copy task -----------------------------------------------------------------------------

// examples/seq2seq's model: shared token embedding scaled by √E, sinusoidal positions and
// dropout, the encoder-decoder Transformer, a Linear generator.
struct CopyTaskModelImpl : torch::nn::Module {
  explicit CopyTaskModelImpl(const bench::CopyTaskConfig& c) : d_model(c.d_model) {
    transformer = register_module("transformer", torch::nn::Transformer(torch::nn::TransformerOptions(c.d_model, c.heads)
                                                                            .num_encoder_layers(c.layers)
                                                                            .num_decoder_layers(c.layers)
                                                                            .dim_feedforward(c.ff)
                                                                            .dropout(c.dropout)));
    embed = register_module("embed", torch::nn::Embedding(torch::nn::EmbeddingOptions(c.vocab, c.d_model).padding_idx(kPad)));
    {
      torch::NoGradGuard no_grad;
      embed->weight.normal_(0.0, 1.0 / std::sqrt(double(c.d_model)));
      embed->weight[kPad].zero_();
    }
    pe = register_buffer("pe", sinusoids(c.positions(), c.d_model).unsqueeze(1));  // (L, 1, E)
    dropout = register_module("dropout", torch::nn::Dropout(c.dropout));
    generator = register_module("generator", torch::nn::Linear(c.d_model, c.vocab));
  }

  // tokens (L, B) -> (L, B, E)
  Tensor embed_tokens(const Tensor& tokens) {
    return dropout(embed(tokens) * std::sqrt(double(d_model)) + pe.narrow(0, 0, tokens.size(0)));
  }

  // src (S, B), tgt_in (T, B); pads (B, S), (B, T) bool; causal (T, T) -> logits (T, B, vocab)
  Tensor forward(const Tensor& src, const Tensor& tgt_in, const Tensor& src_pad, const Tensor& tgt_pad,
                 const Tensor& causal) {
    Tensor y = transformer->forward(embed_tokens(src), embed_tokens(tgt_in), {}, causal, {}, src_pad, tgt_pad, src_pad);
    return generator(y);
  }

  int64_t d_model;
  torch::nn::Transformer transformer{nullptr};
  torch::nn::Embedding embed{nullptr};
  torch::nn::Dropout dropout{nullptr};
  torch::nn::Linear generator{nullptr};
  Tensor pe;
};
TORCH_MODULE(CopyTaskModel);

struct CopyBatch {
  Tensor src, tgt_in, tgt_out;  // (L+1, B) int64, sequence first
  Tensor src_pad, tgt_pad;      // (B, L+1) bool, true at padding
};

// The copy task's data as examples/seq2seq makes it: 1 to `length` random symbols, then padding.
CopyBatch make_copy_batch(const bench::CopyTaskConfig& c) {
  const int64_t width = c.positions();
  Tensor src = torch::full({c.batch, width}, kPad, torch::kInt64);
  Tensor tgt_in = src.clone(), tgt_out = src.clone();
  Tensor lengths = torch::randint(1, c.length + 1, {c.batch}, torch::kInt64);
  Tensor symbols = torch::randint(kFirstSymbol, c.vocab, {c.batch, c.length}, torch::kInt64);
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t len = lengths[b].item<int64_t>();
    Tensor s = symbols[b].narrow(0, 0, len);
    src[b].narrow(0, 0, len).copy_(s);
    src[b][len] = kEos;
    tgt_in[b][0] = kBos;
    tgt_in[b].narrow(0, 1, len).copy_(s);
    tgt_out[b].narrow(0, 0, len).copy_(s);
    tgt_out[b][len] = kEos;
  }
  return {src.t().contiguous(), tgt_in.t().contiguous(), tgt_out.t().contiguous(), src.eq(kPad), tgt_in.eq(kPad)};
}

class CopyTaskRow {
 public:
  explicit CopyTaskRow(const bench::CopyTaskConfig& c)
      : vocab_(c.vocab), model_(c), adam_(model_->parameters(), adam_options()),
        causal_(torch::nn::TransformerImpl::generate_square_subsequent_mask(c.positions())) {
    model_->train();
    for (int i = 0; i < kBatches; ++i) batches_.push_back(make_copy_batch(c));
  }

  void step() {
    const CopyBatch& b = batches_[next_++ % batches_.size()];
    Tensor logits = model_->forward(b.src, b.tgt_in, b.src_pad, b.tgt_pad, causal_);  // (T, B, vocab)
    Tensor loss = F::cross_entropy(logits.reshape({-1, vocab_}), b.tgt_out.reshape({-1}),
                                   F::CrossEntropyFuncOptions().ignore_index(kPad));
    set_grads_to_none(model_->parameters());
    loss.backward();
    adam_.step();
    last_loss = loss.item<double>();
  }

  int64_t parameter_count() const { return count_parameters(*model_); }
  double last_loss = NAN;

 private:
  int64_t vocab_;
  CopyTaskModel model_;
  torch::optim::Adam adam_;
  Tensor causal_;
  std::vector<CopyBatch> batches_;
  size_t next_ = 0;
};

// ---- the decoder-only language model -----------------------------------------------------------

struct DecoderLMImpl : torch::nn::Module {
  explicit DecoderLMImpl(const bench::LanguageModelConfig& c) : d_model(c.d_model) {
    embed = register_module("embed", torch::nn::Embedding(c.vocab, c.d_model));
    {
      torch::NoGradGuard no_grad;
      embed->weight.normal_(0.0, 1.0 / std::sqrt(double(c.d_model)));
    }
    pe = register_buffer("pe", sinusoids(c.seq, c.d_model).unsqueeze(1));  // (T, 1, E)
    dropout = register_module("dropout", torch::nn::Dropout(c.dropout));
    torch::nn::TransformerEncoderLayer layer(
        torch::nn::TransformerEncoderLayerOptions(c.d_model, c.heads).dim_feedforward(c.ff).dropout(c.dropout));
    layers = register_module(
        "layers", torch::nn::TransformerEncoder(torch::nn::TransformerEncoderOptions(layer, c.layers)
                                                    .norm(torch::nn::AnyModule(torch::nn::LayerNorm(
                                                        torch::nn::LayerNormOptions({c.d_model}))))));
  }

  // tokens (T, B), causal (T, T) -> logits (T, B, vocab)
  Tensor forward(const Tensor& tokens, const Tensor& causal) {
    Tensor x = dropout(embed(tokens) * std::sqrt(double(d_model)) + pe.narrow(0, 0, tokens.size(0)));  // (T, B, E)
    Tensor h = layers(x, causal);                                                                        // (T, B, E)
    return F::linear(h, embed->weight);  // (T, B, E) · (vocab, E)ᵀ
  }

  int64_t d_model;
  torch::nn::Embedding embed{nullptr};
  torch::nn::Dropout dropout{nullptr};
  torch::nn::TransformerEncoder layers{nullptr};
  Tensor pe;
};
TORCH_MODULE(DecoderLM);

class LanguageModelRow {
 public:
  explicit LanguageModelRow(const bench::LanguageModelConfig& c)
      : vocab_(c.vocab), model_(c), adam_(model_->parameters(), adam_options()),
        causal_(torch::nn::TransformerImpl::generate_square_subsequent_mask(c.seq)) {
    model_->train();
    for (int i = 0; i < kBatches; ++i) {
      Tensor tokens = torch::randint(0, c.vocab, {c.seq + 1, c.batch}, torch::kInt64);  // (T + 1, B)
      inputs_.push_back(tokens.narrow(0, 0, c.seq).contiguous());                      // (T, B)
      targets_.push_back(tokens.narrow(0, 1, c.seq).reshape({-1}));                    // (T·B)
    }
  }

  void step() {
    const size_t i = next_++ % inputs_.size();
    Tensor logits = model_->forward(inputs_[i], causal_);  // (T, B, vocab)
    Tensor loss = F::cross_entropy(logits.reshape({-1, vocab_}), targets_[i]);
    set_grads_to_none(model_->parameters());
    loss.backward();
    adam_.step();
    last_loss = loss.item<double>();
  }

  int64_t parameter_count() const { return count_parameters(*model_); }
  double last_loss = NAN;

 private:
  int64_t vocab_;
  DecoderLM model_;
  torch::optim::Adam adam_;
  Tensor causal_;
  std::vector<Tensor> inputs_, targets_;
  size_t next_ = 0;
};

// ---- running a row -----------------------------------------------------------------------------

// A comment line under a training row: the same model on both sides has the same parameter
// count, and the two losses are of the same size.
void describe_training(const bench::RowSpec& row, int64_t parameters, const bench::Timing& t, double loss) {
  std::printf("# %s: %lld parameters; loss %.3f after %d steps\n", row.id.c_str(), static_cast<long long>(parameters),
              loss, t.reps + bench::budget_for(row, {}).warm_up);
}

bench::Result run_row(const bench::RowSpec& row, int threads, const bench::Options& options) {
  set_threads(threads);
  torch::manual_seed(0);
  bench::Result r;
  r.row = row.id;
  r.threads = threads;
  r.tokens = row.tokens;
  r.gemm_flops = row.gemm_flops;
  const bench::Budget budget = bench::budget_for(row, options);
  const double resident_before = bench::memory_mb("VmRSS");
  double loss = 0;

  switch (row.kind) {
    case bench::Kind::Matmul: {
      MatmulRow work(row.matmul);
      r.time = bench::measure([&] { work.step(); }, budget);
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
  if (!std::isfinite(loss)) throw std::runtime_error(row.id + ": the training loss is not finite");
  r.peak_mb = bench::memory_mb("VmHWM");
  r.row_mb = r.peak_mb - resident_before;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Options options;
  int exit_code = 0;
  if (!bench::parse_options(argc, argv, /*has_profile=*/false, options, exit_code)) return exit_code;
  const std::vector<bench::RowSpec> rows = bench::all_rows();
  if (options.list) {
    for (const bench::RowSpec& row : rows) std::printf("%s\n", row.id.c_str());
    return 0;
  }
  bench::BusyLoad busy(options.load);  // --load N: N busy processes until main returns
  try {
    double load = 0;
    getloadavg(&load, 1);
    std::printf("# libtorch %s; %s; load average %.2f at start; %d busy process(es) beside\n", TORCH_VERSION,
                blas_config(), load, busy.processes());
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
      std::fprintf(stderr, "no row '%s' (suite_torch --list shows them)\n", options.only.c_str());
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "suite_torch: %s\n", e.what());
    return 1;
  }
  return 0;
}
