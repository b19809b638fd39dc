// Autocast: mixed precision as PyTorch's torch.autocast("cpu", dtype=torch.bfloat16).
//
//   {
//     autocast::Guard bf16(kBFloat16);
//     Tensor loss = cross_entropy(model.forward(x), y);   // products in bfloat16
//   }
//   loss.backward();                                     // theirs too: see below
//   opt.step();                                          // float32 master weights
//
// Inside the region every float32 matrix product (matmul, linear, both attention paths, and any
// product an op makes of float32 tensors) multiplies its inputs rounded to bfloat16 and
// accumulates in float32. Everything else stays float32: softmax, normalisation, losses,
// reductions, elementwise ops, parameters, gradients and optimizer state. Products are the ops
// that gain (twice float32's rate on CPUs with AVX512_BF16 or AMX) and the ones whose float32
// accumulation keeps bfloat16's 3 digits from adding up; the others keep float32's precision.
//
// The products' outputs are float32, where PyTorch's are bfloat16: cppgrad has no bfloat16
// arithmetic for the ops that follow, and a float32 output is the float32 sum the kernel
// accumulated anyway, rounded once fewer. It costs float32's memory for the activations.
//
// A backward runs under the autocast state its forward ran in (autograd's engine restores it per
// node), whether loss.backward() is called inside the region or after it: the products of an
// autocast forward have bfloat16 backward products (dA = dC·Bᵀ with dC and B rounded), as in
// PyTorch, and an op recorded outside the region is never autocast by a backward called inside.
//
// float64 products are never autocast, so gradcheck (float64) checks the exact derivatives
// whatever the region. Outside a region nothing changes: the same bits as without autocast.
//
// On a CPU without bfloat16 instructions a bfloat16 product is no faster than float32 (oneDNN's
// emulation is 2.5-4x slower: bench/README.md), and rounding the inputs would be a pass of pure
// cost: there autocast's products run in float32 as they are, so autocast is never slower than
// float32 (kernel() says which kernel runs; Kernel::RoundedFloat32 gives bfloat16's numbers on any
// CPU). The state is per thread; cppgrad's own parallel loops carry it to their threads.
#pragma once

#include <string_view>

#include "dtype.h"

namespace cppgrad::autocast {

struct State {
  bool enabled = false;
  DType dtype = kBFloat16;  // the products' input precision while enabled (only bfloat16 today)
};

State state();                 // this thread's
bool is_enabled();             // torch.is_autocast_cpu_enabled()
DType dtype();                 // torch.get_autocast_cpu_dtype()
void set_state(State s);       // prefer Guard

// The region: autocast on (or, with enabled = false, off) until the end of the scope, then back
// to what it was. Only kBFloat16 is accepted (PyTorch's CPU autocast also takes float16, which
// CPUs multiply no faster than float32).
class Guard {
 public:
  explicit Guard(DType dtype = kBFloat16, bool enabled = true);
  explicit Guard(State s);  // restores a saved state (autograd's engine, parallel loops)
  ~Guard();
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  State previous_;
};

// Which kernel multiplies autocast's products:
//   OneDnn          the inputs rounded to bfloat16 and stored so, oneDNN's bfloat16 matmul;
//   RoundedFloat32  the inputs rounded to bfloat16 but held as float32, OpenBLAS's sgemm: the same
//                   products as a bfloat16 kernel (a product of two bfloat16 values is exact in
//                   float32), at float32's speed plus one rounding pass;
//   Float32         the inputs as they are, OpenBLAS's sgemm: autocast changes no product.
// Auto takes OneDnn where the CPU has AVX512_BF16 or AMX and the program links cppgrad::onednn,
// else Float32: without those instructions bfloat16 gains nothing, and rounding only costs
// (PyTorch's emulation there made its CPU autocast 2x slower than float32,
// pytorch/pytorch#86270). RoundedFloat32 shows, on any CPU, what bfloat16's precision does to a
// run; it is OneDnn's readable form, which reference mode (runtime/reference_mode.h) takes in its
// place.
enum class Kernel { Auto, OneDnn, RoundedFloat32, Float32 };
void set_kernel(Kernel k);  // process-wide; call between steps
Kernel kernel();            // the one products run on now (never Auto)
std::string_view kernel_name(Kernel k);
bool cpu_has_bfloat16_instructions();  // AVX512_BF16 or AMX-BF16 (as oneDNN sees the CPU, when linked)
// Whether the program links the component cppgrad::onednn, which brings Kernel::OneDnn (oneDNN is
// a component so that a program that never multiplies in bfloat16 does not link it). Without it
// Auto takes Float32, as on a CPU without bfloat16 instructions, and set_kernel(OneDnn) throws.
bool has_onednn();
std::string_view onednn_isa_name();    // oneDNN's name for the instructions it would use

}  // namespace cppgrad::autocast
