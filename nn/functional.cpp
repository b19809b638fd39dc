#include "nn/functional.h"

#include <atomic>
#include <cmath>
#include <limits>

#include "autograd/functions.h"
#include "runtime/reference_mode.h"
#include "tensor/kernels.h"

namespace cppgrad::nn::functional {

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return cppgrad::linear(x, weight, bias);  // (..., in) -> (..., out), bias added inside the GEMM; checked by its kernel
}

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx) {
  CPPGRAD_CHECK(indices.dtype() == kInt64, "embedding: indices must be int64, got {}", dtype_name(indices.dtype()));
  CPPGRAD_CHECK(weight.dim() == 2, "embedding: weight must be 2-D (num_embeddings, dim), got {}", shape_str(weight.shape()));
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
  if (!padding_idx) return rows;
  // Same values; but the padding row's gradient is cut.
  Tensor is_pad = indices.eq(scalar_tensor(static_cast<double>(*padding_idx), kInt64)).unsqueeze(-1);
  return where(is_pad, rows.detach(), rows);
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  const auto k = static_cast<int64_t>(normalized_shape.size());
  CPPGRAD_CHECK(k >= 1 && x.dim() >= k && Shape(x.shape().end() - k, x.shape().end()) == normalized_shape,
        "layer_norm: input {} does not end with normalized_shape {}", shape_str(x.shape()),
        shape_str(normalized_shape));
  return cppgrad::layer_norm(x, k, weight, bias, eps);  // one fused op, forward and backward
}

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  CPPGRAD_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability must be in [0, 1], got {}", p);
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

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options) {
  CPPGRAD_CHECK(logits.is_floating_point(), "cross_entropy: logits must be floating, got {}", dtype_name(logits.dtype()));
  CPPGRAD_CHECK(target.dtype() == kInt64, "cross_entropy: target must hold int64 class indices, got {}",
        dtype_name(target.dtype()));
  CPPGRAD_CHECK(options.label_smoothing() >= 0.0 && options.label_smoothing() <= 1.0,
        "cross_entropy: label_smoothing must be in [0, 1], got {}", options.label_smoothing());
  // Bring the class dim last and flatten: (M, C) logits against (M) targets.
  Tensor flat_logits;
  if (logits.dim() == 1) {
    CPPGRAD_CHECK(target.dim() == 0, "cross_entropy: logits {} need a 0-d target, got {}", shape_str(logits.shape()),
          shape_str(target.shape()));
    flat_logits = logits.unsqueeze(0);
  } else {
    Shape expected = logits.shape();
    expected.erase(expected.begin() + 1);
    CPPGRAD_CHECK(target.shape() == expected, "cross_entropy: logits {} need a target of shape {}, got {}",
          shape_str(logits.shape()), shape_str(expected), shape_str(target.shape()));
    std::vector<int64_t> class_last{0};  // (N, C, d1, ...) -> (N, d1, ..., C)
    for (int64_t d = 2; d < logits.dim(); ++d) class_last.push_back(d);
    class_last.push_back(1);
    flat_logits = logits.dim() == 2 ? logits : logits.permute(class_last);
  }
  const int64_t classes = flat_logits.size(-1);
  flat_logits = flat_logits.reshape({-1, classes});
  Tensor flat_target = target.reshape({-1});

  Tensor valid = flat_target.ne(scalar_tensor(static_cast<double>(options.ignore_index()), kInt64));
  for (int64_t t : flat_target.to_vector<int64_t>())
    CPPGRAD_CHECK(t == options.ignore_index() || (t >= 0 && t < classes), "cross_entropy: target {} is out of range for {} classes",
          t, classes);
  Tensor safe_target = where(valid, flat_target, zeros({}, kInt64));

  Tensor log_probs = flat_logits.log_softmax(1);                                  // (M, C)
  Tensor nll = -log_probs.gather(1, safe_target.unsqueeze(1)).squeeze(1);        // (M)
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

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  CPPGRAD_CHECK(input.shape() == target.shape(), "mse_loss: input {} and target {} differ in shape", shape_str(input.shape()),
        shape_str(target.shape()));
  Tensor diff = input - target;
  Tensor sq = diff * diff;
  switch (reduction) {
    case Reduction::None: return sq;
    case Reduction::Sum: return sq.sum();
    case Reduction::Mean: return sq.mean();
  }
  return sq;
}

