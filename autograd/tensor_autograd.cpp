// The Tensor methods that read or change autograd state (declared in tensor/tensor.h).
#include "autograd/node.h"
#include "tensor/kernels.h"

namespace cppgrad {

using autograd::AutogradMeta;

namespace {
AutogradMeta& ensure_meta(const Tensor& t) {
  auto& meta = t.impl()->autograd;
  if (!meta) meta = std::make_shared<AutogradMeta>();
  return *meta;
}
AutogradMeta* meta_or_null(const Tensor& t) { return t.impl()->autograd.get(); }
}  // namespace

bool Tensor::requires_grad() const {
  auto* m = meta_or_null(*this);
  return m != nullptr && m->requires_grad;
}

Tensor& Tensor::requires_grad_(bool enabled) {
  CPPGRAD_CHECK(is_leaf() || enabled, "requires_grad_: cannot turn off requires_grad of a non-leaf tensor; use detach()");
  CPPGRAD_CHECK(!enabled || is_floating_point(), "requires_grad_: only floating tensors can require grad, got {}",
        dtype_name(dtype()));
  ensure_meta(*this).requires_grad = enabled;
  return *this;
}

Tensor Tensor::grad() const {
  auto* m = meta_or_null(*this);
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) const {
  CPPGRAD_CHECK(!g.defined() || g.shape() == shape(), "set_grad: gradient of shape {} for a tensor of shape {}",
        g.defined() ? shape_str(g.shape()) : "undefined", shape_str(shape()));
  CPPGRAD_CHECK(!g.defined() || g.dtype() == dtype(), "set_grad: gradient of dtype {} for a tensor of dtype {}",
        dtype_name(g.dtype()), dtype_name(dtype()));
  ensure_meta(*this).grad = g;
}

void Tensor::zero_grad(bool set_to_none) const {
  auto* m = meta_or_null(*this);
  if (!m || !m->grad.defined()) return;
  if (set_to_none)
    m->grad = Tensor();
  else
    kernels::fill_(m->grad, 0.0);
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  auto* m = meta_or_null(*this);
  return m ? m->grad_fn : nullptr;
}

bool Tensor::is_leaf() const { return grad_fn() == nullptr; }

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::backward({*this}, gradient.defined() ? std::vector<Tensor>{gradient} : std::vector<Tensor>{},
                     retain_graph, create_graph);
}

Tensor Tensor::detach() const { return kernels::alias(*this); }

void Tensor::retain_grad() const {
  CPPGRAD_CHECK(requires_grad(), "retain_grad: the tensor does not require grad");
  if (is_leaf()) return;  // leaves keep their grad anyway
  auto& meta = ensure_meta(*this);
  if (meta.retains_grad) return;
  meta.retains_grad = true;
  // The node holds the tensor's state weakly: the tensor owns its grad_fn, not the reverse. The
  // engine fills .grad there (autograd/engine.cpp); an in-place op moves this to its new node.
  grad_fn()->retained.emplace_back(meta.output_nr, impl()->autograd);
}

bool Tensor::retains_grad() const {
  auto* m = meta_or_null(*this);
  return m != nullptr && m->retains_grad;
}

void Tensor::register_hook(Hook hook) const {
  CPPGRAD_CHECK(requires_grad(), "register_hook: cannot register a hook on a tensor that does not require grad");
  if (is_leaf())
    ensure_meta(*this).hooks.push_back(std::move(hook));
  else
    grad_fn()->pre_hooks.emplace_back(impl()->autograd->output_nr, std::move(hook));
}

}  // namespace cppgrad
