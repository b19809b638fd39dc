// The ONNX export cases that check.sh runs in ONNX Runtime: each model (small, seeded, every
// parameter moved off its initial value so that zero biases and unit gains hide nothing) is
// exported from one set of example inputs, then run by cppgrad in eval mode on OTHER inputs
// (other batch sizes and sequence lengths, masks with padding). This program writes, into DIR:
//   <case>.onnx                          the exported model
//   <case>.<run>.<in|out><i>.bin         each input and cppgrad's output, raw little-endian
//   manifest.json                        what check.sh's node script reads: cases, runs, tensors
//
//   onnx_export_cases DIR
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>

#include "cppgrad.h"
#include "nn/hf/model.h"
#include "nn/onnx/export.h"
#include "runtime/files.h"
#include "seq2seq/model.h"

using namespace cppgrad;

namespace {

struct Run {
  std::vector<Tensor> inputs;
};

struct Case {
  std::string name;
  std::shared_ptr<nn::Module> module;
  std::vector<std::string> input_names;
  std::vector<Tensor> example;                                   // what the export sees
  std::vector<Run> runs;                                         // what ORT and cppgrad run on
  std::function<Tensor(const std::vector<Tensor>&)> forward;     // cppgrad's eval-mode output, traced by the export
  std::map<std::string, std::map<int64_t, std::string>> dynamic_axes{};  // empty: export_module's default
  std::vector<Tensor> other_example{};  // export_module's other_inputs (empty: its default)
};

void perturb(nn::Module& module, uint64_t seed) {
  Generator gen(seed);
  NoGradGuard no_grad;
  for (auto& [name, p] : module.named_parameters()) p.add_(randn(p.shape(), p.dtype(), gen) * 0.2);
}

std::string dtype_word(DType d) {
  switch (d) {
    case kFloat32: return "float32";
    case kFloat64: return "float64";
    case kInt64: return "int64";
    case kBool: return "bool";
    default: throw Error(fmt::format("onnx_export_cases: no ORT type for {}", dtype_name(d)));
  }
}

std::string write_tensor(const std::string& dir, const std::string& file, const Tensor& t) {
  const Tensor dense = t.contiguous();
  files::write_file_atomically(dir + "/" + file,
                               {static_cast<const uint8_t*>(dense.raw_data()),
                                static_cast<size_t>(dense.numel()) * dtype_size(dense.dtype())},
                               "onnx_export_cases");
  return fmt::format(R"({{"file": "{}", "dtype": "{}", "shape": [{}]}})", file, dtype_word(t.dtype()),
                     fmt::join(t.shape(), ", "));
}

Tensor tokens(int64_t batch, int64_t length, int64_t vocab, uint64_t seed) {
  Generator gen(seed);
  return randint(0, vocab, {batch, length}, gen);
}

Tensor floats(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, kFloat32, gen);
}

// (B, L) bool, true = padding: row b has its last b % L positions padded; with `one_fully_hidden`
// the last row is all padding (a query with no key to attend to: zero output in cppgrad).
Tensor padding(int64_t batch, int64_t length, bool one_fully_hidden = false) {
  Tensor pad = zeros({batch, length}, kBool);
  NoGradGuard no_grad;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t hidden = (one_fully_hidden && b == batch - 1) ? length : b % length;
    for (int64_t j = length - hidden; j < length; ++j) pad.select(0, b).select(0, j).fill_(1.0);
  }
  return pad;
}

// A module of one's own, made of existing ops, with no ONNX code anywhere: export traces its
// forward. Each position mixes in the others by similarity, split into two heads, gated.
struct GatedMixer : nn::Module {
  explicit GatedMixer(int64_t d) {
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(Shape{d}));
    gate = register_module("gate", std::make_shared<nn::Linear>(d, d));
    scale = register_parameter("scale", full({d}, 0.5));
  }
  Tensor forward(const Tensor& x) {  // (B, T, d) -> (B, T, d)
    const int64_t B = x.size(0), T = x.size(1), d = x.size(2);
    Tensor h = norm->forward(x).reshape({B, T, 2, d / 2}).transpose(1, 2);          // (B, 2, T, d/2)
    Tensor weights = (h.matmul(h.mT()) / std::sqrt(static_cast<double>(d / 2))).softmax(-1);  // (B, 2, T, T)
    Tensor mixed = weights.matmul(h).transpose(1, 2).reshape({B, T, d});            // (B, T, d)
    return x * scale + mixed * gate->forward(x).sigmoid() - mixed.mean({-1}, true).tanh();
  }
  std::shared_ptr<nn::LayerNorm> norm;
  std::shared_ptr<nn::Linear> gate;
  Tensor scale;
};

