// Checkpoints of whole modules: nn::save writes a Transformer's state_dict as safetensors,
// nn::load reads it into a freshly built model, and the outputs are identical; loading into a
// model of another shape fails with every mismatch named.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
using namespace cppgrad::nn;
using namespace nntest;  // the helpers of nn_helpers.h
namespace fs = std::filesystem;

namespace {

TransformerOptions small(int64_t d_model = 8, int64_t encoder_layers = 2) {
  return TransformerOptions(d_model, 2)
      .num_encoder_layers(encoder_layers)
      .num_decoder_layers(1)
      .dim_feedforward(16)
      .dropout(0.1);
}

}  // namespace

TEST_CASE("a Transformer saved and loaded gives identical outputs") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  manual_seed(120);
  Transformer original(small());
  original.eval();
  save(original, path, {{"note", "round trip"}});

  manual_seed(121);  // other initial values
  Transformer restored(small());
  restored.eval();
  Tensor src = randn({2, 5, 8}), tgt = randn({2, 3, 8});
  Tensor before = restored.forward(src, tgt);
  Tensor expected = original.forward(src, tgt);
  REQUIRE(max_abs_diff(before, expected) > 1e-3);  // the two really started different

  load(restored, path);
  CHECK(max_abs_diff(restored.forward(src, tgt), expected) == 0.0);
  // Every tensor is bit-identical, and the file holds exactly the state_dict and the metadata.
  auto restored_state = restored.state_dict();
  auto original_state = original.state_dict();
  REQUIRE(restored_state.size() == original_state.size());
  for (size_t i = 0; i < restored_state.size(); ++i) {
    CHECK(restored_state[i].first == original_state[i].first);
    CHECK(values(restored_state[i].second) == values(original_state[i].second));
  }
  SafetensorsContents file = load_safetensors(path);
  CHECK(file.tensors.size() == original_state.size());
  CHECK(file.metadata.at("note") == "round trip");
  CHECK(file.at("encoder.layers.1.self_attn.in_proj_weight").shape() == Shape{24, 8});
  // The loaded parameters still train.
  for (const Tensor& p : restored.parameters()) CHECK(p.requires_grad());
}

TEST_CASE("a float64 checkpoint round-trips in float64") {
  TempDir dir;
  const std::string path = dir.file("model64.safetensors");
  manual_seed(122);
  Transformer original(small().dropout(0.0));
  original.to(kFloat64);
  save(original, path);
  CHECK(load_safetensors(path).at("decoder.norm.bias").dtype() == kFloat64);
  manual_seed(123);
  Transformer restored(small().dropout(0.0));
  restored.to(kFloat64);
  load(restored, path);
  Tensor src = nntest::randn64({1, 4, 8}, 124), tgt = nntest::randn64({1, 2, 8}, 125);
  CHECK(max_abs_diff(restored.forward(src, tgt), original.forward(src, tgt)) == 0.0);
}

TEST_CASE("a float32 checkpoint loads into a float64 model") {
  TempDir dir;
  const std::string path = dir.file("model32.safetensors");
  manual_seed(127);
  Transformer original(small().dropout(0.0));
  save(original, path);
  CHECK(load_safetensors(path).at("decoder.norm.bias").dtype() == kFloat32);
  Transformer restored(small().dropout(0.0));
  restored.to(kFloat64);
  load(restored, path);
  Tensor w = (*restored.encoder->layers)[1]->linear2->weight;
  CHECK(w.dtype() == kFloat64);  // the model keeps its dtype; values are converted
  CHECK(values(w) == values((*original.encoder->layers)[1]->linear2->weight));
  Tensor src = randn({1, 4, 8}), tgt = randn({1, 2, 8});
  CHECK(nntest::max_rel_diff(restored.forward(src.to(kFloat64), tgt.to(kFloat64)), original.forward(src, tgt)) < 1e-5);
}

TEST_CASE("loading a checkpoint of another shape is one clear error") {
  TempDir dir;
  const std::string path = dir.file("two_layers.safetensors");
  manual_seed(126);
  Transformer two(small(8, 2));
  save(two, path);

  // One encoder layer fewer: the file has keys the model lacks.
  Transformer one(small(8, 1));
  const Tensor& decoder_w = (*one.decoder->layers)[0]->linear1->weight;
  std::vector<double> untouched = values(decoder_w);
  std::string msg = error_message([&] { load(one, path); });
  CHECK(contains(msg, "load '" + path + "': load_state_dict"));  // which file, then what differs
  CHECK(contains(msg, "unexpected keys"));
  // Names in order, at most eight of them (a hostile file may hold millions), then a count.
  CHECK(contains(msg, "encoder.layers.1.linear1.bias"));
  CHECK(contains(msg, "encoder.layers.1.norm2.bias"));
  CHECK(contains(msg, "and 4 more"));
  CHECK_FALSE(contains(msg, "missing keys"));
  CHECK(values(decoder_w) == untouched);  // nothing loaded

  // One encoder layer more: keys missing.
  Transformer three(small(8, 3));
  std::string missing = error_message([&] { load(three, path); });
  CHECK(contains(missing, "missing keys"));
  CHECK(contains(missing, "encoder.layers.2.linear1.weight"));

  // Another d_model: every tensor's shape differs.
  Transformer wide(small(12, 2));
  std::string shapes = error_message([&] { load(wide, path); });
  CHECK(contains(shapes, "shape mismatches"));
  CHECK(contains(shapes, "encoder.layers.0.self_attn.in_proj_weight: checkpoint [24,8] vs model [36,12]"));

  // Not strict: the layers that exist are loaded, the extra ones in the file ignored.
  load(one, path, /*strict=*/false);
  auto& src_layer = *(*two.encoder->layers)[0];
  auto& dst_layer = *(*one.encoder->layers)[0];
  CHECK(values(dst_layer.linear1->weight) == values(src_layer.linear1->weight));
  CHECK(values(decoder_w) == values((*two.decoder->layers)[0]->linear1->weight));

  // A file that does not exist is an error naming it.
  CHECK(contains(error_message([&] { load(one, dir.file("absent.safetensors")); }), "absent.safetensors"));
}

TEST_CASE("nn::save refuses a non-finite state unless told it may write one") {
  TempDir dir;
  const std::string path = dir.file("diverged.safetensors");
  manual_seed(7);
  Linear layer(3, 2);
  {
    NoGradGuard no_grad;
    layer.weight.data<float>()[4] = std::numeric_limits<float>::quiet_NaN();
  }
  const std::string msg = error_message([&] { save(layer, path); });
  CHECK(contains(msg, "nn::save('" + path + "'), refused (nn::NonFinite::Allow writes it): 'weight' holds nan (element 4 of [2,3])"));
  CHECK_FALSE(fs::exists(path));  // nothing written
  save(layer, path, {}, NonFinite::Allow);  // to study it (load_state_dict refuses it, as before)
  const SafetensorsContents file = load_safetensors(path);
  CHECK(std::isnan(file.at("weight").data<float>()[4]));
}
