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
// cross_entropy's arguments: floating logits (N, C, d1, ...) or (C), int64 targets of their
// shape without the class dim, every target a class or the ignored index.
void check_cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options) {
  CPPGRAD_CHECK(logits.is_floating_point(), "cross_entropy: logits must be floating, got {}", dtype_name(logits.dtype()));
  CPPGRAD_CHECK(target.dtype() == kInt64, "cross_entropy: target must hold int64 class indices, got {}",
        dtype_name(target.dtype()));
  CPPGRAD_CHECK(options.label_smoothing() >= 0.0 && options.label_smoothing() <= 1.0,
        "cross_entropy: label_smoothing must be in [0, 1], got {}", options.label_smoothing());
  CPPGRAD_CHECK(logits.dim() >= 1, "cross_entropy: logits need a class dim, got a 0-d tensor");
  Shape expected = logits.shape();
  expected.erase(expected.begin() + (logits.dim() == 1 ? 0 : 1));
  CPPGRAD_CHECK(target.shape() == expected, "cross_entropy: logits {} need a target of shape {}, got {}",
        shape_str(logits.shape()), shape_str(expected), shape_str(target.shape()));
  const int64_t classes = logits.dim() == 1 ? logits.size(0) : logits.size(1);
  for (int64_t t : target.reshape({-1}).to_vector<int64_t>())
    CPPGRAD_CHECK(t == options.ignore_index() || (t >= 0 && t < classes), "cross_entropy: target {} is out of range for {} classes",
          t, classes);
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

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options) {
  check_cross_entropy(logits, target, options);
  // Bring the class dim last and flatten: (M, C) logits against (M) targets.
  Tensor flat_logits = logits.dim() == 1 ? logits.unsqueeze(0) : logits;
  if (logits.dim() > 2) {
    std::vector<int64_t> class_last{0};  // (N, C, d1, ...) -> (N, d1, ..., C)
    for (int64_t d = 2; d < logits.dim(); ++d) class_last.push_back(d);
    class_last.push_back(1);
    flat_logits = logits.permute(class_last);
  }
  flat_logits = flat_logits.reshape({-1, flat_logits.size(-1)});
  Tensor flat_target = target.reshape({-1});
  Tensor valid = flat_target.ne(scalar_tensor(static_cast<double>(options.ignore_index()), kInt64));
  Tensor safe_target = where(valid, flat_target, zeros({}, kInt64));  // ignored targets read class 0
  // −log softmax(logits)[target] (M); log_softmax's (M, C) rows are made where smoothing reads them
  Tensor nll = options.label_smoothing() > 0.0 ? Tensor() : fused_log_softmax_nll(flat_logits, safe_target);
  Tensor log_probs = nll.defined() ? Tensor() : flat_logits.log_softmax(1);
  if (!nll.defined()) nll = -log_probs.gather(1, safe_target.unsqueeze(1)).squeeze(1);
  Tensor loss = nll;
  if (options.label_smoothing() > 0.0) {
    // The target distribution is (1-ε)·one_hot + ε/C: its cross-entropy adds ε·mean_c(-log p_c).
    const double eps = options.label_smoothing();
    loss = (1.0 - eps) * nll + eps * (-log_probs.mean({1}));
  }
  loss = loss.masked_fill(valid.logical_not(), 0.0);
  switch (options.reduction()) {
    case Reduction::None: return loss.reshape(target.shape());
    case Reduction::Sum: return loss.sum();
    case Reduction::Mean: {
      // With every target ignored the mean is over no terms: NaN, as in PyTorch (1.13 and later),
      // but added as a constant, so the gradient is zero rather than 0 · (1/0) = NaN.
      const auto count = kernels::sum(valid, {}, false).item<int64_t>();
      if (count == 0) return loss.sum() + std::numeric_limits<double>::quiet_NaN();
      return loss.sum() / static_cast<double>(count);
    }
  }
  return loss;
}

// ---- the other losses ---------------------------------------------------------------------------

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  CPPGRAD_CHECK(input.shape() == target.shape(), "mse_loss: input {} and target {} differ in shape", shape_str(input.shape()),
        shape_str(target.shape()));
  CPPGRAD_CHECK(input.is_floating_point() && target.is_floating_point(),
                "mse_loss: input and target must be floating point, got {} and {}", dtype_name(input.dtype()),
                dtype_name(target.dtype()));
  Tensor diff = input - target;
  Tensor sq = diff * diff;
  switch (reduction) {
    case Reduction::None: return sq;
    case Reduction::Sum: return sq.sum();
    case Reduction::Mean: return sq.mean();
  }
  return sq;
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
