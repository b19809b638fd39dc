#include "nn/functional.h"

#include <atomic>
#include <cmath>
#include <limits>

#include "autograd/fast/log_softmax_nll.h"
#include "autograd/functions.h"
#include "autograd/trace.h"
#include "runtime/reference_mode.h"
#include "tensor/kernels.h"

namespace cppgrad::nn::functional {

// ---- layers, activations and losses as functions ---------------------------------------------

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return cppgrad::linear(x, weight, bias);  // (..., in) -> (..., out), bias added inside the GEMM; checked by its kernel
}

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx) {
  CPPGRAD_CHECK(indices.dtype() == kInt64, "embedding: indices must be int64, got {}", dtype_name(indices.dtype()));
  CPPGRAD_CHECK(weight.dim() == 2, "embedding: weight must be 2-D (num_embeddings, dim), got {}", shape_str(weight.shape()));
  autograd::TraceScope trace;  // ONNX's Gather: padding_idx only matters to training (its row gets no gradient)
  auto traced = [&] { return autograd::TracedOp{"embedding", {indices, weight}, {}}; };
  // Every index names a row: a negative one (a padding id of -1 or -100) is refused, not
  // counted from the end, as torch.nn.functional.embedding does.
  Tensor flat = indices.reshape({-1}).contiguous();
  const int64_t rows_in_table = weight.size(0);
  const int64_t* ids = flat.data<int64_t>();
  for (int64_t i = 0; i < flat.numel(); ++i)
    CPPGRAD_CHECK(ids[i] >= 0 && ids[i] < rows_in_table,
                  "embedding: index {} out of range for a table of {} rows (weight {}){}", ids[i], rows_in_table,
                  shape_str(weight.shape()), ids[i] < 0 ? "; negative indices are not wrapped" : "");
  Shape shape = indices.shape();
  shape.push_back(weight.size(1));
  Tensor rows = weight.index_select(0, flat).reshape(shape);  // (..., dim)
  if (!padding_idx) return trace.note(rows, traced);
  // Same values; but the padding row's gradient is cut.
  Tensor is_pad = indices.eq(scalar_tensor(static_cast<double>(*padding_idx), kInt64)).unsqueeze(-1);
  return trace.note(where(is_pad, rows.detach(), rows), traced);
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  const auto k = static_cast<int64_t>(normalized_shape.size());
  CPPGRAD_CHECK(k >= 1 && x.dim() >= k && Shape(x.shape().end() - k, x.shape().end()) == normalized_shape,
        "layer_norm: input {} does not end with normalized_shape {}", shape_str(x.shape()),
        shape_str(normalized_shape));
  return cppgrad::layer_norm(x, k, weight, bias, eps);  // one fused op, forward and backward
}

void check_dropout_probability(const char* op, double p) {
  CPPGRAD_CHECK(p >= 0.0 && p <= 1.0, "{}: probability must be in [0, 1], got {}", op, p);
}

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  check_dropout_probability("dropout", p);
  if (!training || p == 0.0) return x;
  if (p == 1.0) return x * 0.0;
  return cppgrad::dropout(x, p, gen);  // x ⊙ mask, mask 0 or 1/(1-p), in one pass
}

Tensor relu_dropout(const Tensor& x, double p, bool training, Generator& gen) {
  if (!training || p == 0.0 || p == 1.0) return dropout(x.relu(), p, training, gen);
  return cppgrad::relu_dropout(x, p, gen);
}

Tensor relu(const Tensor& x) { return x.relu(); }
Tensor gelu(const Tensor& x, std::string_view approximate) { return x.gelu(approximate); }
Tensor tanh(const Tensor& x) { return x.tanh(); }
Tensor sigmoid(const Tensor& x) { return x.sigmoid(); }

