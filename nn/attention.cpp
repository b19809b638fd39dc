#include "nn/attention.h"

#include <limits>

#include "autograd/functions.h"
#include "nn/init.h"

namespace cppgrad::nn {

namespace F = functional;

// ---- argument checks, masks and hidden keys -------------------------------------------------
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// A bool mask becomes 0 / -inf; a float mask is used as it is.
Tensor additive(const Tensor& mask, DType dtype) {
  CPPGRAD_CHECK(mask.dtype() == kBool || mask.is_floating_point(), "attention: a mask must be bool or floating, got {}",
                dtype_name(mask.dtype()));
  return cppgrad::additive_mask(mask, dtype);
}

struct Inputs {
  Tensor query, key, value, key_padding_mask;
  bool unbatched = false;
};

// Checks shapes, and gives unbatched (T, E) inputs a batch dim of 1.
Inputs prepare(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& key_padding_mask,
               int64_t embed_dim, int64_t kdim, int64_t vdim) {
  Inputs in{query, key, value, key_padding_mask};
  if (query.dim() == 2) {
    in = {query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0),
          key_padding_mask.defined() ? key_padding_mask.unsqueeze(0) : Tensor(), true};
  }
  const Tensor &q = in.query, &k = in.key, &v = in.value;
  CPPGRAD_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3,
        "MultiheadAttention: query {}, key {}, value {} must all be (B, T, E) or all (T, E)", shape_str(query.shape()),
        shape_str(key.shape()), shape_str(value.shape()));
  CPPGRAD_CHECK(q.size(2) == embed_dim && k.size(2) == kdim && v.size(2) == vdim,
        "MultiheadAttention: query {}, key {}, value {} must end in embed_dim {}, kdim {}, vdim {}",
        shape_str(query.shape()), shape_str(key.shape()), shape_str(value.shape()), embed_dim, kdim, vdim);
  CPPGRAD_CHECK(q.size(0) == k.size(0) && k.size(0) == v.size(0) && k.size(1) == v.size(1),
        "MultiheadAttention: query {}, key {}, value {}: batch sizes and key/value lengths must agree",
        shape_str(query.shape()), shape_str(key.shape()), shape_str(value.shape()));
  return in;
}

// The keys that key_padding_mask (B, S) hides (true, or -inf when additive), as (B, S, 1), or
// undefined without a mask.
Tensor hidden_keys(const Tensor& key_padding_mask) {
  if (!key_padding_mask.defined()) return {};
  Tensor hidden = key_padding_mask.dtype() == kBool ? key_padding_mask
                                                    : key_padding_mask.eq(scalar_tensor(kNegInf, key_padding_mask.dtype()));
  return hidden.unsqueeze(-1);
}

// Zeroes the rows of keys or values (B, S, ·) at hidden positions. Whatever a padded position
// holds (NaN or inf from uninitialised padding), it must not reach the visible ones: a key there
// would score NaN, and NaN + (-inf) is NaN, not -inf; a value there meets weight 0, and 0 · NaN
// is NaN, which the weighted sum carries into every output. Zeroed, the key scores -inf and the
// value adds 0, and so do their gradients.
Tensor zero_hidden(const Tensor& t, const Tensor& hidden) { return hidden.defined() ? t.masked_fill(hidden, 0.0) : t; }

AttentionOutput finish(AttentionOutput result, bool need_weights, bool average, bool unbatched) {
  if (need_weights && average) result.weights = result.weights.mean({1});  // (B, H, T, S) -> (B, T, S)
  if (!need_weights) result.weights = Tensor();
  if (unbatched) {
    result.output = result.output.squeeze(0);
    if (result.weights.defined()) result.weights = result.weights.squeeze(0);
  }
  return result;
}

}  // namespace

