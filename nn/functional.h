// The functional forms of the layers and the losses: plain functions of tensors, built from
// differentiable ops, so their gradients come from autograd.
#pragma once

#include <optional>

#include "../autograd/node.h"
#include "options.h"

namespace cppgrad::nn::functional {

// y = x · Wᵀ + b      x: (..., in), W: (out, in), b: (out) -> (..., out)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
// Rows of `weight` (num_embeddings, dim) picked by int64 `indices` of any shape -> (..., dim).
// The row at padding_idx gets no gradient.
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt);
// Normalises over the last normalized_shape.size() dims: (x - mean) / √(var + eps) · weight + bias.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
// Zeroes each element with probability p and scales the rest by 1/(1-p); identity when not training.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen = default_generator());
// dropout's p, checked in this one place (nn::Dropout checks its own when built): in [0, 1].
void check_dropout_probability(const char* op, double p);
// dropout(x.relu(), p, training), in training one op (cppgrad::relu_dropout): the same numbers
// from the same generator state, one pass over x each way instead of two, saving x alone.
Tensor relu_dropout(const Tensor& x, double p, bool training, Generator& gen = default_generator());
Tensor relu(const Tensor& x);
// approximate: "none" (x·Φ(x)) or "tanh" (PyTorch's tanh approximation), as F.gelu.
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);

enum class Reduction { Mean, Sum, None };

// Chainable, as every options type: CrossEntropyOptions().ignore_index(PAD).label_smoothing(0.1)
struct CrossEntropyOptions {
  CPPGRAD_ARG(int64_t, ignore_index, -100)
  CPPGRAD_ARG(double, label_smoothing, 0.0)
  CPPGRAD_ARG(Reduction, reduction, Reduction::Mean)
};
// Cross-entropy between logits and class indices, computed from log_softmax (no log(0)).
// logits (N, C) with target (N), or (N, C, d1, ...) with target (N, d1, ...), or (C) with ().
// Targets equal to ignore_index contribute nothing; the mean is over the others. When every
// target is ignored, the mean is NaN (a mean of no terms, as PyTorch gives) and its gradient is
// zero; sum gives 0.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});
// −log_probs[target] with cross_entropy's shapes, ignore_index and reductions: cross_entropy of
// logits is nll_loss of their log_softmax.
struct NllLossOptions {
  CPPGRAD_ARG(int64_t, ignore_index, -100)
  CPPGRAD_ARG(Reduction, reduction, Reduction::Mean)
};
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options = {});

// Elementwise losses of an input and a target of one shape, as torch.nn.functional's.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean, double beta = 1.0);
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean, double delta = 1.0);

// Binary cross-entropy of logits against targets in [0, 1] (σ and the log in one stable form).
// weight scales each term; pos_weight the positive part of each, by class (last dim): both
// broadcast to the logits' shape.
struct BceWithLogitsOptions {
  CPPGRAD_ARG(Tensor, weight, {})
  CPPGRAD_ARG(Tensor, pos_weight, {})
  CPPGRAD_ARG(Reduction, reduction, Reduction::Mean)
};
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        const BceWithLogitsOptions& options = {});

struct AttentionOutput {
  Tensor output;   // (..., T, Dv)
  Tensor weights;  // (..., T, S), when asked for
};
// softmax(Q·Kᵀ · scale + mask) · V, with scale = 1/√d_k by default.
// q (..., T, d_k), k (..., S, d_k), v (..., S, d_v); attn_mask broadcasts to (..., T, S):
// a bool mask's true means masked out, a float mask is added to the scores. is_causal masks
// key j > query i. A query whose every key is masked gets zero output and finite gradients.
//
// MIND THE BOOL MASK: here `true` = MASKED OUT, as in nn.MultiheadAttention's masks, which is
// the OPPOSITE of PyTorch 2.x's torch.nn.functional.scaled_dot_product_attention, where `true`
// = takes part. A mask written for PyTorch's function must be inverted (mask.logical_not());
// passed as it is, it hides every real key (lesson 5 shows what comes out).
AttentionOutput scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& attn_mask = {}, double dropout_p = 0.0,
                                             bool is_causal = false, std::optional<double> scale = std::nullopt,
                                             bool need_weights = false, Generator& gen = default_generator());

