// Uses the installed onnx component (cppgrad/nn/onnx/export.h): a module of its own, made of
// existing ops with no ONNX code, exported through its traced forward into a temporary directory.
// Checks that the file holds the parameters under their state_dict names and the dynamic batch
// axis (protobuf keeps strings as they are), and that an op with no ONNX form is refused, naming
// it, with no file left. Exits 0 when all hold.
#include <cppgrad/cppgrad.h>
#include <cppgrad/nn/onnx/export.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <unistd.h>

using namespace cppgrad;

struct Gate : nn::Module {
  Gate() {
    fc = register_module("fc", std::make_shared<nn::Linear>(4, 3));
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(Shape{3}));
  }
  Tensor forward(const Tensor& x) { return norm->forward(fc->forward(x).relu() * x.narrow(1, 0, 3).sigmoid()); }
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<nn::LayerNorm> norm;
};

// y = 2x through a custom autograd::Function: no ONNX form.
struct Double : autograd::Function<Double> {
  static Tensor forward(autograd::FunctionCtx&, const Tensor& x) { return x.detach() * 2.0; }
  static std::vector<Tensor> backward(autograd::FunctionCtx&, const std::vector<Tensor>& grad_outputs) {
    return {grad_outputs[0] * 2.0};
  }
};
struct Doubler : nn::Module {
  Tensor forward(const Tensor& x) { return Double::apply(x); }
};

int main() {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("cppgrad-onnx-consumer-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  manual_seed(1);
  Gate gate;
  gate.eval();
  const std::string path = (dir / "gate.onnx").string();
  onnx::export_module(gate, {randn({2, 4})}, path, {.input_names = {"x"}, .output_names = {"y"}});
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bool ok = true;
  for (const char* name : {"fc.weight", "fc.bias", "norm.weight", "norm.bias", "batch"}) {
    const bool found = bytes.find(name) != std::string::npos;
    std::printf("%s in gate.onnx: %s\n", name, found ? "yes" : "NO");
    ok = ok && found;
  }

  Doubler doubler;
  std::string message;
  try {
    onnx::export_module(doubler, {randn({2, 4})}, (dir / "doubler.onnx").string());
  } catch (const Error& e) {
    message = e.what();
  }
  const bool refused = message.find("op 'Double'") != std::string::npos && !fs::exists(dir / "doubler.onnx");
  std::printf("an op with no ONNX form: %s\n", refused ? "refused" : ("WRONG: '" + message + "'").c_str());
  ok = ok && refused;
  fs::remove_all(dir);
  std::printf("%s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