namespace {
// The arguments of a loss over class indices (cross_entropy's, nll_loss's): floating scores
// (N, C, d1, ...) or (C), int64 targets of their shape without the class dim, every target a
// class or the ignored index.
void check_class_targets(const char* op, const Tensor& scores, const Tensor& target, int64_t ignore_index) {
  CPPGRAD_CHECK(scores.is_floating_point(), "{}: input must be floating, got {}", op, dtype_name(scores.dtype()));
  CPPGRAD_CHECK(target.dtype() == kInt64, "{}: target must hold int64 class indices, got {}", op,
        dtype_name(target.dtype()));
  CPPGRAD_CHECK(scores.dim() >= 1, "{}: input needs a class dim, got a 0-d tensor", op);
  Shape expected = scores.shape();
  expected.erase(expected.begin() + (scores.dim() == 1 ? 0 : 1));
  CPPGRAD_CHECK(target.shape() == expected, "{}: input {} needs a target of shape {}, got {}", op,
        shape_str(scores.shape()), shape_str(expected), shape_str(target.shape()));
  const int64_t classes = scores.dim() == 1 ? scores.size(0) : scores.size(1);
  for (int64_t t : target.reshape({-1}).to_vector<int64_t>())
    CPPGRAD_CHECK(t == ignore_index || (t >= 0 && t < classes), "{}: target {} is out of range for {} classes", op, t,
          classes);
}

// −log softmax(logits)[target] of (M, C) logits in one kernel each way (autograd/fast/
// log_softmax_nll.h); undefined where log_softmax and gather run instead: reference mode, and
// while an ONNX export traces the forward.
Tensor fused_log_softmax_nll(const Tensor& logits, const Tensor& target) {
  if (reference_mode() || autograd::trace_running()) return {};
  return cppgrad::fast::log_softmax_nll(logits, target);
}
}  // namespace

// ---- cross_entropy: -log softmax(logits)[target], averaged ------------------------------------

namespace {
// (N, C, d1, ...) scores as (M, C) rows, the class dim last and the others flattened, in the
// order of the target's elements; (C) as one row.
Tensor class_rows(const Tensor& scores) {
  Tensor rows = scores.dim() == 1 ? scores.unsqueeze(0) : scores;
  if (scores.dim() > 2) {
    std::vector<int64_t> class_last{0};  // (N, C, d1, ...) -> (N, d1, ..., C)
    for (int64_t d = 2; d < scores.dim(); ++d) class_last.push_back(d);
    class_last.push_back(1);
    rows = scores.permute(class_last);
  }
  return rows.reshape({-1, rows.size(-1)});
}

// A target's terms (M), where `valid` is false for the ignored targets, reduced as asked: with
// every target ignored the mean is over no terms, NaN as in PyTorch (1.13 and later), but added
// as a constant, so the gradient is zero rather than 0 · (1/0) = NaN.
Tensor reduce_over_targets(const Tensor& terms, const Tensor& valid, Reduction reduction, const Shape& target_shape) {
  Tensor loss = terms.masked_fill(valid.logical_not(), 0.0);
  switch (reduction) {
    case Reduction::None: return loss.reshape(target_shape);
    case Reduction::Sum: return loss.sum();
    case Reduction::Mean: {
      const auto count = kernels::sum(valid, {}, false).item<int64_t>();
      if (count == 0) return loss.sum() + std::numeric_limits<double>::quiet_NaN();
      return loss.sum() / static_cast<double>(count);
    }
  }
  return loss;
}
}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options) {
  check_class_targets("cross_entropy", logits, target, options.ignore_index());
  CPPGRAD_CHECK(options.label_smoothing() >= 0.0 && options.label_smoothing() <= 1.0,
        "cross_entropy: label_smoothing must be in [0, 1], got {}", options.label_smoothing());
  Tensor rows = class_rows(logits);  // (M, C) logits against (M) targets
  Tensor flat_target = target.reshape({-1});
  Tensor valid = flat_target.ne(scalar_tensor(static_cast<double>(options.ignore_index()), kInt64));
  Tensor safe_target = where(valid, flat_target, zeros({}, kInt64));  // ignored targets read class 0
  // −log softmax(logits)[target] (M); log_softmax's (M, C) rows are made where smoothing reads them
  Tensor nll = options.label_smoothing() > 0.0 ? Tensor() : fused_log_softmax_nll(rows, safe_target);
  Tensor log_probs = nll.defined() ? Tensor() : rows.log_softmax(1);
  if (!nll.defined()) nll = -log_probs.gather(1, safe_target.unsqueeze(1)).squeeze(1);
  Tensor loss = nll;
  if (options.label_smoothing() > 0.0) {
    // The target distribution is (1-ε)·one_hot + ε/C: its cross-entropy adds ε·mean_c(-log p_c).
    const double eps = options.label_smoothing();
    loss = (1.0 - eps) * nll + eps * (-log_probs.mean({1}));
  }
  return reduce_over_targets(loss, valid, options.reduction(), target.shape());
}

// ---- the other losses ---------------------------------------------------------------------------

