// Lesson 10: how can 8 query heads share fewer key/value heads, and what does it cost?
// (lesson10_sharing.cpp). Kept apart from lessons.h: run_lesson10() computes, print() explains,
// test_lesson9.cpp asserts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lessons {

struct Lesson10 {
  // A Llama-sized attention layer: d_model 512, h = 8 query heads of d_k 64.
  int64_t d_model = 512, heads = 8;
  std::vector<int64_t> kv_heads{8, 4, 2, 1};
  std::vector<int64_t> attention_parameters;  // MultiheadAttention(...).parameter_count(), per g
  std::vector<int64_t> cache_bytes_per_token;  // a KVCache's bytes for one position, float32, per g
  std::vector<double> decode_tokens_per_s;     // cached decoding with each g, one timing each (printed, not asserted)
  // The identities: g = h is multi-head attention, g = 1 multi-query; each against the plain
  // computation with keys and values repeated (repeat_interleave), max |difference|.
  double gqa_g_equals_h_vs_mha = 0.0;
  double mqa_vs_repeated = 0.0;
  bool g_equals_h_is_the_fused_layer = false;  // MultiheadAttention with num_kv_heads = h keeps in_proj_weight
  // The quality cost: a character-level decoder (nn::Decoder, d_model 64, 4 query heads, 2
  // layers) on the GPL's text, the same steps, seeds and batches for g = 4, 2, 1.
  int64_t lm_heads = 4, lm_steps = 60, lm_seeds = 3, vocab = 0;
  std::vector<int64_t> lm_kv_heads{4, 2, 1};
  std::vector<int64_t> lm_parameters;
  // Nats per character on the last tenth of the text: per g, the mean over the seeds and their
  // standard deviation (the spread a difference must exceed to say anything).
  std::vector<double> held_out_loss, held_out_spread;
  std::vector<std::vector<double>> held_out_by_seed;  // [g][seed]
  double uniform_loss = 0.0;          // ln(vocab): a model that learned nothing
  std::string text_path;
};
Lesson10 run_lesson10();
void print(const Lesson10& r);

}  // namespace lessons