Tensor merge_attention_masks(const Tensor& key_padding_mask, const Tensor& attn_mask, int64_t batch, int64_t heads,
                             int64_t target_len, int64_t source_len, DType dtype) {
  Tensor merged;
  if (key_padding_mask.defined()) {
    CPPGRAD_CHECK((key_padding_mask.shape() == Shape{batch, source_len}),
          "MultiheadAttention: key_padding_mask {} should be (B, S) = [{},{}]", shape_str(key_padding_mask.shape()),
          batch, source_len);
    merged = additive(key_padding_mask, dtype).reshape({batch, 1, 1, source_len});
  }
  if (attn_mask.defined()) {
    Tensor m;
    if (attn_mask.dim() == 2) {
      CPPGRAD_CHECK((attn_mask.shape() == Shape{target_len, source_len}),
            "MultiheadAttention: a 2-D attn_mask {} should be (T, S) = [{},{}]", shape_str(attn_mask.shape()),
            target_len, source_len);
      m = additive(attn_mask, dtype).reshape({1, 1, target_len, source_len});
    } else {
      CPPGRAD_CHECK((attn_mask.shape() == Shape{batch * heads, target_len, source_len}),
            "MultiheadAttention: a 3-D attn_mask {} should be (B·H, T, S) = [{},{},{}]", shape_str(attn_mask.shape()),
            batch * heads, target_len, source_len);
      m = additive(attn_mask, dtype).reshape({batch, heads, target_len, source_len});
    }
    merged = merged.defined() ? merged + m : m;  // -inf + anything stays -inf
  }
  return merged;
}