namespace {
std::atomic<AttentionBackend> g_attention_backend{AttentionBackend::Auto};
// From this many scores per head the fused path is as fast as the materialising one and smaller;
// below, the materialising path's few BLAS calls win by a little. bench/bench_attention at B 1,
// 8 heads, d 64, forward+backward, 1 thread, materialised time / fused time (not causal, causal):
// T = 64 0.89, 0.86; 128 0.92, 0.91; 256 0.96, 1.03; 512 1.07, 0.99; 1024 1.05, 1.76. So the
// threshold stays at T = S = 256, where memory is already 3x smaller (5 MB against 14 MB).
constexpr int64_t kFusedMinSize = 256 * 256;

bool use_fused(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool need_weights) {
  const AttentionBackend backend = g_attention_backend.load();
  if (reference_mode() || backend == AttentionBackend::Materialize || need_weights) return false;
  if (mask.defined() && mask.requires_grad()) return false;
  const Shape lead_q(q.shape().begin(), q.shape().end() - 2), lead_k(k.shape().begin(), k.shape().end() - 2),
      lead_v(v.shape().begin(), v.shape().end() - 2);
  if (lead_q != lead_k || lead_k != lead_v || !q.is_floating_point()) return false;
  if (q.size(-1) == 0 || v.size(-1) == 0 || k.size(-2) == 0 || q.size(-2) == 0) return false;
  return backend == AttentionBackend::Fused || q.size(-2) * k.size(-2) >= kFusedMinSize;
}
}  // namespace

void set_attention_backend(AttentionBackend backend) { g_attention_backend = backend; }
AttentionBackend attention_backend() { return g_attention_backend.load(); }
int64_t fused_attention_min_size() { return kFusedMinSize; }

AttentionOutput scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& attn_mask, double dropout_p, bool is_causal,
                                             std::optional<double> scale, bool need_weights, Generator& gen) {
  CPPGRAD_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2 && q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2),
        "scaled_dot_product_attention: q {}, k {}, v {} do not fit (..., T, d), (..., S, d), (..., S, dv)",
        shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  const int64_t d_k = q.size(-1);
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(d_k)));
  CPPGRAD_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, "scaled_dot_product_attention: dropout_p {} must be in [0, 1)",
                dropout_p);
  if (use_fused(q, k, v, attn_mask, need_weights)) {
    if (attn_mask.defined()) {
      CPPGRAD_CHECK(attn_mask.dim() <= q.dim(), "scaled_dot_product_attention: mask {} has more dims than scores",
                    shape_str(attn_mask.shape()));
      Shape scores_shape(q.shape().begin(), q.shape().end() - 1);
      scores_shape.push_back(k.size(-2));
      broadcast_shapes(scores_shape, attn_mask.shape(), "scaled_dot_product_attention (mask)");
    }
    return {fused_attention(q, k, v, attn_mask, is_causal, s, dropout_p, gen), Tensor()};
  }
  Tensor scores = q.matmul(k.mT());  // (..., T, d) @ (..., d, S) -> (..., T, S)
  if (attn_mask.defined()) {
    CPPGRAD_CHECK(attn_mask.dim() <= scores.dim(), "scaled_dot_product_attention: mask {} has more dims than scores {}",
          shape_str(attn_mask.shape()), shape_str(scores.shape()));
    broadcast_shapes(scores.shape(), attn_mask.shape(), "scaled_dot_product_attention (mask)");
  }
  // softmax(s·scores + mask) in one op; is_causal hides key j > i. A row with every key masked
  // gives zeros there, not NaN.
  Tensor weights = masked_softmax(scores, attn_mask, is_causal, s);
  if (dropout_p > 0.0) weights = dropout(weights, dropout_p, true, gen);
  Tensor output = weights.matmul(v);  // (..., T, S) @ (..., S, dv) -> (..., T, dv)
  return {output, need_weights ? weights : Tensor()};
}

Tensor generate_square_subsequent_mask(int64_t size, DType dtype) {
  CPPGRAD_CHECK(size >= 0, "generate_square_subsequent_mask: negative size {}", size);
  Tensor j = arange(static_cast<double>(size)).reshape({1, size});
  Tensor i = arange(static_cast<double>(size)).reshape({size, 1});
  return zeros({size, size}, dtype).masked_fill(j.gt(i), -std::numeric_limits<double>::infinity());
}

}  // namespace cppgrad::nn::functional
