// The rows of the benchmark suite, shared by its cppgrad and libtorch programs (suite and
// suite_torch) so that both run the same shapes and count the same flops.
//
// Row ids: mm-* (one matrix product), mha-{A,B}-{fwd,fwdbwd}[-causal] (MultiheadAttention),
// copy-step and lm-step (one training step). `suite --list` prints them.
//
// GFLOP/s counts the matrix products' flops only (2·M·N·K per product); the formulas are
// written next to each config below. Elementwise work, softmax and normalisation are left out:
// they are a small share of the arithmetic, if not of the time.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness.h"

namespace bench {

// ---- matmul: one product C = op(A) · op(B) ------------------------------------------------

struct MatmulCase {
  std::string id, name;
  int64_t batch;  // 0: plain 2-D product; otherwise a batch of independent products
  int64_t m, n, k;
  bool trans_a, trans_b;
  bool fold = false;  // a is 3-D (batch x M/batch x K) times a 2-D b: one GEMM with M rows

  int64_t gemms() const { return batch == 0 || fold ? 1 : batch; }
  double flops() const { return 2.0 * double(m) * double(n) * double(k) * double(gemms()); }
  std::string dims() const {
    std::string s = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
    return gemms() > 1 ? std::to_string(batch) + " * " + s : s;
  }
};

inline std::vector<MatmulCase> matmul_cases() {
  std::vector<MatmulCase> list;
  for (int64_t s : {64, 128, 256, 512, 1024})
    list.push_back({"mm-square" + std::to_string(s), "square " + std::to_string(s), 0, s, s, s, false, false});
  // A small Transformer: 1024 tokens, embed 128, feed-forward 512, attention heads of dim 32.
  list.push_back({"mm-qkv", "qkv proj (1024x128)(128x384)", 0, 1024, 384, 128, false, false});
  list.push_back({"mm-ffn-down", "ffn down (1024x512)(512x128)", 0, 1024, 128, 512, false, false});
  list.push_back({"mm-heads", "heads 64x (64x32)(32x64)", 64, 64, 64, 32, false, false});
  // Transposed views: the forward of Linear (x W^T) and the gradient of its weight (dY^T x).
  list.push_back({"mm-ABt512", "A B^T 512", 0, 512, 512, 512, false, true});
  list.push_back({"mm-AtB512", "A^T B 512", 0, 512, 512, 512, true, false});
  list.push_back({"mm-linear", "linear x W^T (1024x128)(384x128)^T", 0, 1024, 384, 128, false, true});
  list.push_back({"mm-gradW", "grad W dY^T x (1024x384)^T(1024x128)", 0, 384, 128, 1024, true, false});
  list.push_back({"mm-linear3d", "linear 3-D (8x128x128)(384x128)^T", 8, 1024, 384, 128, false, true, true});
  return list;
}

// ---- the flops of a Transformer's matrix products ------------------------------------------
//
// Attention of B batches of T queries over S keys, embed E, H heads of d_k = E/H:
//   Q projection           2·(B·T)·E·E
//   K and V projections    2 · 2·(B·S)·E·E
//   scores Q·Kᵀ            B·H · 2·T·S·d_k = 2·B·T·S·E
//   weights · V            2·B·T·S·E
//   output projection      2·(B·T)·E·E
// Self-attention (S = T): 8·B·T·E² + 4·B·T²·E. A causal mask hides half of the scores, but both
// libraries still multiply the whole T×S matrices, so it is counted in full.
inline double attention_flops(double B, double T, double S, double E) {
  return 4 * B * T * E * E + 4 * B * S * E * E + 4 * B * T * S * E;
}
// Feed-forward Linear(E, F) · act · Linear(F, E) over N tokens: 2 · 2·N·E·F.
inline double feed_forward_flops(double N, double E, double F) { return 4 * N * E * F; }
// Backward: every product C = A·B is followed by dA = dC·Bᵀ and dB = Aᵀ·dC, each as large as the
// product itself. In every row below all inputs of the products need gradients, so forward +
// backward counts 3 × the forward's flops.
constexpr double kForwardBackward = 3.0;

// ---- MultiheadAttention ---------------------------------------------------------------------

// Self-attention on x (batch, seq, d_model), float32, dropout 0, need_weights = false.
struct AttentionConfig {
  std::string name;
  int64_t batch, seq, d_model, heads;
};
inline const AttentionConfig kConfigA{"A", 16, 64, 128, 4};
inline const AttentionConfig kConfigB{"B", 8, 128, 256, 8};

// ---- the training steps ---------------------------------------------------------------------

// The copy task of examples/seq2seq: an encoder-decoder Transformer reads `length` symbols and
// an end token, the decoder reads a start token and the symbols (length + 1 positions each).
struct CopyTaskConfig {
  int64_t batch = 32, length = 16, d_model = 128, heads = 4, layers = 2, ff = 512, vocab = 16;
  double dropout = 0.1;
  int64_t positions() const { return length + 1; }
};

// Per step, S = T = positions, N = B·T:
//   encoder, per layer:  self-attention(B, S, S) + feed-forward(B·S)
//   decoder, per layer:  self-attention(B, T, T) + cross-attention(B, T, S) + feed-forward(B·T)
//   generator            2·N·E·vocab
// all × 3 for forward + backward. Tokens: the B·T target positions.
inline double copy_task_step_flops(const CopyTaskConfig& c) {
  const double B = c.batch, T = c.positions(), S = c.positions(), E = c.d_model, F = c.ff, V = c.vocab;
  const double encoder = c.layers * (attention_flops(B, S, S, E) + feed_forward_flops(B * S, E, F));
  const double decoder =
      c.layers * (attention_flops(B, T, T, E) + attention_flops(B, T, S, E) + feed_forward_flops(B * T, E, F));
  return kForwardBackward * (encoder + decoder + 2 * B * T * E * V);
}

// A decoder-only language model: embedding (tied with the output layer) plus sinusoidal
// positions, `layers` post-norm Transformer encoder layers under a causal mask (ReLU), a final
// LayerNorm, and logits h · Eᵀ over the vocabulary.
struct LanguageModelConfig {
  int64_t batch = 16, seq = 64, d_model = 128, heads = 4, layers = 2, ff = 512, vocab = 65;
  double dropout = 0.1;
};

// Per step, N = B·T: layers × (self-attention(B, T, T) + feed-forward(N)) + logits 2·N·E·vocab,
// × 3 for forward + backward. Tokens: B·T.
inline double language_model_step_flops(const LanguageModelConfig& c) {
  const double B = c.batch, T = c.seq, E = c.d_model, F = c.ff, V = c.vocab;
  return kForwardBackward *
         (c.layers * (attention_flops(B, T, T, E) + feed_forward_flops(B * T, E, F)) + 2 * B * T * E * V);
}

// ---- the row list ---------------------------------------------------------------------------

enum class Kind { Matmul, Attention, CopyTask, LanguageModel };

struct RowSpec {
  std::string id;
  Kind kind;
  MatmulCase matmul{};           // Kind::Matmul
  AttentionConfig attention{};   // Kind::Attention
  bool causal = false, backward = false;
  double tokens = 0, gemm_flops = 0;  // per run of the step
  double budget_s = 1.0;              // timed seconds per thread count, about
};

inline std::vector<RowSpec> all_rows() {
  std::vector<RowSpec> rows;
  for (const MatmulCase& c : matmul_cases()) {
    RowSpec r{c.id, Kind::Matmul};
    r.matmul = c;
    r.gemm_flops = c.flops();
    r.budget_s = 0.3;
    rows.push_back(r);
  }
  for (const AttentionConfig& a : {kConfigA, kConfigB}) {
    for (bool backward : {false, true}) {
      for (bool causal : {false, true}) {
        RowSpec r{"mha-" + a.name + (backward ? "-fwdbwd" : "-fwd") + (causal ? "-causal" : ""), Kind::Attention};
        r.attention = a;
        r.causal = causal;
        r.backward = backward;
        r.tokens = double(a.batch * a.seq);
        const double forward = attention_flops(a.batch, a.seq, a.seq, a.d_model);
        r.gemm_flops = backward ? kForwardBackward * forward : forward;
        r.budget_s = 1.0;
        rows.push_back(r);
      }
    }
  }
  const CopyTaskConfig copy;
  RowSpec c{"copy-step", Kind::CopyTask};
  c.tokens = double(copy.batch * copy.positions());
  c.gemm_flops = copy_task_step_flops(copy);
  c.budget_s = 2.0;
  rows.push_back(c);
  const LanguageModelConfig lm;
  RowSpec l{"lm-step", Kind::LanguageModel};
  l.tokens = double(lm.batch * lm.seq);
  l.gemm_flops = language_model_step_flops(lm);
  l.budget_s = 2.0;
  rows.push_back(l);
  return rows;
}

// ---- the command line, the same for both programs -------------------------------------------

struct Options {
  std::string only;               // run this row id only (empty: every row)
  std::vector<int> threads{1, 2};
  bool quick = false;             // a few repetitions per row, for a smoke test
  double budget = 1.0;            // multiplies every row's time budget
  bool list = false;              // print the row ids and exit
  bool tsv = false;               // tab-separated output for scripts/bench
  bool profile = false;           // cppgrad only: the per-kernel profile of one run of a row (copy-step by default)
  int load = 0;                   // busy processes running beside the rows (BusyLoad), for a loaded machine
};

// Returns false (after printing why, or the usage) when the program should exit with `exit_code`.
inline bool parse_options(int argc, char** argv, bool has_profile, Options& o, int& exit_code) {
  auto usage = [&](FILE* out) {
    std::fprintf(out,
                 "usage: %s [--only ROW] [--threads N] [--quick] [--budget X] [--load N] [--tsv] [--list]%s\n"
                 "  runs the benchmark rows (all, or ROW) at 1 and 2 threads (or N), each for about its\n"
                 "  time budget times X, with N busy processes beside them (--load); see bench/README.md\n",
                 argv[0], has_profile ? " [--profile]" : "");
  };
  auto fail = [&](const std::string& why) {
    std::fprintf(stderr, "%s\n", why.c_str());
    usage(stderr);
    exit_code = 2;
    return false;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool takes_value = arg == "--only" || arg == "--threads" || arg == "--budget" || arg == "--load";
    if (takes_value && i + 1 == argc) return fail(arg + " needs a value");
    if (arg == "--only") {
      o.only = argv[++i];
    } else if (arg == "--threads") {
      const int n = std::atoi(argv[++i]);
      if (n < 1) return fail("--threads: expected a positive count");
      o.threads = {n};
    } else if (arg == "--budget") {
      o.budget = std::atof(argv[++i]);
      if (!(o.budget > 0)) return fail("--budget: expected a positive factor");
    } else if (arg == "--load") {
      const std::string value = argv[++i];
      o.load = std::atoi(value.c_str());
      if (o.load < 0 || o.load > 64 || value.find_first_not_of("0123456789") != std::string::npos)
        return fail("--load: expected a count of busy processes from 0 to 64, got '" + value + "'");
    } else if (arg == "--quick") {
      o.quick = true;
    } else if (arg == "--list") {
      o.list = true;
    } else if (arg == "--tsv") {
      o.tsv = true;
    } else if (arg == "--profile" && has_profile) {
      o.profile = true;
    } else if (arg == "--help" || arg == "-h") {
      usage(stdout);
      exit_code = 0;
      return false;
    } else {
      return fail("unknown option '" + arg + "'");
    }
  }
  return true;
}

inline Budget budget_for(const RowSpec& row, const Options& o) {
  Budget b;
  b.budget_s = (o.quick ? 0.05 : row.budget_s) * o.budget;
  b.min_reps = o.quick ? 3 : 7;
  b.warm_up = row.kind == Kind::Matmul ? 3 : 5;
  return b;
}

}  // namespace bench
