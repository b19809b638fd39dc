// The event file's Events are protobufs of TensorFlow's schema (tools/event.proto), encoded by
// libprotobuf from the classes protoc generates; the TFRecord framing around them (a length and
// two masked CRC-32Cs) is TensorFlow's own and is written here. The JSON lines are nlohmann-json's.
#include "tools/metrics.h"

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "event.pb.h"
#include "runtime/error.h"
#include "runtime/files.h"

namespace cppgrad::metrics {

// ---- CRC-32C and TFRecord framing ----------------------------------------------------------------

namespace {
// The reflected Castagnoli polynomial 0x1EDC6F41.
constexpr std::array<uint32_t, 256> crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = crc_table();

void put_fixed(std::string& out, uint64_t value, int bytes) {  // little-endian
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}
}  // namespace

uint32_t crc32c(std::string_view bytes) {
  uint32_t c = 0xffffffffu;
  for (unsigned char b : bytes) c = kCrcTable[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  std::string length;
  put_fixed(length, data.size(), 8);
  std::string out = length;
  put_fixed(out, masked_crc32c(length), 4);
  out += data;
  put_fixed(out, masked_crc32c(data), 4);
  return out;
}

namespace {

namespace tb = cppgrad::tensorboard;

// An Event of `value` (one Summary.Value) at `step`.
tb::Event summary_event(double wall_time, int64_t step, tb::Summary::Value value) {
  tb::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  *event.mutable_summary()->add_value() = std::move(value);
  return event;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A line of metrics.jsonl, its keys in the order written; nlohmann-json writes a NaN or an
// infinity (which JSON lacks) as null, and a double as its shortest round trip.
void write_line(std::ofstream& jsonl, const nlohmann::ordered_json& line) {
  jsonl << line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << '\n' << std::flush;
}

// Seconds since 1970 to the millisecond, as the logs' wall_time.
double to_milliseconds(double seconds) { return std::round(seconds * 1000) / 1000; }

std::string host_name() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return "localhost";
  std::string name(host);
  for (char& c : name)
    if (c == '/') c = '_';
  return name;
}

void check_good(const std::ofstream& file, const std::string& path) {
  CPPGRAD_CHECK(file.good(), "metrics::Logger: writing '{}' failed", path);
}
}  // namespace

// ---- the logger ------------------------------------------------------------------------------------

Logger::Logger(const std::string& dir, LoggerOptions options) : dir_(dir), options_(options) {
  CPPGRAD_CHECK(!dir.empty(), "metrics::Logger: the log directory is empty");
  CPPGRAD_CHECK(options.histogram_bins >= 1 && options.histogram_bins <= 10000,
                "metrics::Logger: histogram_bins {} is not in [1, 10000]", options.histogram_bins);
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  CPPGRAD_CHECK(std::filesystem::is_directory(dir), "metrics::Logger: cannot create the directory '{}'{}", dir,
                error ? ": " + error.message() : "");
  jsonl_.open(jsonl_file(), std::ios::binary | std::ios::app);
  CPPGRAD_CHECK(jsonl_.good(), "metrics::Logger: cannot open '{}' for writing", jsonl_file());
  if (options.csv) {
    const std::string path = dir + "/metrics.csv";
    const bool fresh = !std::filesystem::exists(path) || std::filesystem::file_size(path) == 0;
    csv_.open(path, std::ios::binary | std::ios::app);
    CPPGRAD_CHECK(csv_.good(), "metrics::Logger: cannot open '{}' for writing", path);
    if (fresh) csv_ << "step,wall_time,tag,value\n" << std::flush;
  }
  if (options.tensorboard) {
    // TensorBoard's own writers name their files so; one per Logger, never appended to.
    const auto seconds = static_cast<int64_t>(std::time(nullptr));
    event_path_ = fmt::format("{}/events.out.tfevents.{}.{}", dir, seconds, host_name());
    for (int n = 1; std::filesystem::exists(event_path_); ++n)  // a second Logger in the same second
      event_path_ = fmt::format("{}/events.out.tfevents.{}.{}.{}", dir, seconds, host_name(), n);
    events_.open(event_path_, std::ios::binary);
    CPPGRAD_CHECK(events_.good(), "metrics::Logger: cannot open '{}' for writing", event_path_);
    tb::Event first;  // the file's first event names its version, as TensorFlow's writers do
    first.set_wall_time(now_seconds());
    first.set_file_version("brain.Event:2");
    write_event(first.SerializeAsString());
  }
}

void Logger::write_event(const std::string& event) {
  events_ << tfrecord(event) << std::flush;
  check_good(events_, event_path_);
}

void Logger::scalar(std::string_view tag, double value, int64_t step) {
  const double wall = now_seconds();
  write_line(jsonl_, {{"step", step}, {"wall_time", to_milliseconds(wall)}, {"tag", tag}, {"value", value}});
  check_good(jsonl_, jsonl_file());
  if (csv_.is_open()) {
    // A tag is quoted when it holds a comma or a quote (RFC 4180: quotes doubled).
    std::string cell(tag);
    if (cell.find_first_of(",\"\n") != std::string::npos) {
      std::string quoted = "\"";
      for (char c : cell) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
      cell = quoted + "\"";
    }
    csv_ << fmt::format("{},{:.3f},{},{}\n", step, wall, cell, std::isfinite(value) ? fmt::format("{}", value) : "")
         << std::flush;
    check_good(csv_, dir_ + "/metrics.csv");
  }
  if (events_.is_open()) {
    tb::Summary::Value v;
    v.set_tag(std::string(tag));
    v.set_simple_value(static_cast<float>(value));
    write_event(summary_event(wall, step, std::move(v)).SerializeAsString());
  }
}

void Logger::histogram(std::string_view tag, std::span<const float> values, int64_t step) {
  const double wall = now_seconds();
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0, sum_squares = 0, num = 0;
  int64_t non_finite = 0;
  for (float f : values) {
    if (!std::isfinite(f)) {
      ++non_finite;
      continue;
    }
    const double v = f;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    sum_squares += v * v;
    num += 1;
  }
  if (num == 0) lo = hi = 0;
  // Equal-width bins over [lo, hi], each named by its upper edge (bucket_limit) as TensorBoard
  // reads them; a bin holds [its lower edge, its limit), the last also hi. One bin when every
  // value is the same.
  const int bins = hi > lo ? options_.histogram_bins : 1;
  std::vector<double> limits(static_cast<size_t>(bins)), counts(static_cast<size_t>(bins), 0.0);
  for (int i = 0; i < bins; ++i) limits[static_cast<size_t>(i)] = i + 1 == bins ? hi : lo + (hi - lo) * (i + 1) / bins;
  for (float f : values) {
    if (!std::isfinite(f)) continue;
    const double v = f;
    auto i = bins == 1 ? 0 : static_cast<int64_t>((v - lo) / (hi - lo) * bins);
    i = std::clamp<int64_t>(i, 0, bins - 1);
    counts[static_cast<size_t>(i)] += 1;
  }
  write_line(jsonl_, {{"step", step},
                      {"wall_time", to_milliseconds(wall)},
                      {"tag", tag},
                      {"histogram",
                       {{"min", lo}, {"max", hi}, {"num", num}, {"sum", sum}, {"sum_squares", sum_squares},
                        {"bucket_limit", limits}, {"bucket", counts}}},
                      {"non_finite", non_finite}});
  check_good(jsonl_, jsonl_file());
  if (events_.is_open()) {
    tb::Summary::Value v;
    v.set_tag(std::string(tag));
    tb::HistogramProto& histo = *v.mutable_histo();
    histo.set_min(lo);
    histo.set_max(hi);
    histo.set_num(num);
    histo.set_sum(sum);
    histo.set_sum_squares(sum_squares);
    histo.mutable_bucket_limit()->Add(limits.begin(), limits.end());
    histo.mutable_bucket()->Add(counts.begin(), counts.end());
    write_event(summary_event(wall, step, std::move(v)).SerializeAsString());
  }
}

// ---- reading a log back ------------------------------------------------------------------------

namespace {

// Where a line's bytes stop being UTF-8: the offset of the first byte of a malformed sequence
// (overlong forms, surrogates and code points past U+10FFFF included), or npos.
size_t invalid_utf8_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;
    uint32_t code = 0, least = 0;
    if ((b & 0xE0) == 0xC0) n = 1, code = b & 0x1F, least = 0x80;
    else if ((b & 0xF0) == 0xE0) n = 2, code = b & 0x0F, least = 0x800;
    else if ((b & 0xF8) == 0xF0) n = 3, code = b & 0x07, least = 0x10000;
    else return i;
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return i;
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return i;
      code = (code << 6) | (c & 0x3F);
    }
    if (code < least || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return i;
    i += n + 1;
  }
  return std::string_view::npos;
}

// Why `row` is not a logged value, or "" when it is one; `j` is the line parsed, when it parses.
std::string line_problem(std::string_view row, nlohmann::json& j) {
  if (const size_t nul = row.find('\0'); nul != std::string_view::npos)
    return fmt::format("holds a NUL byte at column {}", nul + 1);
  if (const size_t bad = invalid_utf8_at(row); bad != std::string_view::npos)
    return fmt::format("is not valid UTF-8 (byte 0x{:02x} at column {})", static_cast<unsigned char>(row[bad]), bad + 1);
  try {
    j = nlohmann::json::parse(row);
  } catch (const nlohmann::json::out_of_range& e) {  // 406: a number past the largest double, as 1e999
    return fmt::format("has a number too large for a double ({})", excerpt(e.what(), 120));
  } catch (const nlohmann::json::exception& e) {
    return fmt::format("is not JSON ({})", excerpt(e.what(), 120));
  }
  if (!j.is_object()) return "is not a JSON object";
  if (!j.contains("step")) return "has no \"step\"";
  const nlohmann::json& step = j["step"];
  // A step is a count: a whole number, exact as the double it is returned as.
  constexpr double kLargestStep = 9007199254740992.0;  // 2^53
  if (!step.is_number()) return "has a \"step\" that is not a number";
  const double s = step.get<double>();
  if (!(s >= 0 && s <= kLargestStep && s == std::floor(s)))
    return fmt::format("has a \"step\" of {} (not a whole number in [0, 2^53])", step.dump());
  if (!j.contains("tag")) return "has no \"tag\"";
  if (!j["tag"].is_string()) return "has a \"tag\" that is not a string";
  if (j.contains("value") && !j["value"].is_number() && !j["value"].is_null())
    return "has a \"value\" that is not a number";
  return "";
}

}  // namespace

