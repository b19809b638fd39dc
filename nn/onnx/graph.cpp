// The graph builder over ONNX's own generated protobuf classes (onnx-ml.pb.h of libonnx-dev),
// with ONNX's C++ checker and strict shape inference run on the finished model: a graph that
// ONNX itself would refuse is refused here, at export, before anything is written.
#include "nn/onnx/graph.h"

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <cstring>

#include "nn/module.h"
#include "tensor/kernels.h"

namespace cppgrad::onnx {

struct Graph::Proto {
  ::onnx::GraphProto graph;
};

namespace {

::onnx::TensorProto_DataType element_type(DType dtype, std::string_view what) {
  switch (dtype) {
    case kFloat32: return ::onnx::TensorProto_DataType_FLOAT;
    case kFloat64: return ::onnx::TensorProto_DataType_DOUBLE;
    case kInt64: return ::onnx::TensorProto_DataType_INT64;
    case kBool: return ::onnx::TensorProto_DataType_BOOL;
    default: break;
  }
  throw Error(fmt::format("onnx export: {}: dtype {} has no ONNX element type here", what, dtype_name(dtype)));
}

// The tensor's values as an ONNX TensorProto: raw little-endian bytes, row-major, as ONNX stores them.
void fill_tensor(::onnx::TensorProto& proto, const std::string& name, const Tensor& tensor) {
  proto.set_name(name);
  proto.set_data_type(element_type(tensor.dtype(), name));
  for (int64_t d : tensor.shape()) proto.add_dims(d);
  const Tensor dense = kernels::contiguous(tensor);  // a copy only for a non-contiguous view
  proto.set_raw_data(dense.raw_data(), static_cast<size_t>(dense.numel()) * dtype_size(dense.dtype()));
}

}  // namespace

Graph::Graph(const nn::Module& root) : proto_(std::make_unique<Proto>()) {
  proto_->graph.set_name(root.type_name());
  named_tensors_ = root.named_parameters();
  for (auto& entry : root.named_buffers()) named_tensors_.push_back(std::move(entry));
}

Graph::~Graph() = default;

std::string Graph::fresh_name(const std::string& op) {
  return fmt::format("{}_{}", op, counter_++);
}

Value Graph::add_initializer(const std::string& name, const Tensor& tensor) {
  fill_tensor(*proto_->graph.add_initializer(), name, tensor);
  return {name, tensor.dtype(), tensor.dim()};
}

Value Graph::parameter(const Tensor& tensor) {
  CPPGRAD_CHECK(tensor.defined(), "onnx export: Graph::parameter: an undefined tensor (a layer without that parameter)");
  for (const auto& [name, owned] : named_tensors_) {
    if (!owned.is_same(tensor)) continue;
    if (added_.insert(name).second) add_initializer(name, tensor);
    return {name, tensor.dtype(), tensor.dim()};
  }
  throw Error(fmt::format("onnx export: Graph::parameter: a {} tensor {} that is no parameter or buffer of the exported "
                          "module (a view or a computed tensor?); give it to Graph::constant instead",
                          dtype_name(tensor.dtype()), shape_str(tensor.shape())));
}

Value Graph::constant(const Tensor& tensor) {
  CPPGRAD_CHECK(tensor.defined(), "onnx export: Graph::constant: an undefined tensor");
  return add_initializer(fresh_name("Constant"), tensor);
}

Value Graph::scalar(double value, DType dtype) { return constant(full({}, value, dtype)); }

Value Graph::ints(const std::vector<int64_t>& values) {
  Tensor t = empty({static_cast<int64_t>(values.size())}, kInt64);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(int64_t));
  return constant(t);
}

std::vector<Value> Graph::op_outputs(const std::string& op, const std::vector<Value>& inputs, size_t outputs,
                                     const std::vector<Attribute>& attributes, int64_t rank) {
  ::onnx::NodeProto& node = *proto_->graph.add_node();
  const std::string name = fresh_name(op);
  node.set_op_type(op);
  node.set_name(name);
  for (const Value& input : inputs) node.add_input(input.name);  // "" marks an absent optional input
  std::vector<Value> results;
  const DType dtype = inputs.empty() ? kFloat32 : inputs.front().dtype;
  for (size_t i = 0; i < outputs; ++i) {
    results.push_back({outputs == 1 ? name : fmt::format("{}:{}", name, i), dtype, rank});
    node.add_output(results.back().name);
  }
  for (const Attribute& attribute : attributes) {
    ::onnx::AttributeProto& a = *node.add_attribute();
    a.set_name(attribute.name);
    if (auto* i = std::get_if<int64_t>(&attribute.value)) {
      a.set_type(::onnx::AttributeProto_AttributeType_INT);
      a.set_i(*i);
    } else if (auto* f = std::get_if<double>(&attribute.value)) {
      a.set_type(::onnx::AttributeProto_AttributeType_FLOAT);
      a.set_f(static_cast<float>(*f));  // ONNX's FLOAT attributes are 32-bit
    } else if (auto* list = std::get_if<std::vector<int64_t>>(&attribute.value)) {
      a.set_type(::onnx::AttributeProto_AttributeType_INTS);
      for (int64_t v : *list) a.add_ints(v);
    } else if (auto* s = std::get_if<std::string>(&attribute.value)) {
      a.set_type(::onnx::AttributeProto_AttributeType_STRING);
      a.set_s(*s);
    } else {
      a.set_type(::onnx::AttributeProto_AttributeType_TENSOR);
      fill_tensor(*a.mutable_t(), attribute.name, std::get<Tensor>(attribute.value));
    }
  }
  return results;
}