// ---- the heads: a view of one projection, and back ------------------------------------------
namespace {

// (B, L, H·d) -> (B, H, L, d): each head's slice of the features becomes its own batch entry.
// A view: no data moves.
Tensor split_heads(const Tensor& x, int64_t heads) {
  return x.reshape({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}

// (B, H, T, d) -> (B, T, H·d): the heads' outputs side by side (Concat in the paper).
Tensor merge_heads(const Tensor& x) {
  return x.transpose(1, 2).reshape({x.size(0), x.size(2), x.size(1) * x.size(3)});
}

// ---- self-attention, the fused path: one projection for q, k and v ------------------------------

// MultiheadAttention's forward on x (B, T, E) when none of its options is in play (one projection
// for Q, K and V, as many key/value heads as query heads, no positions, padding or weights
// returned). mask (T, S) or (B, H, T, S), additive. d = E / H.
Tensor self_attention(const MultiheadAttention& m, const Tensor& x, const Tensor& mask, bool is_causal) {
  const int64_t H = m.options.num_heads();
  // Q = x·W_Qᵀ + b_Q, and so on, in one GEMM: (B, T, E) -> (B, T, 3E) -> 3 × (B, T, E)
  std::vector<Tensor> qkv = F::linear(x, m.in_proj_weight, m.in_proj_bias).chunk(3, -1);
  // The heads are a view of each projection: (B, T, E) -> (B, H, T, d); every head saw all E features.
  Tensor q = split_heads(qkv[0], H), k = split_heads(qkv[1], H), v = split_heads(qkv[2], H);
  F::AttentionOptions o = F::AttentionOptions().attn_mask(mask).is_causal(is_causal);
  o.dropout_p(m.is_training() ? m.options.dropout() : 0.0);
  Tensor heads = F::scaled_dot_product_attention(q, k, v, o).output;  // softmax(q·kᵀ/√d + mask)·v: (B, H, T, d)
  return m.out_proj->forward(merge_heads(heads));  // Concat(head_1, ..., head_H)·W_Oᵀ + b_O: (B, T, E)
}

}  // namespace

// ---- MultiheadAttention ---------------------------------------------------------------------

MultiheadAttention::MultiheadAttention(const MultiheadAttentionOptions& opts)
    : options(MultiheadAttentionOptions(opts)
                  .kdim(opts.kdim() > 0 ? opts.kdim() : opts.embed_dim())
                  .vdim(opts.vdim() > 0 ? opts.vdim() : opts.embed_dim())
                  .num_kv_heads(opts.num_kv_heads() > 0 ? opts.num_kv_heads() : opts.num_heads())
                  .head_dim(opts.head_dim() != 0 || opts.num_heads() <= 0 ? opts.head_dim()
                                                                          : opts.embed_dim() / opts.num_heads())),
      head_dim(options.head_dim()) {
  const int64_t E = options.embed_dim(), H = options.num_heads();
  CPPGRAD_CHECK(E > 0 && H > 0, "MultiheadAttention: embed_dim {} and num_heads {} must be positive", E, H);
  CPPGRAD_CHECK(opts.head_dim() >= 0, "MultiheadAttention: head_dim {} must be positive (or 0: embed_dim / num_heads)",
                opts.head_dim());
  CPPGRAD_CHECK(opts.kdim() >= 0 && opts.vdim() >= 0, "MultiheadAttention: kdim {} and vdim {} must be positive (or 0: "
                "embed_dim)", opts.kdim(), opts.vdim());
  CPPGRAD_CHECK(opts.head_dim() > 0 || E % H == 0,
                "MultiheadAttention: embed_dim {} is not divisible by num_heads {} (each head needs d_k = E / h; or "
                "give head_dim)", E, H);
  CPPGRAD_CHECK(options.dropout() >= 0.0 && options.dropout() < 1.0, "MultiheadAttention: dropout {} must be in [0, 1)",
        options.dropout());
  const int64_t G = options.num_kv_heads();
  CPPGRAD_CHECK(opts.num_kv_heads() >= 0 && H % G == 0,
                "MultiheadAttention: num_kv_heads {} must divide num_heads {} (each key/value head serves "
                "num_heads / num_kv_heads query heads)", opts.num_kv_heads(), H);
  CPPGRAD_CHECK(!options.rotary() || head_dim % 2 == 0, "MultiheadAttention: rotary positions need an even head_dim, got {}",
                opts.head_dim() > 0 ? fmt::format("head_dim {}", head_dim)
                                    : fmt::format("embed_dim {} / num_heads {} = {}", E, H, head_dim));
  CPPGRAD_CHECK(!options.window() || *options.window() >= 1, "MultiheadAttention: window {} must be at least 1",
                options.window().value_or(0));
  const int64_t q_width = H * head_dim, kv_width = G * head_dim;  // E and E unless head_dim is set or heads grouped
  if (options.kdim() == E && options.vdim() == E && G == H && q_width == E) {
    in_proj_weight = register_parameter("in_proj_weight", empty({3 * E, E}));
  } else {
    q_proj_weight = register_parameter("q_proj_weight", empty({q_width, E}));
    k_proj_weight = register_parameter("k_proj_weight", empty({kv_width, options.kdim()}));
    v_proj_weight = register_parameter("v_proj_weight", empty({kv_width, options.vdim()}));
  }
  if (options.bias()) in_proj_bias = register_parameter("in_proj_bias", empty({q_width + 2 * kv_width}));
  // Concat(head_1, ..., head_H) is H·d_k wide: W_O maps it back to E.
  out_proj = register_module("out_proj", std::make_shared<Linear>(q_width, E, options.bias()));
  reset_parameters();
}

// As PyTorch: Xavier-uniform projections, zero biases; out_proj.weight keeps Linear's init.
void MultiheadAttention::reset_parameters(Generator& gen) {
  for (const Tensor& w : {in_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight})  // fused, or the three
    if (w.defined()) init::xavier_uniform_(w, 1.0, gen);
  if (in_proj_bias.defined()) {
    init::zeros_(in_proj_bias);
    init::zeros_(out_proj->bias);
  }
}

std::string MultiheadAttention::extra_repr() const {
  std::string text = fmt::format("embed_dim={}, num_heads={}, dropout={}, bias={}", options.embed_dim(),
                                 options.num_heads(), options.dropout(), options.bias());
  if (options.num_kv_heads() != options.num_heads()) text += fmt::format(", num_kv_heads={}", options.num_kv_heads());
  if (head_dim * options.num_heads() != options.embed_dim()) text += fmt::format(", head_dim={}", head_dim);
  if (options.rotary()) text += fmt::format(", rotary_base={}", options.rotary_base());
  if (options.window()) text += fmt::format(", window={}", *options.window());
  if (options.alibi()) text += ", alibi=true";
  return text;
}

int64_t MultiheadAttention::part_start(int which) const {
  return which == 0 ? 0 : part_width(0) + (which - 1) * part_width(1);
}

int64_t MultiheadAttention::part_width(int which) const {
  return (which == 0 ? options.num_heads() : options.num_kv_heads()) * head_dim;
}

Tensor MultiheadAttention::rotate(const Tensor& x, int64_t offset) const {
  return options.rotary() ? F::apply_rotary(x, offset, options.rotary_base(), options.rotary_layout()) : x;
}

F::AttentionOptions MultiheadAttention::attention_options() const {
  F::AttentionOptions o;
  o.enable_gqa(options.num_kv_heads() != options.num_heads()).window(options.window());
  if (options.alibi()) o.alibi_slopes(F::alibi_slopes(options.num_heads()));
  o.dropout_p(is_training() ? options.dropout() : 0.0);
  return o;
}

AttentionOutput MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                            const AttentionArgs& args) {
  const int64_t E = options.embed_dim(), H = options.num_heads(), G = options.num_kv_heads();
  const bool batch_first = options.batch_first();
  const bool plain = fused() && batch_first && query.dim() == 3 && query.size(2) == E && query.is_same(key) &&
                     key.is_same(value) && G == H && !options.rotary() && !options.window() && !options.alibi() &&
                     !args.key_padding_mask.defined() && !args.need_weights && !store_attention;
  if (plain) {  // self-attention, the fused path (above)
    const int64_t B = query.size(0), T = query.size(1);
    Tensor mask = merge_attention_masks({}, args.attn_mask, B, H, T, T, query.dtype());  // checked, additive
    return {self_attention(*this, query, mask, args.is_causal), Tensor()};
  }
  Inputs in =
      prepare(swap_batch_and_sequence(query, batch_first), swap_batch_and_sequence(key, batch_first),
              swap_batch_and_sequence(value, batch_first), args.key_padding_mask, E, options.kdim(), options.vdim());
  const int64_t B = in.query.size(0), T = in.query.size(1), S = in.key.size(1);

  // Q = query · W_Qᵀ + b_Q, and so on: (B, T, E) -> (B, T, H·d_k). The W_* are row blocks of the
  // fused matrix (views); self-attention does all three in one GEMM.
  Tensor mask = merge_attention_masks(in.key_padding_mask, args.attn_mask, B, H, T, S, in.query.dtype());
  const Tensor hidden = hidden_keys(in.key_padding_mask);
  Tensor q, k, v;
  if (fused() && in.query.is_same(in.key) && in.key.is_same(in.value)) {
    auto qkv = F::linear(in.query, in_proj_weight, in_proj_bias).chunk(3, -1);  // (B, T, 3E) -> 3 × (B, T, E)
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    q = project(in.query, 0);
    // Hidden rows are zeroed before the projection too, so that the weights' gradients never
    // meet them (a 0 gradient times a NaN input is NaN).
    k = project(zero_hidden(in.key, hidden), 1);  // (B, S, G·d_k)
    v = project(zero_hidden(in.value, hidden), 2);
  }
  k = zero_hidden(k, hidden);
  v = zero_hidden(v, hidden);

  // The "split into heads" is a reshape of the projections' output, not of the input:
  // (B, T, H·d_k) -> (B, H, T, d_k). Every head saw all E input features.
  AttentionOutput heads = F::scaled_dot_product_attention(
      rotate(split_heads(q, H), 0), rotate(split_heads(k, G), 0), split_heads(v, G),
      attention_options().attn_mask(mask).is_causal(args.is_causal).need_weights(args.need_weights || store_attention));
  if (store_attention) last_attention = heads.weights.detach();

  AttentionOutput result{out_proj->forward(merge_heads(heads.output)), heads.weights};  // (B, T, E)
  result = finish(result, args.need_weights, args.average_attn_weights, in.unbatched);
  result.output = swap_batch_and_sequence(result.output, batch_first);  // (T, B, E) when sequence first
  return result;
}

// ---- incremental decoding -------------------------------------------------------------------

Tensor MultiheadAttention::project(const Tensor& x, int which) const {
  const int64_t start = part_start(which), width = part_width(which);
  Tensor bias = in_proj_bias.defined() ? in_proj_bias.narrow(0, start, width) : Tensor();
  if (fused()) return F::linear(x, in_proj_weight.narrow(0, start, width), bias);
  const Tensor& weight = which == 0 ? q_proj_weight : which == 1 ? k_proj_weight : v_proj_weight;
  return F::linear(x, weight, bias);
}

Tensor KVCache::positions(int64_t batch, int64_t T_new, const Tensor& new_padding) const {
  const int64_t past = length();
  CPPGRAD_CHECK(!new_padding.defined() || (new_padding.dtype() == kBool && new_padding.shape() == Shape{batch, T_new}),
                "KVCache::positions: key_padding_mask {} ({}) must be bool (B, T_new) = [{},{}]",
                shape_str(new_padding.shape()), dtype_name(new_padding.dtype()), batch, T_new);
  CPPGRAD_CHECK(past == 0 || key.size(0) == batch, "KVCache::positions: {} sequences, the cache holds {}", batch,
                key.size(0));
  // Real tokens before the new ones, per sequence, then a running count over the new ones.
  std::vector<int64_t> seen(static_cast<size_t>(batch), past);
  if (key_padding_mask.defined()) {
    const std::vector<int64_t> cached = key_padding_mask.to(kInt64).to_vector<int64_t>();  // (B, L), 1 = padding
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t l = 0; l < past; ++l) seen[b] -= cached[b * past + l];
  }
  std::vector<int64_t> hidden(static_cast<size_t>(batch * T_new), 0);
  if (new_padding.defined()) hidden = new_padding.to(kInt64).to_vector<int64_t>();
  std::vector<int64_t> out(static_cast<size_t>(batch * T_new), 0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < T_new; ++t)
      if (!hidden[b * T_new + t]) out[b * T_new + t] = seen[b]++;  // a padded position keeps 0
  return tensor(out, Shape{batch, T_new});
}

