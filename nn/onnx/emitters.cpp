// The ONNX form of each op a forward can run (opset 17), by the name the trace writes it down
// under (autograd/trace.h): the elementwise rows of tensor/op_tables.h, the views, the
// reductions, and the ops nn/ runs as one piece (layer_norm, attention). A module made of these
// ops exports with no code of its own.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "nn/onnx/emit.h"
#include "tensor/op_tables.h"

namespace cppgrad::onnx {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
using Axes = std::vector<int64_t>;

// An elementwise op of one ONNX op on every input, cast to the output's dtype.
Emitter elementwise(std::string onnx_op) {
  return [onnx_op](Emit& e) {
    std::vector<Value> inputs;
    for (size_t i = 0; i < e.in.size(); ++i) inputs.push_back(e.as(i, e.dtype()));
    return e.g.op(onnx_op, inputs);
  };
}

Value axes_input(Graph& g, const Axes& axes) { return g.ints(axes); }

// A bool mask as 0 / −inf in dtype, a float one cast: masks to be added (autograd::additive_mask).
Value additive(Graph& g, const Value& mask, DType dtype) {
  if (mask.dtype == kBool) return g.where(mask, g.scalar(kNegInf, dtype), g.scalar(0.0, dtype));
  return g.cast(mask, dtype);
}

// softmax over the last axis, a row whose every score is −inf giving zeros (as cppgrad's
// masked softmax and attention do) rather than ONNX's NaN.
Value softmax_hiding_rows(Graph& g, const Value& scores, DType dtype, bool may_hide_a_row) {
  Value weights = g.softmax(scores, -1);
  if (!may_hide_a_row) return weights;
  Value row_max = g.op("ReduceMax", {scores}, {{"axes", Axes{-1}}, {"keepdims", int64_t{1}}});
  Value hidden = g.op("IsInf", {row_max}, {{"detect_positive", int64_t{0}}}, kBool, scores.rank);
  return g.where(hidden, g.scalar(0.0, dtype), weights);
}

// The scalar x.size(axis), as `dtype`.
Value length(Graph& g, const Value& x, int64_t axis, DType dtype) {
  return g.cast(g.reshape(g.size(x, axis), {}), dtype);
}

// How far query i stands after key j, (T, S) in dtype: (offset + i) − j, T and S scalars.
Value distance(Graph& g, const Value& T, const Value& S, int64_t query_offset, DType dtype) {
  const double offset = static_cast<double>(query_offset);
  Value rows = g.op("Range", {g.scalar(offset, dtype), g.add(T, g.scalar(offset, dtype)), g.scalar(1.0, dtype)}, {}, dtype, 1);
  Value cols = g.op("Range", {g.scalar(0.0, dtype), S, g.scalar(1.0, dtype)}, {}, dtype, 1);
  return g.sub(g.unsqueeze(rows, {1}), g.unsqueeze(cols, {0}));  // (T, 1) − (1, S)
}

// The reductions' axes and keepdim (ONNX 17: ReduceSum takes its axes as an input, the others as an attribute).
Value reduce(Emit& e, const std::string& onnx_op) {
  const Axes& axes = e.op.ints("dims");
  const int64_t keepdim = e.op.integer("keepdim");
  if (onnx_op == "ReduceSum") return e.g.op(onnx_op, {e.in[0], axes_input(e.g, axes)}, {{"keepdims", keepdim}});
  return e.g.op(onnx_op, {e.in[0]}, {{"axes", axes}, {"keepdims", keepdim}});
}

// softmax(scale · q·kᵀ + mask + positions) · v, q (B, h, T, d), k and v (B, g, S, ·).
Value attention(Emit& e) {
  Graph& g = e.g;
  const DType t = e.dtype();
  const Tensor &q = e.op.inputs[0], &k = e.op.inputs[1];
  CPPGRAD_CHECK(q.dim() == 4 && k.dim() == 4, "onnx export: scaled_dot_product_attention: q {} and k {} must be "
                "(B, heads, length, d)", shape_str(q.shape()), shape_str(k.shape()));
  const int64_t heads = q.size(1), kv_heads = k.size(1);
  // Key/value head j serves query heads j·r ... j·r + r − 1 (grouped-query heads): (B, g, S, d) -> (B, g·r, S, d)
  auto repeat = [&](const Value& x, int64_t d) {
    if (heads == kv_heads) return x;
    Value expanded = g.op("Expand", {g.unsqueeze(x, {2}), g.ints({1, 1, heads / kv_heads, 1, 1})}, {}, std::nullopt, 5);
    return g.reshape(expanded, {0, heads, -1, d});
  };
  Value keys = repeat(e.in[1], k.size(3)), values = repeat(e.in[2], e.op.inputs[2].size(3));
  Value scores = g.mul(g.matmul(e.in[0], g.transpose(keys, {0, 1, 3, 2})), e.scalar(e.op.number("scale")));
  const bool masked = e.in[3].defined();
  if (masked) scores = g.add(scores, additive(g, e.in[3], t));
  const bool causal = e.op.integer("is_causal") != 0;
  const Tensor slopes = e.op.tensor("alibi_slopes");
  if (causal || e.op.has("window") || slopes.defined()) {
    Value dist = distance(g, length(g, e.in[0], -2, t), length(g, e.in[1], -2, t), e.op.integer("query_offset"), t);
    Value bias = g.scalar(0.0, t);
    if (causal) bias = g.where(g.op("Less", {dist, g.scalar(0.0, t)}, {}, kBool, 2), g.scalar(kNegInf, t), bias);
    if (e.op.has("window")) {
      Value outside = g.op("GreaterOrEqual", {g.unary("Abs", dist), e.scalar(static_cast<double>(e.op.integer("window")))},
                           {}, kBool, 2);
      bias = g.where(outside, g.scalar(kNegInf, t), bias);
    }
    if (slopes.defined())  // −slope_h · |i − j|: (h, 1, 1) · (T, S) -> (h, T, S)
      bias = g.sub(bias, g.mul(g.constant(slopes.to(t).reshape({heads, 1, 1})), g.unary("Abs", dist)));
    scores = g.add(scores, bias);
  }
  return g.matmul(softmax_hiding_rows(g, scores, t, masked), values);
}

// einsum as ONNX's Einsum, its equation spelt from the trace's labels (each operand's dims, "..."
// expanded, and the output's): a letter stays itself, a dim under "..." takes a letter the
// equation does not use. ONNX's Einsum does not broadcast a size-1 dim against a named one, as
// cppgrad's does: such a dim is refused.
Value einsum(Emit& e) {
  const size_t n = e.op.inputs.size();
  std::vector<Axes> terms;
  for (size_t i = 0; i < n; ++i) terms.push_back(e.op.ints(fmt::format("labels_{}", i)));
  const Axes& output = e.op.ints("output");
  constexpr int64_t kLetters = 52;  // 'A'-'Z' then 'a'-'z'; 52 and on: dims under "..."
  auto letter = [](int64_t label) { return static_cast<char>(label < 26 ? 'A' + label : 'a' + (label - 26)); };
  std::map<int64_t, char> spelling;
  std::map<int64_t, std::pair<int64_t, int64_t>> sizes;  // label -> its largest size at both traces
  for (size_t i = 0; i < n; ++i)
    for (size_t d = 0; d < terms[i].size(); ++d) {
      const int64_t l = terms[i][d];
      if (l < kLetters) spelling[l] = letter(l);
      auto& s = sizes[l];
      s = {std::max(s.first, e.op.inputs[i].size(static_cast<int64_t>(d))),
           std::max(s.second, e.other.inputs[i].size(static_cast<int64_t>(d)))};
    }
  int64_t free = 0;
  for (const auto& entry : sizes) {
    if (entry.first < kLetters) continue;
    while (std::any_of(spelling.begin(), spelling.end(), [&](const auto& s) { return s.second == letter(free); }))
      ++free;
    CPPGRAD_CHECK(free < kLetters, "onnx export: einsum: more than 52 indices");
    spelling[entry.first] = letter(free++);
  }
  std::string equation;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) equation += ',';
    for (size_t d = 0; d < terms[i].size(); ++d) {
      const int64_t l = terms[i][d];
      const bool broadcasts = e.op.inputs[i].size(static_cast<int64_t>(d)) != sizes[l].first ||
                              e.other.inputs[i].size(static_cast<int64_t>(d)) != sizes[l].second;
      CPPGRAD_CHECK(!broadcasts, "onnx export: einsum: dim {} of operand {} {} broadcasts (size 1) against index {}, "
                    "which ONNX's Einsum does not do", d, i, shape_str(e.op.inputs[i].shape()), spelling[l]);
      equation += spelling[l];
    }
  }
  equation += "->";
  for (int64_t l : output) equation += spelling[l];
  return e.g.op("Einsum", e.in, {{"equation", equation}}, e.dtype(), e.rank());
}