Value Graph::op(const std::string& op, const std::vector<Value>& inputs, const std::vector<Attribute>& attributes,
                std::optional<DType> dtype, int64_t rank) {
  Value out = op_outputs(op, inputs, 1, attributes, rank).front();
  if (dtype) out.dtype = *dtype;
  return out;
}

Value Graph::transpose(const Value& x, const std::vector<int64_t>& perm) {
  return op("Transpose", {x}, {{"perm", perm}}, std::nullopt, x.rank);
}

Value Graph::reshape(const Value& x, const std::vector<int64_t>& shape) {
  return op("Reshape", {x, ints(shape)}, {}, std::nullopt, static_cast<int64_t>(shape.size()));
}

Value Graph::unsqueeze(const Value& x, const std::vector<int64_t>& axes) {
  return op("Unsqueeze", {x, ints(axes)}, {}, std::nullopt, x.rank < 0 ? -1 : x.rank + static_cast<int64_t>(axes.size()));
}

Value Graph::concat(const std::vector<Value>& values, int64_t axis) {
  return op("Concat", values, {{"axis", axis}}, std::nullopt, values.front().rank);
}

Value Graph::softmax(const Value& x, int64_t axis) { return op("Softmax", {x}, {{"axis", axis}}, std::nullopt, x.rank); }

Value Graph::cast(const Value& x, DType dtype) {
  if (x.dtype == dtype) return x;
  return op("Cast", {x}, {{"to", static_cast<int64_t>(element_type(dtype, "Cast"))}}, dtype, x.rank);
}

Value Graph::size(const Value& x, int64_t axis) {
  const int64_t end = axis == -1 ? std::numeric_limits<int64_t>::max() : axis + 1;
  return op("Shape", {x}, {{"start", axis}, {"end", end}}, kInt64, 1);
}

Value Graph::where(const Value& condition, const Value& a, const Value& b) {
  Value out = op("Where", {condition, a, b}, {}, a.dtype, std::max({condition.rank, a.rank, b.rank}));
  return out;
}

Value Graph::add_input(const std::string& name, DType dtype, const std::vector<std::variant<int64_t, std::string>>& dims) {
  ::onnx::ValueInfoProto& info = *proto_->graph.add_input();
  info.set_name(name);
  ::onnx::TypeProto_Tensor& type = *info.mutable_type()->mutable_tensor_type();
  type.set_elem_type(element_type(dtype, name));
  for (const auto& dim : dims) {
    ::onnx::TensorShapeProto_Dimension& d = *type.mutable_shape()->add_dim();
    if (auto* fixed = std::get_if<int64_t>(&dim))
      d.set_dim_value(*fixed);
    else
      d.set_dim_param(std::get<std::string>(dim));
  }
  return {name, dtype, static_cast<int64_t>(dims.size())};
}

void Graph::add_output(const std::string& name, const Value& value) {
  // An Identity gives the output its own name, whatever node computed it.
  ::onnx::NodeProto& node = *proto_->graph.add_node();
  node.set_op_type("Identity");
  node.set_name(name + "/Identity");
  node.add_input(value.name);
  node.add_output(name);
  ::onnx::ValueInfoProto& info = *proto_->graph.add_output();
  info.set_name(name);
  ::onnx::TypeProto_Tensor& type = *info.mutable_type()->mutable_tensor_type();
  type.set_elem_type(element_type(value.dtype, name));
  // ONNX wants the output's rank; its sizes are left open (shape inference finds them).
  CPPGRAD_CHECK(value.rank >= 0, "onnx export: output '{}' ({}) has no known rank: give it to Graph::op", name, value.name);
  ::onnx::TensorShapeProto& shape = *type.mutable_shape();
  for (int64_t i = 0; i < value.rank; ++i) shape.add_dim();
}

std::string Graph::serialize_checked(const std::string& producer_version) const {
  ::onnx::ModelProto model;
  model.set_ir_version(8);  // ONNX 1.12's IR version, which opset 17 belongs to
  model.set_producer_name("cppgrad");
  model.set_producer_version(producer_version);
  ::onnx::OperatorSetIdProto& opset = *model.add_opset_import();
  opset.set_domain("");
  opset.set_version(kOpset);
  *model.mutable_graph() = proto_->graph;
  const size_t bytes = model.ByteSizeLong();
  CPPGRAD_CHECK(bytes < (size_t{1} << 31), "onnx export: the model takes {} bytes, past protobuf's 2 GB limit for one "
                "message (ONNX's external-data files are not written here)", bytes);
  try {
    ::onnx::checker::check_model(model);
    // Strict shape inference with type checks: what onnx.checker.check_model(full_check=True) runs.
    ::onnx::ModelProto inferred = model;
    ::onnx::shape_inference::InferShapes(inferred, ::onnx::OpSchemaRegistry::Instance(),
                                         ::onnx::ShapeInferenceOptions(/*check_type=*/true, /*strict_mode=*/1));
  } catch (const std::exception& e) {
    throw Error(fmt::format("onnx export: ONNX's checker refuses the graph of {}: {}", proto_->graph.name(), e.what()));
  }
  std::string out;
  CPPGRAD_CHECK(model.SerializeToString(&out), "onnx export: protobuf could not serialize the model");
  return out;
}

}  // namespace cppgrad::onnx