// Attention written with einsum, and a per-head mixing weight: each einsum is one ONNX Einsum.
struct EinsumAttention : nn::Module {
  explicit EinsumAttention(int64_t d) {
    qkv = register_module("qkv", std::make_shared<nn::Linear>(d, 3 * d));
    mix = register_parameter("mix", randn({2, d / 2, d / 2}) * (1.0 / std::sqrt(static_cast<double>(d / 2))));
  }
  Tensor forward(const Tensor& x) {  // (B, T, d) -> (B, T, d)
    const int64_t B = x.size(0), T = x.size(1), d = x.size(2);
    Tensor parts = qkv->forward(x).reshape({B, T, 3, 2, d / 2});  // q, k, v: parts.select(2, i), (B, T, 2, d/2)
    Tensor scores = einsum("bqhd,bkhd->bhqk", {parts.select(2, 0), parts.select(2, 1)}) /
                    std::sqrt(static_cast<double>(d / 2));
    Tensor heads = einsum("bhqk,bkhd->bqhd", {scores.softmax(-1), parts.select(2, 2)});  // (B, T, 2, d/2)
    return einsum("...hi,hij->...hj", {heads, mix}).reshape({B, T, d});
  }
  std::shared_ptr<nn::Linear> qkv;
  Tensor mix;
};

