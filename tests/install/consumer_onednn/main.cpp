// Links the onednn component and calls nothing of it: its product is registered when the program
// starts. Checks that autocast has it, takes it where the CPU multiplies bfloat16 (else float32,
// as without the component), and that a product asked of it is within bfloat16's rounding of
// float32's. Exits 0 when all hold.
#include <cppgrad/cppgrad.h>

#include <cmath>
#include <cstdio>

int main() {
  using namespace cppgrad;
  bool ok = autocast::has_onednn();
  const autocast::Kernel expected =
      autocast::cpu_has_bfloat16_instructions() ? autocast::Kernel::OneDnn : autocast::Kernel::Float32;
  ok = ok && autocast::kernel() == expected;
  std::printf("oneDNN sees %s; autocast's products: %s\n", autocast::onednn_isa_name().data(),
              autocast::kernel_name(autocast::kernel()).data());

  // oneDNN's own kernel, asked for: bfloat16 on any AVX-512 CPU (emulated without AVX512_BF16).
  Generator gen(3);
  Tensor a = randn({16, 32}, kFloat32, gen), b = randn({32, 8}, kFloat32, gen);
  const Tensor fp32 = a.matmul(b);
  if (std::string_view(autocast::onednn_isa_name()).rfind("avx512", 0) == 0) {
    autocast::set_kernel(autocast::Kernel::OneDnn);
    autocast::Guard bf16(kBFloat16);
    const double worst = (a.matmul(b) - fp32).abs().max().item<float>();
    std::printf("bfloat16 product vs float32: largest difference %g\n", worst);
    ok = ok && worst > 0 && worst < 0.5;  // 32 terms of |a||b| ~ 1, each rounded to 8 bits
  }
  std::printf("%s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
