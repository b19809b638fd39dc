// Lesson 10's claims, asserted (lesson10_sharing.cpp): the parameter counts and cache sizes of
// grouped heads, the identities g = h (multi-head) and g = 1 (multi-query), and that every
// sharing learns the text.
#include <doctest/doctest.h>

#include <cmath>

#include "lessons/lesson10_sharing.h"

using namespace lessons;

TEST_CASE("lesson 10: sharing key/value heads shrinks W_K, W_V and the cache by h/g, and g = h is multi-head attention") {
  const Lesson10 r = run_lesson10();
  const int64_t d = r.d_model, h = r.heads;
  for (size_t i = 0; i < r.kv_heads.size(); ++i) {
    const int64_t g = r.kv_heads[i];
    // 2·d²·(1 + g/h) weights and the biases (d + 2·g·d/h in projection, d out)
    CHECK(r.attention_parameters[i] == 2 * d * d + 2 * d * (g * d / h) + 2 * d + 2 * g * d / h);
    CHECK(r.cache_bytes_per_token[i] == 2 * g * (d / h) * 4);
    CHECK(r.decode_tokens_per_s[i] > 0.0);
  }
  CHECK(r.gqa_g_equals_h_vs_mha == 0.0);  // the same products in the same order
  CHECK(r.mqa_vs_repeated < 1e-14);
  CHECK(r.g_equals_h_is_the_fused_layer);
  REQUIRE(r.held_out_loss.size() == 3);
  REQUIRE(r.held_out_spread.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    REQUIRE(r.held_out_by_seed[i].size() == static_cast<size_t>(r.lm_seeds));
    CHECK(r.held_out_spread[i] > 0.0);  // seeds differ: a verdict needs their spread
  }
  CHECK(r.lm_parameters[0] > r.lm_parameters[1]);
  CHECK(r.lm_parameters[1] > r.lm_parameters[2]);
  for (double loss : r.held_out_loss) {
    CHECK(std::isfinite(loss));
    CHECK(loss < r.uniform_loss - 1.0);  // each learned the characters' frequencies and more
  }
}