const std::map<std::string, Emitter>& emitters() {
  static const std::map<std::string, Emitter> table = {
      // ---- the elementwise rows of tensor/op_tables.h ------------------------------------------
      {"neg", elementwise("Neg")},
      {"abs", elementwise("Abs")},
      {"sign", elementwise("Sign")},
      {"exp", elementwise("Exp")},
      {"log", elementwise("Log")},
      {"sqrt", elementwise("Sqrt")},
      {"rsqrt", [](Emit& e) { return e.g.unary("Reciprocal", e.g.unary("Sqrt", e.in[0])); }},
      {"tanh", elementwise("Tanh")},
      {"sigmoid", elementwise("Sigmoid")},
      {"silu", [](Emit& e) { return e.g.mul(e.in[0], e.g.unary("Sigmoid", e.in[0])); }},  // x·σ(x)
      {"relu", elementwise("Relu")},
      {"erf", elementwise("Erf")},
      {"sin", elementwise("Sin")},
      {"cos", elementwise("Cos")},
      {"gelu",  // x·Φ(x) = ½x(1 + erf(x/√2)); opset 17 has no Gelu
       [](Emit& e) {
         Value erf = e.g.unary("Erf", e.g.mul(e.in[0], e.scalar(op_constants::sqrt_half)));
         return e.g.mul(e.g.mul(e.in[0], e.scalar(0.5)), e.g.add(erf, e.scalar(1.0)));
       }},
      {"gelu_tanh",  // ½x(1 + tanh(k(x + c·x³)))
       [](Emit& e) {
         const Value& x = e.in[0];
         Value inner = e.g.mul(e.g.add(x, e.g.mul(e.g.mul(e.g.mul(x, x), x), e.scalar(op_constants::gelu_c))),
                               e.scalar(op_constants::gelu_k));
         return e.g.mul(e.g.mul(x, e.scalar(0.5)), e.g.add(e.g.unary("Tanh", inner), e.scalar(1.0)));
       }},
      {"add", elementwise("Add")},
      {"sub", elementwise("Sub")},
      {"mul", elementwise("Mul")},
      {"div", elementwise("Div")},
      {"maximum", elementwise("Max")},
      {"minimum", elementwise("Min")},
      {"pow", [](Emit& e) { return e.g.op("Pow", {e.in[0], e.scalar(e.op.number("exponent"))}); }},
      {"clamp",
       [](Emit& e) {
         return e.g.op("Clip", {e.in[0], e.op.has("min") ? e.scalar(e.op.number("min")) : Value(),
                                e.op.has("max") ? e.scalar(e.op.number("max")) : Value()});
       }},
      {"where", [](Emit& e) { return e.g.where(e.in[0], e.as(1, e.dtype()), e.as(2, e.dtype())); }},
      {"masked_fill", [](Emit& e) { return e.g.where(e.in[1], e.scalar(e.op.number("value")), e.in[0]); }},
      {"to", [](Emit& e) { return e.g.cast(e.in[0], e.dtype()); }},
      {"contiguous", elementwise("Identity")},
      {"clone", elementwise("Identity")},
      // ---- products --------------------------------------------------------------------------
      {"matmul", elementwise("MatMul")},
      {"einsum", einsum},
      {"linear",  // x·Wᵀ + b
       [](Emit& e) {
         Value y = e.g.matmul(e.in[0], e.g.transpose(e.in[1], {1, 0}));
         return e.in[2].defined() ? e.g.add(y, e.in[2]) : y;
       }},
      // ---- views: the output's shape, its changing sizes read from the graph ----------------------
      {"view", [](Emit& e) { return e.g.op("Reshape", {e.in[0], e.reshape_target()}); }},
      {"reshape", [](Emit& e) { return e.g.op("Reshape", {e.in[0], e.reshape_target()}); }},
      {"squeeze", [](Emit& e) { return e.g.op("Reshape", {e.in[0], e.reshape_target()}); }},
      {"unsqueeze", [](Emit& e) { return e.g.op("Reshape", {e.in[0], e.reshape_target()}); }},
      {"expand", [](Emit& e) { return e.g.op("Expand", {e.in[0], e.expand_target()}); }},
      {"transpose",
       [](Emit& e) {
         const int64_t n = e.rank();
         Axes perm(static_cast<size_t>(n));
         for (int64_t i = 0; i < n; ++i) perm[i] = i;
         const Axes& dims = e.op.ints("dims");
         if (n > 0) std::swap(perm[wrap_dim(dims[0], n, "transpose")], perm[wrap_dim(dims[1], n, "transpose")]);
         return e.g.transpose(e.in[0], perm);
       }},
      {"permute", [](Emit& e) { return e.g.transpose(e.in[0], wrap_dims(e.op.ints("dims"), e.rank(), "permute")); }},
      {"slice",  // positions start, start + step, ... of dim: as many as the output holds
       [](Emit& e) {
         const int64_t dim = e.op.integer("dim"), start = e.op.integer("start"), step = e.op.integer("step");
         const int64_t n = e.op.output.size(dim), n_other = e.other.output.size(dim);
         Value end;
         if (auto count = e.size(n, n_other)) {
           end = e.g.add(e.g.mul(*count, e.g.ints({step})), e.g.ints({start}));
         } else {
           const Tensor &x = e.op.inputs[0], &x_other = e.other.inputs[0];
           CPPGRAD_CHECK(step == 1 && n == x.size(dim) - start && n_other == x_other.size(dim) - start,
                         "onnx export: slice of dim {} of {}: its length {} depends on sizes the graph does not hold",
                         dim, shape_str(x.shape()), n);
           end = e.g.ints({std::numeric_limits<int64_t>::max()});  // to the end, whatever its size
         }
         return e.g.op("Slice", {e.in[0], e.g.ints({start}), end, e.g.ints({dim}), e.g.ints({step})});
       }},
      {"select",  // a 0-d index drops the dim
       [](Emit& e) {
         Value index = e.g.constant(full({}, static_cast<double>(e.op.integer("index")), kInt64));
         return e.g.op("Gather", {e.in[0], index}, {{"axis", e.op.integer("dim")}});
       }},
      {"cat", [](Emit& e) { return e.g.concat(e.in, e.op.integer("dim")); }},
      {"index_select", [](Emit& e) { return e.g.op("Gather", {e.in[0], e.in[1]}, {{"axis", e.op.integer("dim")}}); }},
      {"gather", [](Emit& e) { return e.g.op("GatherElements", {e.in[0], e.in[1]}, {{"axis", e.op.integer("dim")}}); }},
      // ---- reductions --------------------------------------------------------------------------
      {"sum", [](Emit& e) { return reduce(e, "ReduceSum"); }},
      {"mean", [](Emit& e) { return reduce(e, "ReduceMean"); }},
      {"softmax", [](Emit& e) { return e.g.softmax(e.in[0], e.op.integer("dim")); }},
      {"log_softmax", [](Emit& e) { return e.g.op("LogSoftmax", {e.in[0]}, {{"axis", e.op.integer("dim")}}); }},
      // ---- nn/'s ops, each one piece -------------------------------------------------------------
      {"embedding", [](Emit& e) { return e.g.op("Gather", {e.in[1], e.in[0]}, {{"axis", int64_t{0}}}, e.dtype()); }},
      {"layer_norm",
       [](Emit& e) {
         const int64_t k = e.op.integer("normalized_dims");
         // ONNX's LayerNormalization needs a scale: ones when the layer has none.
         const Shape row(e.out_shape().end() - k, e.out_shape().end());
         Value scale = e.in[1].defined() ? e.in[1] : e.g.constant(ones(row, e.dtype()));
         std::vector<Value> inputs = {e.in[0], scale};
         if (e.in[2].defined()) inputs.push_back(e.in[2]);
         return e.g.op("LayerNormalization", inputs, {{"axis", -k}, {"epsilon", e.op.number("eps")}});
       }},
      {"rms_norm",  // x / √(mean(x²) + eps) ⊙ weight
       [](Emit& e) {
         const int64_t k = e.op.integer("normalized_dims");
         Axes axes;
         for (int64_t i = -k; i < 0; ++i) axes.push_back(i);
         const Value& x = e.in[0];
         Value mean_square = e.g.op("ReduceMean", {e.g.mul(x, x)}, {{"axes", axes}, {"keepdims", int64_t{1}}});
         Value y = e.g.div(x, e.g.unary("Sqrt", e.g.add(mean_square, e.scalar(e.op.number("eps")))));
         return e.in[1].defined() ? e.g.mul(y, e.in[1]) : y;
       }},
      {"additive_mask", [](Emit& e) { return additive(e.g, e.in[0], e.dtype()); }},
      {"masked_softmax",  // softmax(scale·scores + mask), causal hiding key j > query i
       [](Emit& e) {
         Value z = e.g.mul(e.in[0], e.scalar(e.op.number("scale")));
         if (e.op.integer("is_causal") != 0) {
           Value future = e.g.op("Less", {distance(e.g, length(e.g, e.in[0], -2, e.dtype()), length(e.g, e.in[0], -1, e.dtype()), 0, e.dtype()), e.scalar(0.0)}, {}, kBool, 2);
           z = e.g.where(future, e.scalar(kNegInf), z);
         }
         if (e.in[1].defined()) z = e.g.add(z, additive(e.g, e.in[1], e.dtype()));
         return softmax_hiding_rows(e.g, z, e.dtype(), e.in[1].defined());
       }},
      {"rotary_angles",  // positions m = offset .. offset + T − 1 times θ_i = base^(−2i/d): (T, d/2), float64
       [](Emit& e) {
         const int64_t dim = e.op.integer("dim");
         const double offset = static_cast<double>(e.op.integer("position_offset"));
         Tensor theta = (arange(static_cast<double>(dim / 2), kFloat64) *
                         (-2.0 * std::log(e.op.number("base")) / static_cast<double>(dim)))
                            .exp()
                            .reshape({1, dim / 2});
         auto count = e.size(e.out_shape()[0], e.other.output.size(0));
         CPPGRAD_CHECK(count.has_value(), "onnx export: rotary_angles: the length {} is no size of the graph's inputs",
                       e.out_shape()[0]);
         Value end = e.g.add(e.g.cast(e.g.reshape(*count, {}), kFloat64), e.g.scalar(offset, kFloat64));
         Value m = e.g.op("Range", {e.g.scalar(offset, kFloat64), end, e.g.scalar(1.0, kFloat64)}, {}, kFloat64, 1);
         return e.g.mul(e.g.unsqueeze(m, {1}), e.g.constant(theta));
       }},
      {"arange",  // start, start + step, ...: as many as the output holds
       [](Emit& e) {
         auto count = e.size(e.out_shape()[0], e.other.output.size(0));
         CPPGRAD_CHECK(count.has_value(), "onnx export: arange: its length {} is no size of the graph's inputs",
                       e.out_shape()[0]);
         const double start = e.op.number("start"), step = e.op.number("step");
         Value n = e.g.cast(e.g.reshape(*count, {}), e.dtype());
         Value end = e.g.add(e.g.mul(n, e.scalar(step)), e.scalar(start));
         return e.g.op("Range", {e.scalar(start), end, e.scalar(step)}, {}, e.dtype(), 1);
       }},
      {"scaled_dot_product_attention", attention},
  };
  return table;
}

}  // namespace