// −log_probs[target]: cross_entropy's second half, for scores that are log-probabilities already.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options) {
  check_class_targets("nll_loss", log_probs, target, options.ignore_index());
  Tensor flat_target = target.reshape({-1});
  Tensor valid = flat_target.ne(scalar_tensor(static_cast<double>(options.ignore_index()), kInt64));
  Tensor safe_target = where(valid, flat_target, zeros({}, kInt64));
  Tensor terms = -class_rows(log_probs).gather(1, safe_target.unsqueeze(1)).squeeze(1);
  return reduce_over_targets(terms, valid, options.reduction(), target.shape());
}

namespace {
// An elementwise loss's input and target: floating, of one shape.
void check_pair(const char* op, const Tensor& input, const Tensor& target) {
  CPPGRAD_CHECK(input.shape() == target.shape(), "{}: input {} and target {} differ in shape", op,
        shape_str(input.shape()), shape_str(target.shape()));
  CPPGRAD_CHECK(input.is_floating_point() && target.is_floating_point(),
                "{}: input and target must be floating point, got {} and {}", op, dtype_name(input.dtype()),
                dtype_name(target.dtype()));
}

Tensor reduce_terms(const Tensor& terms, Reduction reduction) {
  switch (reduction) {
    case Reduction::None: return terms;
    case Reduction::Sum: return terms.sum();
    case Reduction::Mean: return terms.mean();
  }
  return terms;
}

// A weight that scales a loss's terms: floating, broadcasting to the input's shape.
void check_weight(const char* op, const char* name, const Tensor& weight, const Tensor& input) {
  if (!weight.defined()) return;
  CPPGRAD_CHECK(weight.is_floating_point(), "{}: {} must be floating, got {}", op, name, dtype_name(weight.dtype()));
  bool broadcasts = weight.dim() <= input.dim();
  for (int64_t d = 1; broadcasts && d <= weight.dim(); ++d)
    broadcasts = weight.size(-d) == 1 || weight.size(-d) == input.size(-d);
  CPPGRAD_CHECK(broadcasts, "{}: {} of shape {} does not broadcast to the input's {}", op, name, shape_str(weight.shape()),
        shape_str(input.shape()));
}
}  // namespace

// (x − y)²
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_pair("mse_loss", input, target);
  Tensor diff = input - target;
  return reduce_terms(diff * diff, reduction);
}

// |x − y| (its gradient at x = y is 0, as PyTorch's)
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_pair("l1_loss", input, target);
  return reduce_terms((input - target).abs(), reduction);
}

// ½d²/β where d = |x − y| < β, else d − ½β; β = 0 is l1_loss
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  check_pair("smooth_l1_loss", input, target);
  CPPGRAD_CHECK(beta >= 0.0, "smooth_l1_loss: beta must not be negative, got {}", beta);
  if (beta == 0.0) return l1_loss(input, target, reduction);
  Tensor d = (input - target).abs();
  return reduce_terms(where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction);
}

// ½d² where d = |x − y| < δ, else δ·(d − ½δ): smooth_l1_loss scaled by β = δ
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  check_pair("huber_loss", input, target);
  CPPGRAD_CHECK(delta > 0.0, "huber_loss: delta must be positive, got {}", delta);
  Tensor d = (input - target).abs();
  return reduce_terms(where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction);
}

// −w·[p·y·log σ(x) + (1 − y)·log(1 − σ(x))], in PyTorch's form that no large |x| overflows: with
// m = max(−x, 0), −log σ(x) = log(e^{−m} + e^{−x−m}) + m, and the loss is
//   (1 − y)·x + (1 + (p − 1)·y)·(−log σ(x))      (p = pos_weight, 1 when not given)
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, const BceWithLogitsOptions& options) {
  const char* op = "binary_cross_entropy_with_logits";
  check_pair(op, logits, target);
  check_weight(op, "weight", options.weight(), logits);
  check_weight(op, "pos_weight", options.pos_weight(), logits);
  Tensor m = (-logits).clamp(0.0);
  Tensor log_sum = ((-m).exp() + (-logits - m).exp()).log();
  Tensor terms = options.pos_weight().defined()
                     ? (1.0 - target) * logits + ((options.pos_weight() - 1.0) * target + 1.0) * (log_sum + m)
                     : (1.0 - target) * logits + m + log_sum;
  if (options.weight().defined()) terms = terms * options.weight();
  return reduce_terms(terms, options.reduction());
}

