// Every loader that takes a path reads only a regular file, and refuses anything else at once:
// a FIFO with no writer (which a plain open would wait on for ever), a directory, and a device
// that never ends. The refusal names the loader and says what the path is.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "cppgrad.h"
#include "runtime/files.h"
#include "data/npz/npy.h"
#include "data/bpe/bpe.h"

using namespace cppgrad;
namespace fs = std::filesystem;

TEST_CASE("every loader refuses a FIFO, a directory and a device at once, naming what the path is") {
  const fs::path dir = fs::temp_directory_path() / "cppgrad_test_paths";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string fifo = (dir / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);

  nn::Linear model(2, 2);
  optim::TrainingState state;
  state.add("model", model);
  struct Loader {
    const char* name;
    std::function<void(const std::string&)> load;
  };
  const std::vector<Loader> loaders = {
      {"load_npy", [](const std::string& p) { data::load_npy(p); }},
      {"load_npz", [](const std::string& p) { data::load_npz(p); }},
      {"load_safetensors", [](const std::string& p) { nn::load_safetensors(p); }},
      {"load_safetensors", [&](const std::string& p) { nn::load(model, p); }},
      {"load_safetensors", [&](const std::string& p) { state.load(p); }},
      {"read_file_bytes", [](const std::string& p) { data::read_char_text(p); }},
      {"BPETokenizer", [](const std::string& p) { data::BPETokenizer::load(p); }},
      {"reader", [](const std::string& p) { files::read_regular_file(p, "reader", 1 << 20); }},
  };
  for (const Loader& loader : loaders) {
    CAPTURE(loader.name);
    CHECK_THROWS_WITH_AS(loader.load(fifo), doctest::Contains(fmt::format("'{}' is not a regular file (a FIFO)", fifo).c_str()),
                         Error);
    CHECK_THROWS_WITH_AS(loader.load(dir.string()), doctest::Contains("is not a regular file (a directory)"), Error);
    CHECK_THROWS_WITH_AS(loader.load("/dev/zero"), doctest::Contains("is not a regular file (a character device)"),
                         Error);
    CHECK_THROWS_WITH_AS(loader.load((dir / "absent").string()), doctest::Contains("cannot open '"), Error);
    CHECK_THROWS_WITH_AS(loader.load(fifo), doctest::Contains(loader.name), Error);
  }
  fs::remove_all(dir);
}

TEST_CASE("files::read_regular_file reads a file whole, and refuses one over its limit before reading") {
  const fs::path path = fs::temp_directory_path() / "cppgrad_test_paths_file.txt";
  { std::ofstream(path) << "twelve bytes"; }
  CHECK(files::read_regular_file(path.string(), "reader", 12) == "twelve bytes");
  CHECK_THROWS_WITH_AS(files::read_regular_file(path.string(), "reader", 11),
                       doctest::Contains(("reader: '" + path.string() + "' has 12 bytes, more than the limit of 11").c_str()),
                       Error);
  files::InputFile file(path.string(), "reader");
  CHECK(file.size() == 12);
  char buffer[32];
  CHECK(file.read(buffer, 5) == 5);
  CHECK(file.read(buffer, sizeof buffer) == 7);  // the rest, then nothing
  CHECK(file.read(buffer, sizeof buffer) == 0);
  fs::remove(path);
}