const Emitter* find_emitter(const std::string& op) {
  auto it = emitters().find(op);
  return it == emitters().end() ? nullptr : &it->second;
}

bool reads_arguments(const std::string& op) {
  static const std::set<std::string> ops = {
      "pow", "clamp", "masked_fill", "transpose", "permute", "slice", "select", "cat", "index_select", "gather", "sum",
      "mean", "softmax", "log_softmax", "layer_norm", "rms_norm", "masked_softmax", "rotary_angles", "arange",
      "scaled_dot_product_attention", "einsum"};
  return ops.count(op) != 0;
}

std::optional<Value> Emit::size(int64_t a, int64_t b) {
  if (a == b) return g.ints({a});
  for (const TracedInput& input : graph_inputs_)
    for (size_t axis = 0; axis < input.example.size(); ++axis)
      if (input.example[axis] == a && input.other[axis] == b) return g.size(input.value, static_cast<int64_t>(axis));
  return std::nullopt;
}

Value Emit::reshape_target() {
  const Shape &a = op.output.shape(), &b = other.output.shape();
  const Shape &in_a = op.inputs[0].shape(), &in_b = other.inputs[0].shape();
  std::vector<Value> dims;
  bool rest_used = false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (auto known = size(a[i], b[i])) {
      dims.push_back(*known);
    } else if (i < in_a.size() && in_a[i] == a[i] && in_b[i] == b[i]) {
      dims.push_back(g.ints({0}));  // Reshape's 0: that dim of the input
    } else {
      CPPGRAD_CHECK(!rest_used, "onnx export: {} to {}: two of its sizes depend on sizes the graph does not hold",
                    op.op, shape_str(a));
      rest_used = true;
      dims.push_back(g.ints({-1}));
    }
  }
  if (dims.empty()) return g.ints({});
  return dims.size() == 1 ? dims[0] : g.concat(dims, 0);
}

