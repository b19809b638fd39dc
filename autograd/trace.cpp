#include "autograd/trace.h"

namespace cppgrad::autograd {

namespace {
thread_local Trace* g_trace = nullptr;

const TraceArg* find_arg(const TracedOp& op, const std::string& name) {
  for (const TraceArg& a : op.args)
    if (a.name == name) return &a;
  return nullptr;
}

template <class T>
const T& arg_of(const TracedOp& op, const std::string& name, const char* kind) {
  const TraceArg* a = find_arg(op, name);
  CPPGRAD_CHECK(a != nullptr && std::holds_alternative<T>(a->value), "trace: op {} has no {} argument '{}'", op.op,
                kind, name);
  return std::get<T>(a->value);
}
}  // namespace

int64_t TracedOp::integer(const std::string& name) const { return arg_of<int64_t>(*this, name, "int"); }
double TracedOp::number(const std::string& name) const { return arg_of<double>(*this, name, "number"); }
const std::vector<int64_t>& TracedOp::ints(const std::string& name) const {
  return arg_of<std::vector<int64_t>>(*this, name, "int list");
}
Tensor TracedOp::tensor(const std::string& name) const {
  const TraceArg* a = find_arg(*this, name);
  return a != nullptr && std::holds_alternative<Tensor>(a->value) ? std::get<Tensor>(a->value) : Tensor();
}
bool TracedOp::has(const std::string& name) const { return find_arg(*this, name) != nullptr; }

Trace::Trace() {
  CPPGRAD_CHECK(g_trace == nullptr, "trace: a trace is already running on this thread");
  g_trace = this;
}

Trace::~Trace() { g_trace = nullptr; }

void Trace::add(TracedOp op, const Tensor& out) {
  op.output = out;
  ops_.push_back(std::move(op));
}

TraceScope::TraceScope() : trace_(g_trace) {
  if (trace_ != nullptr) ++trace_->depth_;
}

TraceScope::~TraceScope() {
  if (trace_ != nullptr && !noted_) --trace_->depth_;
}

bool trace_running() { return g_trace != nullptr; }

void trace_record(const char* op, const Tensor& out, const std::vector<Tensor>& inputs) {
  if (g_trace == nullptr || g_trace->depth_ > 0) return;
  g_trace->add(TracedOp(op, inputs), out);
}

}  // namespace cppgrad::autograd
