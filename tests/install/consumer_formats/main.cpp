// Uses the installed file-format components: an .npz round trip (cppgrad::npz, through libzip)
// and a BPE tokenizer (cppgrad::bpe, through PCRE2). Exits 0 when each gives the right answer.
#include <cppgrad/cppgrad.h>
#include <cppgrad/data/bpe/bpe.h>
#include <cppgrad/data/npz/npy.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

int main() {
  using namespace cppgrad;
  // .npz files (libzip): written and read back.
  const Tensor w = tensor({0.5, -1});
  const std::string npz = (std::filesystem::temp_directory_path() / "cppgrad_consumer_formats.npz").string();
  data::save_npz(npz, {{"w", w}});
  bool ok = data::load_npz(npz).at(0).second.to_vector<float>() == std::vector<float>{0.5f, -1.0f};
  std::filesystem::remove(npz);

  // The BPE tokenizer (PCRE2 splits the text before merging): a text round-trips.
  const data::BPETokenizer tokenizer = data::BPETokenizer::train("low lower lowest low low", 260);
  ok = ok && tokenizer.decode(tokenizer.encode("lowest low")) == "lowest low";

  std::printf("npz and bpe: %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