Value Emit::expand_target() {
  const Shape &a = op.output.shape(), &b = other.output.shape();
  const Shape &in_a = op.inputs[0].shape(), &in_b = other.inputs[0].shape();
  std::vector<Value> dims;
  const size_t lead = a.size() - in_a.size();
  for (size_t i = 0; i < a.size(); ++i) {
    if (auto known = size(a[i], b[i])) {
      dims.push_back(*known);
    } else {
      CPPGRAD_CHECK(i >= lead && in_a[i - lead] == a[i] && in_b[i - lead] == b[i],
                    "onnx export: expand to {}: dim {} depends on sizes the graph does not hold", shape_str(a), i);
      dims.push_back(g.ints({1}));  // broadcast: the input's own size
    }
  }
  return dims.size() == 1 ? dims[0] : g.concat(dims, 0);
}

std::vector<std::string> ops_without_onnx_form() {
  std::vector<std::string> missing;
#define CPPGRAD_ONNX_ROW_NAME(name, ...) \
  if (find_emitter(#name) == nullptr) missing.push_back(#name);
  CPPGRAD_UNARY_OPS(CPPGRAD_ONNX_ROW_NAME)
  CPPGRAD_BINARY_OPS(CPPGRAD_ONNX_ROW_NAME)
#undef CPPGRAD_ONNX_ROW_NAME
  return missing;
}

}  // namespace cppgrad::onnx
