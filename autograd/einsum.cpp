#include "autograd/einsum.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>

#include "autograd/trace.h"
#include "tensor/kernels.h"

namespace cppgrad {

namespace {

// A dim's name: 0-25 for 'A'-'Z', 26-51 for 'a'-'z' (so an implicit output sorts as PyTorch's
// does, capitals first), 52 + i for the i-th dim under "..." counted from the left of the widest.
using Label = int;
constexpr Label kEllipsis = -1;  // "..." in a parsed term, before it is expanded to labels
constexpr Label kFirstEllipsisDim = 52;

char letter_of(Label label) { return static_cast<char>(label < 26 ? 'A' + label : 'a' + (label - 26)); }

std::string label_name(Label label) {
  return label >= kFirstEllipsisDim ? "'...'" : std::string(1, letter_of(label));
}

struct Equation {
  std::string text;
  std::vector<std::vector<Label>> inputs;  // with kEllipsis where "..." stands
  std::optional<std::vector<Label>> output;
};

// "[2,3] and [4,5]", "[2], [3] and [4]"
std::string shapes_str(const std::vector<Tensor>& operands) {
  std::string out;
  for (size_t i = 0; i < operands.size(); ++i) {
    if (i > 0) out += i + 1 == operands.size() ? " and " : ", ";
    out += shape_str(operands[i].shape());
  }
  return out;
}

// One term: letters, spaces (ignored) and at most one "...".
std::vector<Label> parse_term(std::string_view term, const std::string& equation) {
  std::vector<Label> labels;
  for (size_t i = 0; i < term.size(); ++i) {
    const char c = term[i];
    if (c == ' ') continue;
    if (c == '.') {
      CPPGRAD_CHECK(term.substr(i, 3) == "..." &&
                        std::find(labels.begin(), labels.end(), kEllipsis) == labels.end(),
                    "einsum: '{}': a '.' that is not part of one '...' per term", equation);
      labels.push_back(kEllipsis);
      i += 2;
    } else if (c >= 'A' && c <= 'Z') {
      labels.push_back(c - 'A');
    } else if (c >= 'a' && c <= 'z') {
      labels.push_back(26 + (c - 'a'));
    } else {
      throw Error(fmt::format("einsum: '{}': {} is not a subscript (letters a-z and A-Z, '...', ',' and '->')",
                              equation, excerpt(std::string(1, c))));
    }
  }
  return labels;
}

Equation parse(std::string_view text) {
  Equation eq{std::string(text), {}, std::nullopt};
  const size_t arrow = text.find("->");
  std::string_view lhs = text.substr(0, arrow);
  CPPGRAD_CHECK(lhs.find('-') == std::string_view::npos && lhs.find('>') == std::string_view::npos &&
                    (arrow == std::string_view::npos || text.find("->", arrow + 2) == std::string_view::npos),
                "einsum: '{}': one '->' at most, between the operands' subscripts and the output's", eq.text);
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    eq.inputs.push_back(parse_term(lhs.substr(start, comma - start), eq.text));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (arrow != std::string_view::npos) {
    std::string_view rhs = text.substr(arrow + 2);
    CPPGRAD_CHECK(rhs.find(',') == std::string_view::npos, "einsum: '{}': the output is one term", eq.text);
    eq.output = parse_term(rhs, eq.text);
  }
  return eq;
}

// An operand on its way through the contraction: the tensor and the label of each of its dims.
struct Term {
  Tensor t;
  std::vector<Label> labels;
};

bool contains(const std::vector<Label>& labels, Label l) { return std::find(labels.begin(), labels.end(), l) != labels.end(); }

// t with its dims in the order of `wanted` (a permutation of its labels), a view.
Term permuted(const Term& term, const std::vector<Label>& wanted) {
  std::vector<int64_t> order;
  for (Label l : wanted)
    order.push_back(std::find(term.labels.begin(), term.labels.end(), l) - term.labels.begin());
  std::vector<int64_t> identity(order.size());
  std::iota(identity.begin(), identity.end(), 0);
  return {order == identity ? term.t : term.t.permute(order), wanted};
}

// Sums a term over every label not in `keep`.
Term summed_to(const Term& term, const std::vector<Label>& keep) {
  std::vector<int64_t> dims;
  std::vector<Label> kept;
  for (size_t d = 0; d < term.labels.size(); ++d) {
    if (contains(keep, term.labels[d]))
      kept.push_back(term.labels[d]);
    else
      dims.push_back(static_cast<int64_t>(d));
  }
  if (dims.empty()) return term;
  return {term.t.sum(dims), kept};
}

// The diagonal of a label repeated within a term: x[..., i, ..., i, ...] for each i, one dim.
Term diagonals(Term term) {
  for (size_t second = 1; second < term.labels.size(); ++second) {
    const auto first = std::find(term.labels.begin(), term.labels.begin() + static_cast<int64_t>(second),
                                 term.labels[second]);
    if (first == term.labels.begin() + static_cast<int64_t>(second)) continue;
    const auto d1 = first - term.labels.begin(), d2 = static_cast<int64_t>(second);
    const int64_t n = term.t.size(d1);
    // x ⊙ I (over dims d1, d2), summed over d2: the diagonal, with a gradient that lands on it alone.
    Shape eye_shape(static_cast<size_t>(term.t.dim()), 1);
    eye_shape[static_cast<size_t>(d1)] = eye_shape[static_cast<size_t>(d2)] = n;
    term.t = (term.t * eye(n, term.t.dtype()).reshape(eye_shape)).sum(std::vector<int64_t>{d2});
    term.labels.erase(term.labels.begin() + d2);
    --second;
  }
  return term;
}

int64_t product(const std::vector<Label>& labels, const std::map<Label, int64_t>& size) {
  int64_t n = 1;
  for (Label l : labels) n *= size.at(l);
  return n;
}

// A ⋅ B summed over the labels both have and `keep` has not, as one batched matmul:
//   A (batch, rows, summed) @ B (batch, summed, columns) -> (batch, rows, columns)
Term contract(const Term& a_in, const Term& b_in, const std::vector<Label>& keep, const std::map<Label, int64_t>& size) {
  Term a = a_in, b = b_in;
  std::vector<Label> batch, summed, rows, columns;
  for (Label l : a.labels) {
    if (contains(b.labels, l))
      (contains(keep, l) ? batch : summed).push_back(l);
    else
      rows.push_back(l);
  }
  for (Label l : b.labels)
    if (!contains(a.labels, l)) columns.push_back(l);
  auto concat = [](std::vector<Label> x, const std::vector<Label>& y, const std::vector<Label>& z) {
    x.insert(x.end(), y.begin(), y.end());
    x.insert(x.end(), z.begin(), z.end());
    return x;
  };
  const int64_t nb = product(batch, size), nr = product(rows, size), ns = product(summed, size),
                nc = product(columns, size);
  Tensor lhs = permuted(a, concat(batch, rows, summed)).t.reshape({nb, nr, ns});     // (batch, rows, summed)
  Tensor rhs = permuted(b, concat(batch, summed, columns)).t.reshape({nb, ns, nc});  // (batch, summed, columns)
  std::vector<Label> labels = concat(batch, rows, columns);
  Shape shape;
  for (Label l : labels) shape.push_back(size.at(l));
  return {lhs.matmul(rhs).reshape(shape), labels};  // (batch, rows, columns) -> their own dims
}

}  // namespace

Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands) {
  const Equation eq = parse(equation);
  const auto where = [&] { return fmt::format("einsum: '{}' with {}", eq.text, shapes_str(operands)); };
  // Its permutes and reshapes are made for these sizes: a trace writes einsum down as one op, each
  // operand's dims and the output's named by labels, which ONNX's Einsum replays at any size.
  autograd::TraceScope trace;
  CPPGRAD_CHECK(eq.inputs.size() == operands.size(), "{}: the equation names {} operand(s), {} given", where(),
                eq.inputs.size(), operands.size());
  for (size_t i = 0; i < operands.size(); ++i) {
    CPPGRAD_CHECK(operands[i].defined(), "einsum: '{}': operand {} is an undefined tensor", eq.text, i);
    CPPGRAD_CHECK(operands[i].is_floating_point() && operands[i].dtype() == operands[0].dtype(),
                  "{}: the operands must share one floating dtype, got {} and {}", where(),
                  dtype_name(operands[0].dtype()), dtype_name(operands[i].dtype()));
  }

  // "..." becomes labels: the widest stands for `ellipsis_dims` dims, the others for their last ones.
  int64_t ellipsis_dims = 0;
  std::vector<int64_t> own_ellipsis(operands.size(), 0);
  for (size_t i = 0; i < operands.size(); ++i) {
    const auto letters = static_cast<int64_t>(std::count_if(eq.inputs[i].begin(), eq.inputs[i].end(),
                                                            [](Label l) { return l != kEllipsis; }));
    const bool has_ellipsis = contains(eq.inputs[i], kEllipsis);
    CPPGRAD_CHECK(has_ellipsis ? operands[i].dim() >= letters : operands[i].dim() == letters,
                  "{}: operand {} has {} dims, its subscripts name {}{}", where(), i, operands[i].dim(), letters,
                  has_ellipsis ? " and '...'" : "");
    own_ellipsis[i] = operands[i].dim() - letters;
    ellipsis_dims = std::max(ellipsis_dims, own_ellipsis[i]);
  }
  auto expand_ellipsis = [&](const std::vector<Label>& raw, int64_t count) {
    std::vector<Label> labels;
    for (Label l : raw) {
      if (l != kEllipsis) {
        labels.push_back(l);
        continue;
      }
      for (int64_t j = ellipsis_dims - count; j < ellipsis_dims; ++j) labels.push_back(kFirstEllipsisDim + static_cast<Label>(j));
    }
    return labels;
  };

  // Every label's size; a size of 1 broadcasts.
  std::vector<Term> terms;
  std::vector<std::vector<Label>> labels;  // each operand's, "..." expanded: what a trace notes
  std::map<Label, int64_t> size;
  std::map<Label, int> uses;
  for (size_t i = 0; i < operands.size(); ++i) {
    Term term{operands[i], expand_ellipsis(eq.inputs[i], own_ellipsis[i])};
    for (size_t d = 0; d < term.labels.size(); ++d) {
      const Label l = term.labels[d];
      const int64_t n = operands[i].size(static_cast<int64_t>(d));
      ++uses[l];
      auto [it, fresh] = size.emplace(l, n);
      if (fresh || n == it->second || n == 1) continue;
      CPPGRAD_CHECK(it->second == 1, "{}: index {} has sizes {} and {}", where(), label_name(l), it->second, n);
      it->second = n;
    }
    labels.push_back(term.labels);
    terms.push_back(std::move(term));
  }

  std::vector<Label> output;
  if (eq.output) {
    output = expand_ellipsis(*eq.output, contains(*eq.output, kEllipsis) ? ellipsis_dims : 0);
    for (size_t k = 0; k < output.size(); ++k) {
      CPPGRAD_CHECK(size.count(output[k]), "{}: output index {} is in no operand", where(), label_name(output[k]));
      CPPGRAD_CHECK(std::find(output.begin(), output.begin() + static_cast<int64_t>(k), output[k]) ==
                        output.begin() + static_cast<int64_t>(k),
                    "{}: output index {} appears twice", where(), label_name(output[k]));
    }
  } else {  // implicit: the dims under "...", then every letter used once, in order
    for (int64_t j = 0; j < ellipsis_dims; ++j) output.push_back(kFirstEllipsisDim + static_cast<Label>(j));
    for (const auto& [l, count] : uses)
      if (l < kFirstEllipsisDim && count == 1) output.push_back(l);
  }

  // Each operand alone: its diagonals, its size-1 dims broadcast, and the sums over the labels
  // that no other operand and not the output has.
  for (size_t i = 0; i < terms.size(); ++i) {
    Term& term = terms[i];
    for (size_t d = 0; d < term.labels.size(); ++d)
      for (size_t e = d + 1; e < term.labels.size(); ++e)
        CPPGRAD_CHECK(term.labels[d] != term.labels[e] || term.t.size(static_cast<int64_t>(d)) == term.t.size(static_cast<int64_t>(e)),
                      "{}: index {} repeats in operand {} with sizes {} and {}", where(), label_name(term.labels[d]), i,
                      term.t.size(static_cast<int64_t>(d)), term.t.size(static_cast<int64_t>(e)));
    term = diagonals(term);
    Shape full;
    for (Label l : term.labels) full.push_back(size.at(l));
    if (full != term.t.shape()) term.t = term.t.expand(full);
    std::vector<Label> needed = output;
    for (size_t j = 0; j < terms.size(); ++j)
      if (j != i) needed.insert(needed.end(), terms[j].labels.begin(), terms[j].labels.end());
    term = summed_to(term, needed);
  }

  // Left to right, each pair one batched matmul, keeping what the output or a later operand needs.
  Term result = terms[0];
  for (size_t i = 1; i < terms.size(); ++i) {
    std::vector<Label> keep = output;
    for (size_t j = i + 1; j < terms.size(); ++j) keep.insert(keep.end(), terms[j].labels.begin(), terms[j].labels.end());
    std::vector<Label> needed = keep;  // and what B has: summed by the matmul
    needed.insert(needed.end(), terms[i].labels.begin(), terms[i].labels.end());
    result = contract(summed_to(result, needed), terms[i], keep, size);
  }
  result = summed_to(result, output);
  return trace.note(permuted(result, output).t, [&] {
    std::vector<autograd::TraceArg> args;
    for (size_t i = 0; i < operands.size(); ++i)
      args.push_back({fmt::format("labels_{}", i), std::vector<int64_t>(labels[i].begin(), labels[i].end())});
    args.push_back({"output", std::vector<int64_t>(output.begin(), output.end())});
    return autograd::TracedOp("einsum", operands, std::move(args));
  });
}

}  // namespace cppgrad