std::vector<std::pair<double, double>> read_scalars(const std::string& jsonl_path, std::string_view tag,
                                                    std::vector<std::string>* warnings) {
  const std::string where = fmt::format("metrics::read_scalars: '{}'", excerpt(jsonl_path));
  files::InputFile file(jsonl_path, "metrics::read_scalars");
  // Read a chunk at a time, one line kept whole: memory stays within a chunk and the longest line
  // allowed, however large the file.
  std::vector<char> chunk(size_t{1} << 16);
  std::string row;
  std::vector<std::pair<double, double>> points;
  int64_t line = 1;
  size_t filled = 0, at = 0;
  for (;;) {
    if (at == filled) {
      filled = file.read(chunk.data(), chunk.size());
      at = 0;
    }
    const bool at_end = filled == 0;
    const char* begin = chunk.data() + at;
    const char* newline = at_end ? nullptr : static_cast<const char*>(std::memchr(begin, '\n', filled - at));
    const size_t take = newline ? static_cast<size_t>(newline - begin) : filled - at;
    CPPGRAD_CHECK(row.size() + take <= kLongestLogLine, "{} line {} is longer than the limit of {} bytes", where, line,
                  kLongestLogLine);
    row.append(begin, take);
    at += take + (newline ? 1 : 0);
    if (!newline && !at_end) continue;  // the line goes on in the next chunk
    if (at_end && row.empty()) break;
    nlohmann::json j(nlohmann::json::value_t::discarded);  // until the line parses
    if (!row.empty()) {
      if (const std::string problem = line_problem(row, j); !problem.empty()) {
        // The last line, cut short: a run killed while writing it. Its earlier lines are whole.
        if (at_end && j.is_discarded()) {
          const std::string warning =
              fmt::format("{} line {} has no newline at its end and {}: the log was cut short (a run killed while "
                          "writing it?); the line is left out", where, line, problem);
          if (warnings) warnings->push_back(warning);
          else fmt::print(stderr, "warning: {}\n", warning);
          break;
        }
        throw Error(fmt::format("{} line {} {}", where, line, problem));
      }
      if (j["tag"].get_ref<const std::string&>() == tag && j.contains("value")) {
        const nlohmann::json& v = j["value"];
        points.emplace_back(j["step"].get<double>(), v.is_null() ? std::nan("") : v.get<double>());
      }
    }
    if (at_end) break;
    row.clear();
    ++line;
  }
  return points;
}

}  // namespace cppgrad::metrics
