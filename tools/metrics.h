// Training logs that other tools read: a scalar (the loss, the learning rate) or a histogram (of
// weights, of gradients) per step, written to a directory as
//   - metrics.jsonl: one JSON object a line, {"step":100,"wall_time":1795766400.25,"tag":"train/loss","value":2.61}
//     (a histogram's line has "histogram":{"min","max","num","sum","sum_squares","bucket_limit","bucket"}
//     instead of "value"); what a script or pandas.read_json(lines=True) reads;
//   - metrics.csv when asked: step,wall_time,tag,value (scalars only);
//   - a TensorBoard event file, events.out.tfevents.<seconds>.<host>: `tensorboard --logdir DIR`
//     draws its scalars and histograms (docs/training-logs.md).
//
//   cppgrad::metrics::Logger log("runs/char_lm");
//   log.scalar("train/loss", loss, step);          // PyTorch's SummaryWriter.add_scalar
//   log.histogram("weights/fc1", values, step);    // add_histogram (metrics::log_histograms: a module's)
//
// The event file is TensorFlow's record format: each record a little-endian uint64 length, the
// masked CRC-32C of those 8 bytes, the data, and the masked CRC-32C of the data; each record's
// data an Event protobuf (TensorFlow's schema, tools/event.proto, encoded by libprotobuf). Every line and record is flushed as written, so a run that dies leaves a
// readable log of what it reached.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cppgrad::metrics {

struct LoggerOptions {
  bool tensorboard = true;  // the event file
  bool csv = false;         // metrics.csv beside metrics.jsonl
  int histogram_bins = 30;  // equal-width bins between a histogram's min and max
};

class Logger {
 public:
  // Creates `dir` (and its parents) when missing; appends to its metrics.jsonl (and .csv), and
  // starts a new event file (TensorBoard reads every event file of a directory). Throws
  // cppgrad::Error naming the path when it cannot write there.
  explicit Logger(const std::string& dir, LoggerOptions options = {});
  Logger(const Logger&) = delete;
  Logger& operator=(const Logger&) = delete;

  // A value of `tag` at `step`; a NaN or an infinity is written as JSON's null (and as itself
  // in the event file, where TensorBoard shows it). Tags: what TensorBoard groups by their
  // first "/": "train/loss", "eval/loss".
  void scalar(std::string_view tag, double value, int64_t step);
  // The distribution of `values` at `step` (non-finite values are left out and counted apart in
  // the JSONL line's "non_finite").
  void histogram(std::string_view tag, std::span<const float> values, int64_t step);

  const std::string& dir() const { return dir_; }
  const std::string& event_file() const { return event_path_; }  // empty without TensorBoard
  std::string jsonl_file() const { return dir_ + "/metrics.jsonl"; }

 private:
  void write_event(const std::string& event);
  std::string dir_, event_path_;
  LoggerOptions options_;
  std::ofstream jsonl_, csv_, events_;
};

// ---- reading a log back -------------------------------------------------------------------------
// The (step, value) points of `tag` in a metrics.jsonl, in the file's order (a NaN or an infinity,
// written as null, comes back as NaN). The file is untrusted: a line that is not such an object
// throws cppgrad::Error naming the file, the line's number and what is wrong with it (not JSON, a
// NUL byte, invalid UTF-8, a number too large for a double, no "step" or one that is not a whole
// number, ...). One exception: a last line without a newline that does not parse is what a run
// killed mid-write leaves, so it is left out with a warning, into `warnings` when given, else on
// stderr, and the lines before it are read. The file is read a line at a time: memory is bounded
// by the longest line, and a line longer than kLongestLogLine is refused by its number.
inline constexpr size_t kLongestLogLine = size_t{4} << 20;  // 4 MiB; a 10,000-bin histogram's line is < 1 MB
std::vector<std::pair<double, double>> read_scalars(const std::string& jsonl_path, std::string_view tag,
                                                    std::vector<std::string>* warnings = nullptr);

// ---- the pieces of the event file, for its tests ------------------------------------------------
// CRC-32C (Castagnoli), as TFRecord checks its records, and its masked form (rotated right by 15
// bits plus 0xa282ead8: a CRC of data that holds CRCs would otherwise be degenerate).
uint32_t crc32c(std::string_view bytes);
uint32_t masked_crc32c(std::string_view bytes);
// One TFRecord: the length, its masked CRC, the data, the data's masked CRC.
std::string tfrecord(std::string_view data);

}  // namespace cppgrad::metrics
