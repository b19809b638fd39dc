// seq2seq --export-onnx: compiled into the program alone, so that the model's other users (the
// lessons, the benches) do not link the onnx component.
#include "nn/onnx/export.h"
#include "optim/average.h"
#include "seq2seq/model.h"

using namespace cppgrad;

namespace seq2seq {

void export_onnx_file(Seq2SeqModel& model, optim::ExponentialMovingAverage& average, const std::string& path) {
  model.eval();
  const std::vector<Tensor> example = {zeros({1, 3}, kInt64), zeros({1, 2}, kInt64), zeros({1, 3}, kBool),
                                       zeros({1, 2}, kBool)};
  const std::map<int64_t, std::string> source = {{0, "batch"}, {1, "src_len"}}, target = {{0, "batch"}, {1, "tgt_len"}};
  const onnx::ExportOptions options{
      .input_names = {"src", "tgt_in", "src_pad", "tgt_pad"},
      .output_names = {"logits"},
      .dynamic_axes = {{"src", source}, {"src_pad", source}, {"tgt_in", target}, {"tgt_pad", target}}};
  average.swap();  // the averaged weights in for the export (an Error ends the run: nothing uses them after)
  onnx::export_module(
      model, [&model](const std::vector<Tensor>& in) { return std::vector<Tensor>{model.forward(in[0], in[1], in[2], in[3])}; },
      example, path, options);
  average.swap();
  fmt::print("ONNX model written to {}\n", path);
}

}  // namespace seq2seq