std::vector<Case> library_cases() {
  std::vector<Case> cases;
  manual_seed(7);
  {  // a module of one's own: no exporter, the traced forward
    auto mixer = std::make_shared<GatedMixer>(8);
    cases.push_back({"gated_mixer", mixer, {"x"}, {floats({2, 3, 8}, 50)}, {{{floats({4, 7, 8}, 51)}}, {{floats({1, 1, 8}, 52)}}},
                     [mixer](const std::vector<Tensor>& in) { return mixer->forward(in[0]); }});
  }
  {  // einsum: attention and a per-head weight, "..." included
    auto attention = std::make_shared<EinsumAttention>(8);
    cases.push_back({"einsum_attention", attention, {"x"}, {floats({2, 3, 8}, 53)},
                     {{{floats({4, 7, 8}, 54)}}, {{floats({1, 1, 8}, 55)}}},
                     [attention](const std::vector<Tensor>& in) { return attention->forward(in[0]); }});
  }
  {  // Linear and the activations, Dropout as the identity
    auto mlp = std::make_shared<nn::Sequential>(
        std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.3),
        std::make_shared<nn::Linear>(16, 12), std::make_shared<nn::GELU>(), std::make_shared<nn::Linear>(12, 12),
        std::make_shared<nn::GELU>("tanh"), std::make_shared<nn::Linear>(12, 8), std::make_shared<nn::Tanh>(),
        std::make_shared<nn::Linear>(8, 8, false), std::make_shared<nn::Sigmoid>(), std::make_shared<nn::SiLU>());
    cases.push_back({"mlp", mlp, {"x"}, {floats({2, 3, 6}, 1)}, {{{floats({5, 7, 6}, 2)}}, {{floats({1, 1, 6}, 3)}}},
                     [mlp](const std::vector<Tensor>& in) { return mlp->forward(in[0]); }});
  }
  {  // Embedding, LayerNorm (with and without affine parameters)
    auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Embedding>(20, 8, 0),
                                                std::make_shared<nn::LayerNorm>(Shape{8}),
                                                std::make_shared<nn::LayerNorm>(Shape{8}, 1e-3, false));
    cases.push_back({"embedding_layernorm", net, {"tokens"}, {tokens(2, 3, 20, 4)},
                     {{{tokens(4, 9, 20, 5)}}, {{tokens(1, 2, 20, 6)}}},
                     [net](const std::vector<Tensor>& in) { return net->forward(in[0]); }});
  }
  {  // RMSNorm and SwiGLU
    auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::RMSNorm>(Shape{8}), std::make_shared<nn::SwiGLU>(8, 20),
                                                std::make_shared<nn::RMSNorm>(Shape{8}, 1e-6));
    cases.push_back({"rmsnorm_swiglu", net, {"x"}, {floats({2, 3, 8}, 7)}, {{{floats({3, 5, 8}, 8)}}},
                     [net](const std::vector<Tensor>& in) { return net->forward(in[0]); }});
  }
  {  // self-attention with a key padding mask (one row all padding) and the causal mask
    auto mha = std::make_shared<nn::MultiheadAttention>(16, 4);
    cases.push_back({"mha_padding_causal", mha, {"x", "pad"}, {floats({2, 3, 16}, 9), padding(2, 3)},
                     {{{floats({4, 6, 16}, 10), padding(4, 6, true)}}, {{floats({1, 2, 16}, 11), padding(1, 2)}}},
                     [mha](const std::vector<Tensor>& in) {
                       return mha->forward(in[0], in[0], in[0], {.key_padding_mask = in[1], .is_causal = true}).output;
                     }});
  }
  {  // cross-attention, kdim/vdim of their own, sequence first, a float attn_mask (T, S)
    auto mha = std::make_shared<nn::MultiheadAttention>(
        nn::MultiheadAttentionOptions(12, 3).kdim(10).vdim(7).batch_first(false));
    cases.push_back({"mha_cross_seq_first", mha, {"query", "key", "value", "attn_mask"},
                     {floats({3, 2, 12}, 12), floats({4, 2, 10}, 13), floats({4, 2, 7}, 14), floats({3, 4}, 15)},
                     {{{floats({5, 3, 12}, 16), floats({2, 3, 10}, 17), floats({2, 3, 7}, 18), floats({5, 2}, 19)}}},
                     [mha](const std::vector<Tensor>& in) {
                       return mha->forward(in[0], in[1], in[2], {.attn_mask = in[3]}).output;
                     },
                     {{"query", {{0, "T"}, {1, "batch"}}},  // sequence first; the float mask's last axis is S
                      {"key", {{0, "S"}, {1, "batch"}}},
                      {"value", {{0, "S"}, {1, "batch"}}},
                      {"attn_mask", {{0, "T"}, {1, "S"}}}}});
  }
  {  // grouped-query heads with interleaved rotary positions, a bool (B·H, T, S) attn_mask
    auto mha = std::make_shared<nn::MultiheadAttention>(
        nn::MultiheadAttentionOptions(16, 4).num_kv_heads(2).rotary(true).rotary_layout(nn::RotaryLayout::Interleaved));
    auto upper = [](int64_t bh, int64_t t) {  // (B·H, T, T), true above the diagonal: the future hidden
      Tensor mask = zeros({bh, t, t}, kBool);
      NoGradGuard no_grad;
      for (int64_t i = 0; i < t; ++i) mask.narrow(1, i, 1).narrow(2, i + 1, t - i - 1).fill_(1.0);
      return mask;
    };
    cases.push_back({"mha_gqa_rotary", mha, {"x", "mask"}, {floats({2, 3, 16}, 20), upper(8, 3)},
                     {{{floats({3, 7, 16}, 21), upper(12, 7)}}},
                     [mha](const std::vector<Tensor>& in) { return mha->forward(in[0], in[0], in[0], {.attn_mask = in[1]}).output; },
                     {{"x", {{0, "batch"}, {1, "T"}}}, {"mask", {{0, "batch_heads"}, {1, "T"}, {2, "T"}}}}});
    cases.back().other_example = {floats({3, 4, 16}, 53), upper(12, 4)};  // B·H heads follow the batch
  }
  {  // heads wider than the embedding's share (head_dim 4 on d 16, 8 heads on 2 key/value heads:
     // q_proj 32 rows, out_proj 32 columns), Hugging Face's rotary layout (the default), causal
    auto mha = std::make_shared<nn::MultiheadAttention>(
        nn::MultiheadAttentionOptions(16, 8).num_kv_heads(2).head_dim(4).rotary(true));
    cases.push_back({"mha_head_dim", mha, {"x"}, {floats({2, 3, 16}, 32)}, {{{floats({3, 7, 16}, 33)}}},
                     [mha](const std::vector<Tensor>& in) {
                       return mha->forward(in[0], in[0], in[0], {.need_weights = false, .is_causal = true}).output;
                     }});
  }
  {  // BatchNorm1d in eval mode over (N, C, L): its running statistics as initializers, made by a
     // few training steps' updates
    auto bn = std::make_shared<nn::BatchNorm1d>(6);
    for (uint64_t seed : {60, 61, 62}) bn->forward(floats({4, 6, 5}, seed));
    bn->eval();
    cases.push_back({"batchnorm1d_eval", bn, {"x"}, {floats({2, 6, 3}, 56)}, {{{floats({5, 6, 7}, 57)}}},
                     [bn](const std::vector<Tensor>& in) { return bn->forward(in[0]); },
                     {{"x", {{0, "batch"}, {2, "L"}}}}});
  }
  {  // a sliding window of 3 keys and ALiBi's slopes on causal self-attention: the terms the
     // traced attention op adds, made of the sequence's length in the graph
    auto mha = std::make_shared<nn::MultiheadAttention>(nn::MultiheadAttentionOptions(16, 4).window(3).alibi(true));
    cases.push_back({"mha_window_alibi", mha, {"x"}, {floats({2, 5, 16}, 54)}, {{{floats({3, 8, 16}, 55)}}},
                     [mha](const std::vector<Tensor>& in) {
                       return mha->forward(in[0], in[0], in[0], {.need_weights = false, .is_causal = true}).output;
                     }});
  }
  {  // the encoder and decoder layers (post-norm ReLU; pre-norm GELU, sequence first)
    auto enc = std::make_shared<nn::TransformerEncoderLayer>(nn::TransformerLayerOptions(16, 4).dim_feedforward(24));
    cases.push_back({"encoder_layer", enc, {"src"}, {floats({2, 3, 16}, 22)}, {{{floats({3, 8, 16}, 23)}}},
                     [enc](const std::vector<Tensor>& in) { return enc->forward(in[0]); }});
    auto dec = std::make_shared<nn::TransformerDecoderLayer>(nn::TransformerLayerOptions(16, 2)
                                                                 .dim_feedforward(24)
                                                                 .activation(nn::Activation::GELU)
                                                                 .norm_first(true)
                                                                 .batch_first(false));
    cases.push_back({"decoder_layer", dec, {"tgt", "memory"}, {floats({3, 2, 16}, 24), floats({4, 2, 16}, 25)},
                     {{{floats({6, 3, 16}, 26), floats({2, 3, 16}, 27)}}},
                     [dec](const std::vector<Tensor>& in) { return dec->forward(in[0], in[1]); },
                     {{"tgt", {{0, "T"}, {1, "batch"}}}, {"memory", {{0, "S"}, {1, "batch"}}}}});
  }
  {  // a float64 model: float64 initializers, inputs and outputs (ReLU: ONNX Runtime's CPU build has
     // no float64 Erf, which GELU's exact form needs)
    auto enc = std::make_shared<nn::TransformerEncoderLayer>(nn::TransformerLayerOptions(8, 2).dim_feedforward(16).norm_first(true));
    enc->to(kFloat64);
    cases.push_back({"encoder_layer_float64", enc, {"src", "pad"}, {floats({2, 3, 8}, 40).to(kFloat64), padding(2, 3)},
                     {{{floats({3, 5, 8}, 41).to(kFloat64), padding(3, 5)}}},
                     [enc](const std::vector<Tensor>& in) { return enc->forward(in[0], {}, in[1]); }});
  }
  {  // nn::Transformer with every mask kind: source padding, causal target, memory padding
    auto model = std::make_shared<nn::Transformer>(
        nn::TransformerOptions(16, 2).num_encoder_layers(2).num_decoder_layers(2).dim_feedforward(32));
    cases.push_back({"transformer", model, {"src", "tgt", "src_pad"},
                     {floats({2, 3, 16}, 28), floats({2, 4, 16}, 29), padding(2, 3)},
                     {{{floats({3, 6, 16}, 30), floats({3, 5, 16}, 31), padding(3, 6)}}},
                     [model](const std::vector<Tensor>& in) {
                       return model->forward(in[0], in[1], {}, {}, {}, in[2], {}, in[2], false, true);
                     }});
  }
  return cases;
}