// ---- attention as its formula: softmax(q·kᵀ/√d + mask)·v ---------------------------------------

namespace {

// q (B, H, T, d), k (B, H, S, d), v (B, H, S, dv); any leading dims that broadcast in place of
// (B, H). mask broadcasts to the scores (B, H, T, S): true hides a key, a float is added; causal
// hides key j from query i when j > i. scale is 1/√d unless the caller asks otherwise.
AttentionOutput attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                          double dropout_p, double scale, Generator& gen) {
  Tensor scores = q.matmul(k.mT());                              // (B, H, T, d) @ (B, H, d, S) -> (B, H, T, S)
  Tensor weights = masked_softmax(scores, mask, causal, scale);  // softmax over the S keys of scale·scores + mask
  if (dropout_p > 0.0) weights = dropout(weights, dropout_p, true, gen);  // (B, H, T, S)
  return {weights.matmul(v), weights};                           // (B, H, T, S) @ (B, H, S, dv) -> (B, H, T, dv)
}

}  // namespace

// ---- attention: which path computes it, positions and biases ---------------------------------

namespace {
std::atomic<AttentionBackend> g_attention_backend{AttentionBackend::Auto};
// From this many scores per head the fused path is as fast as the materialising one and smaller;
// below, the materialising path's few BLAS calls win by a little (bench/bench_attention;
// results/2026-11-23-attention.md).
constexpr int64_t kFusedMinSize = 256 * 256;

// grouped: k and v have g heads where q has h (enable_gqa, already checked); the fused kernel
// reads them shared, so their leading dims equal q's but for the heads.
bool use_fused(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool need_weights, bool grouped) {
  const AttentionBackend backend = g_attention_backend.load();
  if (reference_mode() || backend == AttentionBackend::Materialize || need_weights) return false;
  if (mask.defined() && mask.requires_grad()) return false;
  const int64_t lead_end = grouped ? 3 : 2;
  const Shape lead_q(q.shape().begin(), q.shape().end() - lead_end), lead_k(k.shape().begin(), k.shape().end() - lead_end),
      lead_v(v.shape().begin(), v.shape().end() - lead_end);
  if (lead_q != lead_k || lead_k != lead_v || !q.is_floating_point()) return false;
  if (q.size(-1) == 0 || v.size(-1) == 0 || k.size(-2) == 0 || q.size(-2) == 0) return false;
  return backend == AttentionBackend::Fused || q.size(-2) * k.size(-2) >= kFusedMinSize;
}

// The options other than the mask, as the attention op takes them.
AttentionPositions positions_of(const AttentionOptions& o) {
  return {.query_offset = o.query_offset(), .window = o.window(), .alibi_slopes = o.alibi_slopes()};
}

// A mask that broadcasts to (..., h, T, S), read as (..., g, r, T, S) for the grouped scores:
// its heads dim, when it has one, splits into g groups of r.
Tensor grouped_mask(const Tensor& mask, int64_t groups, int64_t group_size) {
  if (!mask.defined() || mask.dim() < 3) return mask;  // (T, S) broadcasts as it is
  Shape shape(mask.shape().begin(), mask.shape().end() - 3);
  if (mask.size(-3) == 1) return mask.unsqueeze(-3);  // (..., 1, T, S) -> (..., 1, 1, T, S)
  shape.insert(shape.end(), {groups, group_size, mask.size(-2), mask.size(-1)});
  return mask.reshape(shape);  // (..., h, T, S) -> (..., g, r, T, S)
}
}  // namespace

void set_attention_backend(AttentionBackend backend) { g_attention_backend = backend; }
AttentionBackend attention_backend() { return g_attention_backend.load(); }
int64_t fused_attention_min_size() { return kFusedMinSize; }

AttentionOutput scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& attn_mask, double dropout_p, bool is_causal,
                                             std::optional<double> scale, bool need_weights, Generator& gen) {
  auto o = AttentionOptions().attn_mask(attn_mask).dropout_p(dropout_p).is_causal(is_causal).scale(scale);
  return scaled_dot_product_attention(q, k, v, o.need_weights(need_weights), gen);
}

