#include "common/checkpoints.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>
#include <system_error>

#include "common/cli_app.h"
#include "common/data_parallel.h"

using namespace cppgrad;
namespace fs = std::filesystem;

namespace examples {

namespace {

constexpr const char* kPrefix = "step-";
constexpr const char* kSuffix = ".safetensors";

// The step of a checkpoint's file name, or -1 for any other name.
int64_t step_of(const std::string& name) {
  const std::string prefix = kPrefix, suffix = kSuffix;
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix)) return -1;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  int64_t step = -1;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  return error == std::errc() && end == digits.data() + digits.size() ? step : -1;
}

// The rank, step and signal of CPPGRAD_INJECT_SIGNAL=SIGNAL:RANK:STEP (checkpoints.h); nothing
// when it is unset.
struct SignalPlan {
  int signal = 0;
  int rank = 0;
  int64_t step = 0;  // -1: "end"
};

// A whole non-negative number.
bool parse_count(std::string_view digits, int64_t& value) {
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  return !digits.empty() && error == std::errc() && end == digits.data() + digits.size() && value >= 0;
}

std::optional<SignalPlan> signal_plan() {
  const char* text = std::getenv("CPPGRAD_INJECT_SIGNAL");
  if (text == nullptr || *text == '\0') return std::nullopt;
  const std::string_view s = text;
  const size_t first = s.find(':'), second = first == s.npos ? s.npos : s.find(':', first + 1);
  SignalPlan plan;
  bool valid = second != s.npos;
  if (valid) {
    const std::string_view signal = s.substr(0, first), rank = s.substr(first + 1, second - first - 1),
                           step = s.substr(second + 1);
    plan.signal = signal == "KILL" ? SIGKILL : signal == "STOP" ? SIGSTOP : 0;
    int64_t rank_number = -1;
    valid = plan.signal != 0 && parse_count(rank, rank_number) && rank_number < distributed::world_size();
    plan.rank = static_cast<int>(rank_number);
    if (step == "end")
      plan.step = -1;
    else
      valid = valid && parse_count(step, plan.step);
  }
  CPPGRAD_CHECK(valid, "CPPGRAD_INJECT_SIGNAL is '{}', not SIGNAL:RANK:STEP (KILL or STOP, a rank below {}, a step "
                "or end)", excerpt(s), distributed::world_size());
  return plan;
}

}  // namespace

void add_checkpoint_options(CLI::App& app, CheckpointOptions& c) {
  app.add_option("--save-every", c.save_every, "during training, write a checkpoint every N steps (and at the last) "
                 "into --save-dir; 0: none")->check(CLI::Range(int64_t{0}, int64_t{100'000'000}));
  app.add_option("--keep-last", c.keep_last, "keep only the K newest checkpoints of --save-every (0: every one)")
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000}))
      ->each([&c](const std::string&) { c.keep_last_given = true; });
  app.add_option("--save-dir", c.save_dir, "the directory of --save-every's checkpoints, and of --resume latest")
      ->check(names_a_path())
      ->each([&c](const std::string&) { c.save_dir_given = true; });
}

CLI::Validator resume_target() {
  return CLI::Validator(
      [](const std::string& text) -> std::string {
        std::error_code ignored;
        if (text == "latest" || fs::is_directory(text, ignored)) return {};
        struct stat info {};
        if (::stat(text.c_str(), &info) != 0) return fmt::format("'{}' does not exist (a file, a directory or latest)",
                                                                  excerpt(text));
        return {};  // a file: read, and refused when it is not a regular one, by the loader
      },
      "FILE, DIR or latest");
}

std::string checkpoint_file_name(int64_t step) { return fmt::format("{}{:08d}{}", kPrefix, step, kSuffix); }