Tensor MultiheadAttention::rotate(const Tensor& x, const Tensor& positions) const {
  return options.rotary() ? F::apply_rotary(x, positions, options.rotary_base(), options.rotary_layout()) : x;
}

Tensor MultiheadAttention::forward_step(const Tensor& x, KVCache& cache, const Tensor& key_padding_mask) {
  const int64_t E = options.embed_dim(), H = options.num_heads(), G = options.num_kv_heads();
  CPPGRAD_CHECK(x.dim() == 3 && x.size(2) == E && options.kdim() == E && options.vdim() == E,
                "MultiheadAttention::forward_step: x {} must be (B, T_new, embed_dim {}) for self-attention",
                shape_str(x.shape()), E);
  CPPGRAD_CHECK(cache.length() == 0 || (cache.key.size(0) == x.size(0) && cache.key.size(1) == G &&
                                        cache.key.dtype() == x.dtype()),
                "MultiheadAttention::forward_step: x {} does not continue the cached keys {}", shape_str(x.shape()),
                shape_str(cache.key.shape()));
  const int64_t B = x.size(0), T_new = x.size(1), past = cache.length();
  CPPGRAD_CHECK(!key_padding_mask.defined() ||
                    (key_padding_mask.dtype() == kBool && key_padding_mask.shape() == Shape{B, T_new}),
                "MultiheadAttention::forward_step: key_padding_mask {} ({}) must be bool (B, T_new) = [{},{}] for x {}",
                shape_str(key_padding_mask.shape()), dtype_name(key_padding_mask.dtype()), B, T_new,
                shape_str(x.shape()));
  // The new positions are past, ..., L − 1 of the cache: rotated as such, unless some position is
  // padding, when each sequence counts its own.
  const bool padded = cache.padded(key_padding_mask);
  const Tensor positions = padded ? cache.positions(B, T_new, key_padding_mask) : Tensor();
  auto rotated = [&](const Tensor& heads) { return padded ? rotate(heads, positions) : rotate(heads, past); };
  Tensor k_new = rotated(split_heads(project(x, 1), G)), v_new = split_heads(project(x, 2), G);  // (B, G, T_new, d_k)
  // Hidden new keys and values are zeroed, as forward zeroes them.
  const Tensor hidden = key_padding_mask.defined() ? key_padding_mask.reshape({B, 1, T_new, 1}) : Tensor();
  k_new = zero_hidden(k_new, hidden);
  v_new = zero_hidden(v_new, hidden);
  cache.key = past == 0 ? k_new.contiguous() : cat({cache.key, k_new}, 2);  // (B, G, L, d_k)
  cache.value = past == 0 ? v_new.contiguous() : cat({cache.value, v_new}, 2);
  if (padded) {
    const Tensor new_padding = key_padding_mask.defined() ? key_padding_mask : zeros({B, T_new}, kBool);
    const Tensor old_padding = cache.key_padding_mask.defined() || past == 0 ? cache.key_padding_mask : zeros({B, past}, kBool);
    cache.key_padding_mask = old_padding.defined() ? cat({old_padding, new_padding}, 1) : new_padding;  // (B, L)
  }
  F::AttentionOptions attend = attention_options();
  // One new position sees every cached key: no causal mask, unless a window or ALiBi needs positions.
  if (T_new > 1 || options.window() || options.alibi()) attend.is_causal(true).query_offset(past);
  if (padded) attend.attn_mask(merge_attention_masks(cache.key_padding_mask, {}, B, H, T_new, cache.length(), x.dtype()));
  AttentionOutput heads =
      F::scaled_dot_product_attention(rotated(split_heads(project(x, 0), H)), cache.key, cache.value, attend);
  return out_proj->forward(merge_heads(heads.output));  // (B, T_new, E)
}

