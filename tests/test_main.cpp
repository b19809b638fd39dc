// The test programs' main: doctest's, plus one switch for re-running a suite with every
// attention computed by the fused kernel (tests/CMakeLists.txt runs the PyTorch parity cases
// so): CPPGRAD_TEST_ATTENTION=fused or =materialize.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "nn/functional.h"

int main(int argc, char** argv) {
  namespace F = cppgrad::nn::functional;
  if (const char* backend = std::getenv("CPPGRAD_TEST_ATTENTION")) {
    const std::string name = backend;
    if (name == "fused") F::set_attention_backend(F::AttentionBackend::Fused);
    else if (name == "materialize") F::set_attention_backend(F::AttentionBackend::Materialize);
    else {
      std::fprintf(stderr, "CPPGRAD_TEST_ATTENTION must be fused or materialize, not '%s'\n", backend);
      return 2;
    }
  }
  return doctest::Context(argc, argv).run();
}