Tensor alibi_slopes(int64_t num_heads) {
  // The bound keeps 2·power below 2^63 and the slopes' vectors a few GB at most; a head count
  // like 2^40 once filled vectors for minutes, INT64_MAX overflowed.
  constexpr int64_t kMostHeads = int64_t{1} << 24;
  CPPGRAD_CHECK(num_heads > 0 && num_heads <= kMostHeads, "alibi_slopes: num_heads {} must be in [1, 2^24]", num_heads);
  // For a power of 2 n: 2^(−8/n·(1..n)). Otherwise those of the power of 2 below, then the odd
  // ones (1st, 3rd, ...) of twice that power: the paper's code, so that every h has h slopes.
  auto geometric = [](int64_t n) {
    std::vector<double> out;
    for (int64_t i = 1; i <= n; ++i) out.push_back(std::exp2(-8.0 * static_cast<double>(i) / static_cast<double>(n)));
    return out;
  };
  int64_t power = 1;
  while (power * 2 <= num_heads) power *= 2;
  std::vector<double> slopes = geometric(power);
  const std::vector<double> finer = geometric(2 * power);
  for (int64_t i = 0; static_cast<int64_t>(slopes.size()) < num_heads; ++i) slopes.push_back(finer[2 * i]);
  return tensor(slopes, Shape{num_heads});
}

Tensor attention_bias(const AttentionOptions& o, int64_t heads, int64_t target_len, int64_t source_len, DType dtype) {
  return attention_position_bias(positions_of(o), o.is_causal(), heads, target_len, source_len, dtype);
}

// ---- scaled_dot_product_attention: the checks, the fused path and grouped heads around the formula

