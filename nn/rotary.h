// Rotary position embeddings (RoPE; Su et al. 2021, "RoFormer"). Each pair of features of a
// query or key at position m is turned by the angle m·θ_i, θ_i = base^(−2i/d), i < d/2:
//
//   (x_a, x_b) -> (x_a·cos mθ_i − x_b·sin mθ_i,  x_a·sin mθ_i + x_b·cos mθ_i).
//
// A rotation by mθ of the query and by nθ of the key leaves their dot product depending on
// (m − n)θ alone, so attention scores see relative positions only, with no position vector
// added to the embeddings.
//
// Which features form pair i is a convention, and checkpoints differ:
// - Halves: (x_i, x_i+d/2), the two halves, as Hugging Face's Llama (rotate_half). Hugging Face's
//   conversion script permutes W_Q and W_K rows so that its checkpoints compute the same scores.
// - Interleaved: (x_2i, x_2i+1), adjacent features, as the paper and Meta's Llama code
//   (torch.view_as_complex on pairs).
// Halves is the default of every function, module and option that takes a layout (apply_rotary,
// RotaryEmbeddingOptions, MultiheadAttentionOptions::rotary_layout, the decoder's rope_layout):
// weights from the Hugging Face Hub load into a block built from these modules as they are.
// Meta's original files need RotaryLayout::Interleaved, said where the layer is built.
#pragma once

#include "module.h"
#include "options.h"

namespace cppgrad::nn {

enum class RotaryLayout { Halves, Interleaved };

namespace functional {
// The angles m·θ_i for positions m = position_offset, ..., position_offset + length − 1:
// (length, dim/2), float64. dim must be even.
Tensor rotary_angles(int64_t length, int64_t dim, int64_t position_offset = 0, double base = 10000.0);
// Rotates x (..., T, d), row t at position position_offset + t. position_offset is the number of
// positions before x: 0 for a whole sequence, the cache length for cached decoding.
Tensor apply_rotary(const Tensor& x, int64_t position_offset = 0, double base = 10000.0,
                    RotaryLayout layout = RotaryLayout::Halves);
// Rotates x (B, ..., T, d) with a position per sequence and row: positions (B, T) int64, row t of
// sequence b at positions[b][t]. Left-padded batches need it: a sequence's first real token is
// position 0 wherever it stands (Hugging Face's position_ids from the attention mask).
Tensor apply_rotary(const Tensor& x, const Tensor& positions, double base = 10000.0,
                    RotaryLayout layout = RotaryLayout::Halves);
}  // namespace functional

struct RotaryEmbeddingOptions {
  explicit RotaryEmbeddingOptions(int64_t dim) : dim_(dim) {}
  CPPGRAD_ARG(int64_t, dim, 0)        // features rotated: the head dim d_k; even
  CPPGRAD_ARG(double, base, 10000.0)  // θ: Llama 1-2 use 10000, Llama 3 500000
  CPPGRAD_ARG(RotaryLayout, layout, RotaryLayout::Halves)
};

// No parameters: the rotation is fixed by the options.
class RotaryEmbedding : public Module {
 public:
  explicit RotaryEmbedding(const RotaryEmbeddingOptions& options);
  // x (..., T, dim) -> the same shape, row t rotated as position position_offset + t.
  Tensor forward(const Tensor& x, int64_t position_offset = 0) const;
  std::string type_name() const override { return "RotaryEmbedding"; }
  std::string extra_repr() const override;

  const RotaryEmbeddingOptions options;
};

}  // namespace cppgrad::nn
