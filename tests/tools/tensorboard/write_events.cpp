// Writes a training log with known values into the directory given, for check_events.py:
//   train/loss = 1 / step at steps 1..20, except step 7: NaN; eval/loss = 2 / step at steps 5, 10,
//   15, 20; and at step 20 the histogram "weights/w" of the values -1, -0.5, ..., 1.5 (nine of
//   them, 0.25 apart) plus an infinity, which a histogram leaves out.
#include <cmath>
#include <cstdio>
#include <vector>

#include "tools/metrics.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_events DIR\n");
    return 2;
  }
  cppgrad::metrics::Logger log(argv[1], {.tensorboard = true, .csv = true, .histogram_bins = 5});
  for (int step = 1; step <= 20; ++step) {
    log.scalar("train/loss", step == 7 ? std::nan("") : 1.0 / step, step);
    if (step % 5 == 0) log.scalar("eval/loss", 2.0 / step, step);
  }
  std::vector<float> w;
  for (int i = 0; i < 9; ++i) w.push_back(-1.0f + 0.25f * static_cast<float>(i));
  w.push_back(INFINITY);
  log.histogram("weights/w", w, 20);
  std::printf("%s\n", log.event_file().c_str());
  return 0;
}