AttentionOutput scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const AttentionOptions& o, Generator& gen) {
  CPPGRAD_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2 && q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2),
        "scaled_dot_product_attention: q {}, k {}, v {} do not fit (..., T, d), (..., S, d), (..., S, dv)",
        shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  const int64_t d_k = q.size(-1), T = q.size(-2), S = k.size(-2);
  const double s = o.scale().value_or(1.0 / std::sqrt(static_cast<double>(d_k)));
  const double dropout_p = o.dropout_p();
  CPPGRAD_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, "scaled_dot_product_attention: dropout_p {} must be in [0, 1)",
                dropout_p);
  CPPGRAD_CHECK(!o.window() || *o.window() >= 1, "scaled_dot_product_attention: window {} must be at least 1",
                o.window().value_or(0));
  CPPGRAD_CHECK(o.query_offset() >= 0, "scaled_dot_product_attention: query_offset {} must not be negative",
                o.query_offset());
  const int64_t heads = q.dim() >= 3 ? q.size(-3) : 1;
  CPPGRAD_CHECK(!o.alibi_slopes().defined() || q.dim() >= 3,
                "scaled_dot_product_attention: ALiBi needs a heads dim, q {} has none", shape_str(q.shape()));
  CPPGRAD_CHECK(o.enable_gqa() || q.dim() < 3 || k.dim() < 3 || q.size(-3) == k.size(-3) || q.size(-3) == 1 ||
                    k.size(-3) == 1,
                "scaled_dot_product_attention: q {} has {} heads and k {} has {}: enable_gqa shares key/value heads "
                "between query heads", shape_str(q.shape()), heads, shape_str(k.shape()), k.size(-3));
  int64_t group = 1;  // query heads per key/value head
  if (o.enable_gqa()) {
    const bool same_lead = q.dim() >= 3 && k.dim() == q.dim() && v.dim() == q.dim() &&
                           Shape(q.shape().begin(), q.shape().end() - 3) == Shape(k.shape().begin(), k.shape().end() - 3) &&
                           Shape(k.shape().begin(), k.shape().end() - 3) == Shape(v.shape().begin(), v.shape().end() - 3);
    CPPGRAD_CHECK(same_lead && k.size(-3) > 0 && v.size(-3) == k.size(-3) && heads % k.size(-3) == 0,
                  "scaled_dot_product_attention: enable_gqa: q {} has {} heads, which must be a multiple of the key/value "
                  "heads of k {} and v {} (..., heads, length, d), the other leading dims equal",
                  shape_str(q.shape()), heads, shape_str(k.shape()), shape_str(v.shape()));
    group = heads / k.size(-3);
  }
  Shape scores_shape(q.shape().begin(), q.shape().end() - 1);  // (..., h, T, S)
  scores_shape.push_back(S);
  if (o.attn_mask().defined()) {
    CPPGRAD_CHECK(o.attn_mask().dim() <= q.dim(), "scaled_dot_product_attention: mask {} has more dims than scores {}",
                  shape_str(o.attn_mask().shape()), shape_str(scores_shape));
    broadcast_shapes(scores_shape, o.attn_mask().shape(), "scaled_dot_product_attention (mask)");
  }
  CPPGRAD_CHECK(!o.alibi_slopes().defined() || (o.alibi_slopes().dim() == 1 && o.alibi_slopes().size(0) == heads),
                "scaled_dot_product_attention: alibi_slopes {} must hold one slope for each of the {} query heads",
                shape_str(o.alibi_slopes().shape()), heads);
  // One op in ONNX: its causal, window and ALiBi masks are made of T and S, which ONNX reads from the graph.
  autograd::TraceScope trace;
  auto traced = [&] {
    autograd::TracedOp op{"scaled_dot_product_attention", {q, k, v, o.attn_mask()},
                          {{"is_causal", int64_t{o.is_causal()}}, {"scale", s}, {"query_offset", o.query_offset()}}};
    if (o.window()) op.args.push_back({"window", *o.window()});
    if (o.alibi_slopes().defined()) op.args.push_back({"alibi_slopes", o.alibi_slopes()});
    return op;
  };
  auto noted = [&](AttentionOutput out) {
    out.output = trace.note(out.output, traced);
    return out;
  };
  // The fast path: block by block, shared key/value heads read in place, windows and ALiBi per tile.
  if (use_fused(q, k, v, o.attn_mask(), o.need_weights(), group > 1))
    return noted({fused_attention(q, k, v, o.attn_mask(), o.is_causal(), s, dropout_p, gen, positions_of(o)), Tensor()});

  // The formula, with the window, the decoding offset and ALiBi joining the mask as one float bias.
  Tensor mask = o.attn_mask();
  bool causal = o.is_causal();
  if (Tensor bias = attention_bias(o, heads, T, S, q.dtype()); bias.defined()) {
    mask = mask.defined() ? additive_mask(mask, q.dtype()) + bias : bias;  // -inf + anything stays -inf
    causal = false;  // the bias hides the keys after each query
  }
  if (group == 1) {
    AttentionOutput out = attention(q, k, v, mask, causal, dropout_p, s, gen);
    return noted({out.output, o.need_weights() ? out.weights : Tensor()});
  }
  // Grouped query heads: the r = h/g query heads that share key/value head j are one taller
  // query matrix against that head's keys, so no key or value is repeated, and the gradient of
  // a shared key sums over its r query heads inside the product dKⱼ = dSⱼᵀ·Qⱼ.
  const int64_t g = k.size(-3);
  Shape lead(q.shape().begin(), q.shape().end() - 3);
  auto with_lead = [&](std::initializer_list<int64_t> tail) {
    Shape shape = lead;
    shape.insert(shape.end(), tail);
    return shape;
  };
  Tensor scores = q.reshape(with_lead({g, group * T, d_k})).matmul(k.mT());  // (..., h, T, d) -> (..., g, r·T, d) @ (..., g, d, S)
  Tensor weights = masked_softmax(scores.reshape(with_lead({g, group, T, S})), grouped_mask(mask, g, group), causal,
                                  s);  // (..., g, r, T, S)
  if (dropout_p > 0.0) weights = dropout(weights, dropout_p, true, gen);
  Tensor output = weights.reshape(with_lead({g, group * T, S})).matmul(v);  // (..., g, r·T, S) @ (..., g, S, dv)
  return noted({output.reshape(with_lead({heads, T, v.size(-1)})),          // (..., g, r·T, dv) -> (..., h, T, dv)
                o.need_weights() ? weights.reshape(scores_shape) : Tensor()});
}

// ---- masks -------------------------------------------------------------------------------------

Tensor generate_square_subsequent_mask(int64_t size, DType dtype) {
  CPPGRAD_CHECK(size >= 0, "generate_square_subsequent_mask: negative size {}", size);
  CPPGRAD_CHECK(is_floating(dtype), "generate_square_subsequent_mask: dtype {} is not floating; the mask hides with -inf",
                dtype_name(dtype));
  Tensor mask = zeros({size, size}, dtype);  // first: a size past the memory is refused before the two aranges
  Tensor j = arange(static_cast<double>(size)).reshape({1, size});
  Tensor i = arange(static_cast<double>(size)).reshape({size, 1});
  return mask.masked_fill(j.gt(i), -std::numeric_limits<double>::infinity());
}

}  // namespace cppgrad::nn::functional