// Everything scaled_dot_product_attention takes besides q, k, v, by name, and what the modern
// decoders add (grouped-query heads, sliding windows, ALiBi, decoding offsets):
//   F::scaled_dot_product_attention(q, k, v, F::AttentionOptions().is_causal(true).enable_gqa(true));
struct AttentionOptions {
  CPPGRAD_ARG(Tensor, attn_mask, Tensor())  // bool (true = masked out) or float (added), broadcast to (..., h, T, S)
  CPPGRAD_ARG(double, dropout_p, 0.0)
  CPPGRAD_ARG(bool, is_causal, false)
  CPPGRAD_ARG(std::optional<double>, scale, std::nullopt)  // 1/√d_k when unset
  CPPGRAD_ARG(bool, need_weights, false)
  // Grouped-query attention: k and v (..., g, S, d) may have fewer heads than q (..., h, T, d),
  // g dividing h; query head i reads key/value head i / (h / g), PyTorch's enable_gqa (its
  // repeat_interleave semantics). g = 1 is multi-query attention, g = h plain multi-head.
  CPPGRAD_ARG(bool, enable_gqa, false)
  // Sliding window (local attention, as Mistral's): query i sees key j only when
  // |i + query_offset − j| < window; with is_causal, the window keys up to and including itself.
  CPPGRAD_ARG(std::optional<int64_t>, window, std::nullopt)
  // ALiBi (Press et al. 2022): −slope_h · |i + query_offset − j| added to head h's scores; (h)
  // slopes, one per query head (alibi_slopes(h) gives the paper's).
  CPPGRAD_ARG(Tensor, alibi_slopes, Tensor())
  // Query i stands at position i + query_offset of the keys' sequence: cached decoding passes
  // the number of keys cached before the new queries. is_causal then hides keys j > i + offset
  // (PyTorch's is_causal is this with offset 0: the top-left diagonal).
  CPPGRAD_ARG(int64_t, query_offset, 0)
};
AttentionOutput scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const AttentionOptions& options, Generator& gen = default_generator());
// ALiBi's head slopes for h heads: the geometric sequence 2^(−8/h), 2^(−16/h), ..., 2^(−8); for
// an h that is not a power of 2, the paper's rule (those of the power of 2 below h, then every
// other one of the next power's). float64 (h).
Tensor alibi_slopes(int64_t num_heads);
// What the options other than attn_mask add to the scores as one float (1 or h, T, S) mask of
// 0 and −inf (causal with an offset, window) plus the ALiBi biases, or undefined when nothing:
// the materialising path's form of what the fused kernel computes tile by tile.
Tensor attention_bias(const AttentionOptions& options, int64_t heads, int64_t target_len, int64_t source_len,
                      DType dtype);

// How scaled_dot_product_attention computes when the weights are not asked for:
// - Materialize: scores (..., T, S), softmax, weights · V, as the formula reads; the weights are
//   kept for the backward pass: memory grows as T·S per head.
// - Fused: block by block with a running max and sum (FlashAttention's recipe,
//   cppgrad::fused_attention), never holding the (T, S) weights; the backward recomputes them.
//   Grouped key/value heads are read in place (never repeated), and a window, ALiBi and
//   query_offset are applied tile by tile (tiles outside a window are skipped).
// - Auto (the default): Fused when T·S reaches fused_attention_min_size(), from where it is as
//   fast and smaller, faster from T ≈ 1024 (measured by bench/bench_attention); else Materialize.
// The weights (need_weights), a float mask that requires grad, leading dims of q and k that
// only broadcast, and reference mode (runtime/reference_mode.h) always take the materialising
// path. Process-wide, like set_num_threads.
enum class AttentionBackend { Auto, Fused, Materialize };
void set_attention_backend(AttentionBackend backend);
AttentionBackend attention_backend();
int64_t fused_attention_min_size();  // T·S from which Auto fuses

// A float (size, size) mask with -inf above the diagonal and 0 elsewhere: position i may
// attend to positions ≤ i only.
Tensor generate_square_subsequent_mask(int64_t size, DType dtype = kFloat32);

}  // namespace cppgrad::nn::functional
