// Uses the installed program tools (cppgrad/tools/tools.h): a training log written to a
// temporary directory and its scalars read back, a loss curve drawn from them, and the
// progress line's durations. Exits 0 when each gives the right answer.
#include <cppgrad/cppgrad.h>
#include <cppgrad/tools/tools.h>

#include <cstdio>
#include <filesystem>
#include <string>

int main() {
  using namespace cppgrad;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "cppgrad_consumer_tools";
  std::filesystem::remove_all(dir);
  bool ok = true;
  {
    metrics::Logger log(dir.string());
    log.scalar("train/loss", 2.0, 1);
    log.scalar("train/loss", 1.0, 2);
    ok = ok && std::filesystem::file_size(log.event_file()) > 0;
  }
  const auto points = metrics::read_scalars((dir / "metrics.jsonl").string(), "train/loss");
  ok = ok && points.size() == 2 && points[1].first == 2 && points[1].second == 1.0;
  std::filesystem::remove_all(dir);

  const std::string svg = plot::draw_loss_curves({.title = "consumer", .train = points}).svg();
  ok = ok && svg.starts_with("<svg ") && svg.find(">consumer<") != std::string::npos;
  ok = ok && format_duration(187) == "3m07s";

  std::printf("%zu points logged and read back, a %zu-byte loss curve: %s\n", points.size(), svg.size(),
              ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