Tensor MultiheadAttention::forward_step(const Tensor& query, const Tensor& memory, KVCache& cache,
                                        const Tensor& key_padding_mask) {
  const int64_t E = options.embed_dim(), H = options.num_heads(), G = options.num_kv_heads();
  Inputs in = prepare(query, memory, memory, key_padding_mask, E, options.kdim(), options.vdim());
  // A decoding step's queries have positions that this call does not know.
  CPPGRAD_CHECK(!options.rotary(), "MultiheadAttention::forward_step: rotary positions are for self-attention, not "
                                   "cached cross-attention over a memory");
  CPPGRAD_CHECK(!in.unbatched, "MultiheadAttention::forward_step: query {} must be batched (B, T, E)",
                shape_str(query.shape()));
  const int64_t B = in.query.size(0), T = in.query.size(1), S = in.key.size(1);
  if (cache.length() == 0) {
    cache.key = split_heads(project(in.key, 1), G).contiguous();  // (B, G, S, d_k), once
    cache.value = split_heads(project(in.value, 2), G).contiguous();
  }
  CPPGRAD_CHECK(cache.key.size(0) == B && cache.key.size(2) == S,
                "MultiheadAttention::forward_step: memory {} is not the one whose keys are cached {}",
                shape_str(memory.shape()), shape_str(cache.key.shape()));
  Tensor mask = merge_attention_masks(in.key_padding_mask, {}, B, H, T, S, in.query.dtype());
  AttentionOutput heads = F::scaled_dot_product_attention(split_heads(project(in.query, 0), H), cache.key,
                                                          cache.value, attention_options().attn_mask(mask));
  return out_proj->forward(merge_heads(heads.output));
}