std::vector<Case> example_cases() {
  std::vector<Case> cases;
  for (hf::Arch arch : {hf::Arch::GPT2, hf::Arch::Llama}) {
    hf::ModelConfig c;
    c.arch = arch, c.vocab = 23, c.layers = 2, c.d_model = 16, c.heads = 4, c.ff = 24, c.seq_len = 16;
    c.kv_heads = arch == hf::Arch::Llama ? 2 : 0;
    auto model = hf::make_model(c);
    cases.push_back({"gpt_" + hf::arch_name(arch), model, {"tokens"}, {tokens(2, 3, 23, 32)},
                     {{{tokens(3, 16, 23, 33)}}, {{tokens(1, 5, 23, 34)}}},
                     [model](const std::vector<Tensor>& in) { return model->forward(in[0]); }});
  }
  seq2seq::ModelConfig c;
  c.vocab = 14, c.d_model = 16, c.heads = 2, c.layers = 2, c.ff = 32, c.max_len = 32;
  auto model = std::make_shared<seq2seq::Seq2SeqModel>(c);
  cases.push_back({"seq2seq", model, {"src", "tgt_in", "src_pad", "tgt_pad"},
                   {tokens(2, 5, 14, 35), tokens(2, 4, 14, 36), padding(2, 5), padding(2, 4)},
                   {{{tokens(3, 9, 14, 37), tokens(3, 7, 14, 38), padding(3, 9), padding(3, 7)}}},
                   [model](const std::vector<Tensor>& in) { return model->forward(in[0], in[1], in[2], in[3]); }});
  return cases;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || argv[1][0] == '\0') {  // "" would put the files in /
    std::fprintf(stderr, "usage: onnx_export_cases DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  try {
    std::vector<Case> cases = library_cases();
    for (auto& c : example_cases()) cases.push_back(std::move(c));
    std::vector<std::string> entries;
    uint64_t seed = 100;
    for (auto& c : cases) {
      perturb(*c.module, seed++);
      c.module->eval();
      const std::string file = c.name + ".onnx";
      const onnx::ExportOptions options{.input_names = c.input_names, .output_names = {"output"},
                                        .dynamic_axes = c.dynamic_axes, .other_inputs = c.other_example};
      onnx::export_module(*c.module, [&c](const std::vector<Tensor>& in) { return std::vector<Tensor>{c.forward(in)}; },
                          c.example, dir + "/" + file, options);
      std::vector<std::string> runs;
      for (size_t r = 0; r < c.runs.size(); ++r) {
        NoGradGuard no_grad;
        const Tensor expected = c.forward(c.runs[r].inputs);
        std::vector<std::string> inputs;
        for (size_t i = 0; i < c.runs[r].inputs.size(); ++i) {
          inputs.push_back(fmt::format(R"("{}": {})", c.input_names[i],
                                       write_tensor(dir, fmt::format("{}.{}.in{}.bin", c.name, r, i), c.runs[r].inputs[i])));
        }
        runs.push_back(fmt::format(R"({{"inputs": {{{}}}, "output": {}}})", fmt::join(inputs, ", "),
                                   write_tensor(dir, fmt::format("{}.{}.out.bin", c.name, r), expected)));
      }
      entries.push_back(fmt::format(R"({{"name": "{}", "model": "{}", "runs": [{}]}})", c.name, file, fmt::join(runs, ", ")));
      fmt::print("exported {} ({} parameters)\n", file, c.module->parameter_count());
    }
    files::write_file_atomically(dir + "/manifest.json", std::string_view(fmt::format("[\n{}\n]\n", fmt::join(entries, ",\n"))),
                                 "onnx_export_cases");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "onnx_export_cases: %s\n", e.what());
    return 1;
  }
}