std::vector<int64_t> checkpoint_steps(const fs::path& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int64_t step = step_of(it->path().filename().string());
    if (step >= 0) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

namespace {

std::string newest_checkpoint(const std::string& resume, const CheckpointOptions& c, bool lead) {
  if (resume.empty()) return {};
  const bool latest = resume == "latest";
  std::error_code ignored;  // a path that cannot be read as a directory is a file for the loader to judge
  if (!latest && !fs::is_directory(resume, ignored)) return resume;
  const std::string dir = latest ? c.save_dir : resume;
  // A --save-dir not made yet is a first run; one that is a file is a mistake to say, not to start over on.
  CPPGRAD_CHECK(!latest || !fs::exists(dir, ignored) || fs::is_directory(dir, ignored),
                "--resume latest: --save-dir '{}' is not a directory", excerpt(dir));
  // Rank 0's answer on every rank: all must load the same checkpoint.
  int64_t newest = -1;
  if (distributed::rank() == 0) {
    const std::vector<int64_t> steps = checkpoint_steps(dir);
    if (!steps.empty()) newest = steps.back();
  }
  if (distributed::world_size() > 1) {
    Tensor t = scalar_tensor(newest, kInt64);
    distributed::broadcast(t, 0);
    newest = t.item<int64_t>();
  }
  if (newest < 0) {
    CPPGRAD_CHECK(latest, "--resume: the directory '{}' holds no checkpoint (step-*.safetensors, written by --save-every)",
                  excerpt(dir));
    if (lead) fmt::print("note: --resume latest: no checkpoint in {} yet; starting a new run\n", dir);
    return {};
  }
  return (fs::path(dir) / checkpoint_file_name(newest)).string();
}

}  // namespace

std::optional<cppgrad::AllocationLimit> limit_to_checkpoint(const std::string& resume) {
  if (resume.empty()) return std::nullopt;
  const double file_bytes = static_cast<double>(std::filesystem::file_size(resume));
  return std::optional<cppgrad::AllocationLimit>(
      std::in_place, static_cast<size_t>(4 * file_bytes) + (size_t{64} << 20),
      fmt::format("--resume {}: the model its metadata describes (allowed: 4 times the file's {:.3g} MB, plus 64 MiB)",
                  resume, file_bytes / 1e6));
}

std::string resolve_resume(const std::string& resume, const CheckpointOptions& c, bool lead) {
  // Each would do nothing without the option that gives it a meaning (a --save-every of 0 is none).
  CPPGRAD_CHECK(!c.keep_last_given || c.save_every > 0, "--keep-last requires --save-every (of 1 or more)");
  CPPGRAD_CHECK(!c.save_dir_given || c.save_every > 0 || resume == "latest",
                "--save-dir requires --save-every (of 1 or more) or --resume latest");
  std::string file = newest_checkpoint(resume, c, lead);
  announce_restart(file, lead);
  return file;
}

namespace {
// Says an injection's line on stderr and, when CPPGRAD_INJECT_SIGNAL_LOG names a file, appends it
// there too: a job that its watchdog aborts may end before mpirun has forwarded the last output
// of a rank that stopped itself, so the test reads the file rather than the job's output.
void say_injection(const std::string& line) {
  fmt::print(stderr, "{}\n", line);
  std::fflush(stdout);
  std::fflush(stderr);
  if (const char* path = std::getenv("CPPGRAD_INJECT_SIGNAL_LOG")) {
    if (std::FILE* file = std::fopen(path, "a")) {
      std::fputs((line + "\n").c_str(), file);
      std::fclose(file);
    }
  }
}
}  // namespace

PeriodicCheckpoints::PeriodicCheckpoints(const CheckpointOptions& c, int64_t last_step, bool lead)
    : options_(c), last_step_(last_step), lead_(lead) {
  if (const std::optional<SignalPlan> plan = signal_plan()) {
    say_injection(fmt::format("CPPGRAD_INJECT_SIGNAL: rank {} is pid {}", distributed::rank(), ::getpid()));
    if (plan->rank == distributed::rank() && restart_count() == 0)
      injected_ = InjectedSignal{plan->signal, plan->step};
  }
  if (options_.save_every > 0 && lead_) check_writable_in("--save-dir", options_.save_dir, checkpoint_file_name(0));
}

PeriodicCheckpoints::~PeriodicCheckpoints() {
  if (injected_ && injected_->step < 0 && std::uncaught_exceptions() == 0) raise_injected("at the end of the run");
}

// The process raises the signal on itself: it lands at that very point of the program however
// loaded the machine is, where a test that watched the files and signalled the process would
// land it some steps later, or after the job's end.
void PeriodicCheckpoints::raise_injected(const std::string& when) {
  const int signal = injected_->signal;
  injected_.reset();  // once: a stopped rank that is continued goes on
  say_injection(fmt::format("CPPGRAD_INJECT_SIGNAL: rank {} (pid {}) raises SIG{} {}", distributed::rank(), ::getpid(),
                            signal == SIGKILL ? "KILL" : "STOP", when));
  std::raise(signal);
}

bool PeriodicCheckpoints::due(int64_t step) const {
  return options_.save_every > 0 && (step % options_.save_every == 0 || step == last_step_);
}

void PeriodicCheckpoints::save(int64_t step, const optim::TrainingState& state, const nn::Metadata& metadata) {
  const fs::path dir(options_.save_dir);
  // Made at the first checkpoint, so that a run which ends before it leaves no empty directory. A
  // failure here is left to rank 0's write to report, after the collective part of saving, so
  // that no rank waits in it for a rank that stopped.
  std::error_code ignored;
  if (lead_) fs::create_directories(dir, ignored);
  save_run_file((dir / checkpoint_file_name(step)).string(), state, metadata);  // a collective
  remove_older(step);
  if (injected_ && injected_->step >= 0 && step >= injected_->step)
    raise_injected(fmt::format("after the checkpoint of step {}", step));
}

void PeriodicCheckpoints::remove_older(int64_t step) {
  const fs::path dir(options_.save_dir);
  if (!lead_ || options_.keep_last == 0) return;
  // Only once the new one is in place: at every moment the directory holds a whole checkpoint.
  std::vector<int64_t> steps = checkpoint_steps(dir);
  std::erase(steps, step);  // never the one just written (an older run's may have larger steps)
  const size_t keep = static_cast<size_t>(options_.keep_last - 1);
  for (size_t i = 0; i + keep < steps.size(); ++i) {
    std::error_code ignored;
    fs::remove(dir / checkpoint_file_name(steps[i]), ignored);
  }
}

void PeriodicCheckpoints::save_if_due(int64_t step, const optim::TrainingState& state, StepLosses& losses,
                                      std::vector<std::pair<double, double>>& curve,
                                      const std::function<nn::Metadata()>& make_metadata) {
  if (!due(step)) return;
  losses.flush(step, curve);
  save(step, state, make_metadata());
}

int restart_count() {
  const char* text = std::getenv("CPPGRAD_RESTART_COUNT");
  if (text == nullptr || *text == '\0') return 0;
  const std::string s = text;
  int count = -1;
  const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), count);
  CPPGRAD_CHECK(error == std::errc() && end == s.data() + s.size() && count >= 0,
                "CPPGRAD_RESTART_COUNT is '{}', not a count of restarts", excerpt(s));
  return count;
}

void announce_restart(const std::string& resume, bool lead) {
  const int count = restart_count();
  if (count == 0 || !lead) return;
  if (resume.empty())
    fmt::print("note: restart {} of this job (CPPGRAD_RESTART_COUNT), without --resume: starting over "
               "(--resume latest continues from the last checkpoint)\n", count);
  else
    fmt::print("restart {} of this job (CPPGRAD_RESTART_COUNT)\n", count);
}

}  // namespace examples