// ---- PerHeadAttention -----------------------------------------------------------------------

PerHeadAttention::PerHeadAttention(int64_t embed_dim_, int64_t num_heads_, bool bias)
    : embed_dim(embed_dim_), num_heads(num_heads_), head_dim(num_heads_ > 0 ? embed_dim_ / num_heads_ : 0) {
  CPPGRAD_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0,
        "PerHeadAttention: embed_dim {} must be a positive multiple of num_heads {}", embed_dim, num_heads);
  q_heads = register_module("q_heads", std::make_shared<ModuleList<Linear>>());
  k_heads = register_module("k_heads", std::make_shared<ModuleList<Linear>>());
  v_heads = register_module("v_heads", std::make_shared<ModuleList<Linear>>());
  for (int64_t h = 0; h < num_heads; ++h) {
    q_heads->push_back(std::make_shared<Linear>(embed_dim, head_dim, bias));  // W_Q_h: (d_model, d_k)
    k_heads->push_back(std::make_shared<Linear>(embed_dim, head_dim, bias));
    v_heads->push_back(std::make_shared<Linear>(embed_dim, head_dim, bias));
  }
  out_proj = register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, bias));
}

AttentionOutput PerHeadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                          const AttentionArgs& args) {
  Inputs in = prepare(query, key, value, args.key_padding_mask, embed_dim, embed_dim, embed_dim);
  const int64_t B = in.query.size(0), T = in.query.size(1), S = in.key.size(1);
  Tensor mask = merge_attention_masks(in.key_padding_mask, args.attn_mask, B, num_heads, T, S, in.query.dtype());
  const Tensor hidden = hidden_keys(in.key_padding_mask);  // padded keys and values are zeroed, as in MultiheadAttention
  std::vector<Tensor> outputs, weights;
  for (int64_t h = 0; h < num_heads; ++h) {
    // head_h = Attention(Q W_Q_h, K W_K_h, V W_V_h): each reads the whole (B, T, E) input.
    Tensor q = (*q_heads)[h]->forward(in.query);                                     // (B, T, d_k)
    Tensor k = zero_hidden((*k_heads)[h]->forward(zero_hidden(in.key, hidden)), hidden);    // (B, S, d_k)
    Tensor v = zero_hidden((*v_heads)[h]->forward(zero_hidden(in.value, hidden)), hidden);  // (B, S, d_k)
    Tensor head_mask = mask.defined() ? mask.select(1, mask.size(1) == 1 ? 0 : h) : Tensor();  // (B, T or 1, S)
    AttentionOutput head = F::scaled_dot_product_attention(
        q, k, v, F::AttentionOptions().attn_mask(head_mask).is_causal(args.is_causal).need_weights(true));
    outputs.push_back(head.output);
    weights.push_back(head.weights);
  }
  Tensor concat = cat(outputs, -1);  // (B, T, h·d_k) = (B, T, E)
  AttentionOutput result{out_proj->forward(concat), args.need_weights ? stack(weights, 1) : Tensor()};
  return finish(result, args.need_weights, args.average_attn_weights, in.unbatched);
}

