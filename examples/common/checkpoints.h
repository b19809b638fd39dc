// Checkpoints during training, so that a run that dies (a killed process, a lost machine, a
// watchdog that ended the job) has a last good state to continue from; and --resume of the
// newest one. The options every training program takes:
//
//   --save-every N   every N steps, and at the last step, DIR/step-00000120.safetensors (the whole
//                    run: what --save writes at the end, run_state.h)
//   --keep-last K    only the K newest of them are kept (default 3; 0 keeps every one)
//   --save-dir DIR   where they go (default "checkpoints"; made when missing)
//   --resume latest  the newest step-*.safetensors in --save-dir; when there is none yet, a new run
//                    (with a note), so one command line serves the first start and every restart
//   --resume DIR     the newest in DIR (refused when DIR holds none)
//   --resume FILE    that checkpoint
//
// Each is written atomically (nn::save_safetensors: a temporary file beside it, fsync, rename,
// then the directory synced), and the older ones are removed only after the new one is in place,
// so a process killed at any moment leaves every step-*.safetensors whole. "Newest" is the
// largest step in the name: a run branched from an older checkpoint should get its own
// --save-dir. A job rerun with the same command line and --resume latest continues from its last
// checkpoint: scripts/mpirun --max-restarts K does so after a failure (README, "Training that
// survives a lost process").
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/cli_declarations.h"
#include "cppgrad.h"
#include "runtime/allocation_limit.h"

namespace examples {

class StepLosses;  // data_parallel.h

struct CheckpointOptions {
  int64_t save_every = 0;  // 0: none during training
  int64_t keep_last = 3;   // 0: every one is kept
  std::string save_dir = "checkpoints";
  bool keep_last_given = false, save_dir_given = false;  // on the command line: refused where nothing reads them
};

// Declares --save-every, --keep-last and --save-dir on `app`.
void add_checkpoint_options(CLI::App& app, CheckpointOptions& c);
// The check of --resume: "latest", a directory, or an existing file.
CLI::Validator resume_target();

// The file name of step `step`'s checkpoint: "step-00000120.safetensors".
std::string checkpoint_file_name(int64_t step);
// The steps of the step-*.safetensors files in `dir`, in increasing order (none when `dir` does
// not exist). Other names (a temporary left by a killed save included) are not checkpoints.
std::vector<int64_t> checkpoint_steps(const std::filesystem::path& dir);

// The file --resume names: `resume` itself when it is a file; the newest checkpoint in the
// directory `resume`, or in c.save_dir for "latest"; "" for no --resume, and for "latest" when
// there is no checkpoint yet (rank 0, `lead`, prints a note). Rank 0 looks, and every rank takes
// its answer (a collective), so that all load the same file. On a restart (announce_restart,
// below) rank 0 says which it is.
std::string resolve_resume(const std::string& resume, const CheckpointOptions& c, bool lead);

// Held while a resumed run builds its model (and optimizer) from the checkpoint's metadata: the
// tensors made may take at most 4 times the file's bytes plus 64 MiB (the file holds every weight,
// and the optimizer's moments beside them), so an edited width or length is refused at its first
// allocation past that, naming the file, instead of taking the machine's memory first. None for
// `resume` "" (a new run).
std::optional<cppgrad::AllocationLimit> limit_to_checkpoint(const std::string& resume);

// Writes the checkpoints of --save-every. Made before training, it refuses a --save-dir that
// cannot be made or written (a cppgrad::Error naming the option); rank 0 makes it at the first
// checkpoint.
//
// It also loses a rank on purpose, for the tests of restarts (restart_check.sh), when
//   CPPGRAD_INJECT_SIGNAL=SIGNAL:RANK:STEP     (SIGNAL: KILL or STOP; STEP: a step, or "end")
// is set: on the first start only (CPPGRAD_RESTART_COUNT unset or 0), rank RANK raises that
// signal on itself right after the first checkpoint at or past step STEP, or with "end" when this
// object ends (after the training program's last collective, before its ProcessGroup ends).
// Each rank first says its pid on stderr, and the one that raises says so, with its pid; both
// lines also go to the file CPPGRAD_INJECT_SIGNAL_LOG names, if set. A value of another form is
// refused by name.
class PeriodicCheckpoints {
 public:
  PeriodicCheckpoints(const CheckpointOptions& c, int64_t last_step, bool lead);
  ~PeriodicCheckpoints();
  PeriodicCheckpoints(const PeriodicCheckpoints&) = delete;
  PeriodicCheckpoints& operator=(const PeriodicCheckpoints&) = delete;
  // Is a checkpoint due after step `step`: every save_every-th step, and the last.
  bool due(int64_t step) const;
  // Writes step `step`'s checkpoint (save_run_file: a collective, rank 0 writes), then removes
  // all but the keep_last newest.
  void save(int64_t step, const cppgrad::optim::TrainingState& state, const cppgrad::nn::Metadata& metadata);
  // When due(step): every step's loss into `curve` (losses.flush), then save() with the metadata
  // make_metadata() gives. Both are collectives: every rank calls it after every step.
  void save_if_due(int64_t step, const cppgrad::optim::TrainingState& state, StepLosses& losses,
                   std::vector<std::pair<double, double>>& curve, const std::function<cppgrad::nn::Metadata()>& make_metadata);

 private:
  // CPPGRAD_INJECT_SIGNAL, when this rank is to raise it
  struct InjectedSignal {
    int signal = 0;
    int64_t step = 0;  // -1: at the end
  };
  void raise_injected(const std::string& when);
  // Removes all but the keep_last newest checkpoints, never `step`'s (rank 0).
  void remove_older(int64_t step);

  CheckpointOptions options_;
  int64_t last_step_;
  bool lead_;
  std::optional<InjectedSignal> injected_;
};

// The restart a launcher says this is (scripts/mpirun --max-restarts sets CPPGRAD_RESTART_COUNT,
// as torchrun sets TORCHELASTIC_RESTART_COUNT): 0 for the first start. On a restart rank 0 prints it, with a note
// when the command line has no --resume (the run would start over).
int restart_count();
void announce_restart(const std::string& resume, bool lead);

}  // namespace examples