void PerHeadAttention::load_from(const MultiheadAttention& fused) {
  CPPGRAD_CHECK(fused.options.embed_dim() == embed_dim && fused.options.num_heads() == num_heads && fused.in_proj_weight.defined(),
        "PerHeadAttention::load_from: needs a fused MultiheadAttention({}, {})", embed_dim, num_heads);
  NoGradGuard no_grad;
  const ModuleList<Linear>* lists[3] = {q_heads.get(), k_heads.get(), v_heads.get()};
  for (int64_t part = 0; part < 3; ++part) {
    for (int64_t h = 0; h < num_heads; ++h) {
      const int64_t row = part * embed_dim + h * head_dim;
      const auto& linear = (*lists[part])[h];
      linear->weight.copy_(fused.in_proj_weight.narrow(0, row, head_dim));
      if (linear->bias.defined()) linear->bias.copy_(fused.in_proj_bias.narrow(0, row, head_dim));
    }
  }
  out_proj->weight.copy_(fused.out_proj->weight);
  if (out_proj->bias.defined()) out_proj->bias.copy_(fused.out_proj->bias);
}

Tensor PerHeadAttention::stacked(Parameter Linear::*member, bool gradients) const {
  std::vector<Tensor> rows;
  for (const auto* list : {q_heads.get(), k_heads.get(), v_heads.get()})
    for (const auto& linear : *list) rows.push_back(gradients ? ((*linear).*member).grad() : (*linear).*member);
  return cat(rows, 0);
}

}  // namespace cppgrad::nn
