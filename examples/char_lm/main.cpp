// char_lm: a decoder-only Transformer that learns to continue a text, one character at a time.
//
//   char_lm                                  # the GPL text every Debian machine has, about half a minute
//   char_lm --data book.txt --steps 5000 --plot loss.svg --prompt "Chapter 1"
//   char_lm --save run.safetensors           # ...later: char_lm --resume run.safetensors --steps 2000
//   char_lm --resume run.safetensors --steps 0 --prompt "You may"   # sample only
//   scripts/mpirun 2 build/release/examples/char_lm --threads 1        # data-parallel, 8 windows a rank
//
// The training windows are a data::TextDataset (every start in the first 90% of the text), read
// in a fresh random order each epoch by a data::DataLoader; under mpirun each process reads its
// share of every global batch (DistributedSampler) and DistributedDataParallel averages the
// gradients. Rank 0 alone evaluates, prints, writes files and samples.
//
// Exit codes: 0 done; 2 refused options or input (a checkpoint that does not fit, a path that
// cannot be written, a --data that is not a text file of a sensible size), with one line on
// stderr; 3 out of memory; 4 a NaN or an infinity in the loss, the gradient norm or the weights
// (one line naming the step and the quantity; nothing saved).
#include <CLI/CLI.hpp>
#include <cmath>
#include <fmt/core.h>
#include <memory>

#include "char_lm/evaluate.h"
#include "char_lm/model.h"
#include "char_lm/options.h"
#include "char_lm/sample.h"
#include "common/data_parallel.h"
#include "common/observe.h"

using namespace cppgrad;
using namespace char_lm;
namespace F = cppgrad::nn::functional;

int main(int argc, char** argv) {
  distributed::ProcessGroup world(argc, argv);  // a world of one without mpirun
  const bool lead = world.rank() == 0;          // rank 0 prints, evaluates, writes files and samples
  Options o;
  CLI::App app{"Train a decoder-only Transformer on a text file, character by character, then sample from it."};
  add_options(app, o);
  if (auto code = examples::parse_command_line(app, argc, argv, "char_lm")) return *code;
  return examples::run_program("char_lm", "--batch, --d-model, --ff, --layers or --data", [&] {
    examples::KeptOptions kept = kept_options(app, o);
    o.resume = examples::resolve_resume(o.resume, o.checkpoints, lead);  // --resume latest, or a directory
    std::optional<nn::SafetensorsContents> resumed = kept.resume_from_file(o.resume, lead);
    const int64_t rank_batch = check_options(o);  // everything that can be refused, before training
    const Text text = read_text(o);

    // ---- the model and AdamW, with the paper's schedule -----------------------------------------
    manual_seed(o.seed);  // the weights (rank 0's are broadcast); dropout is keyed by example
    auto built_from_metadata = examples::limit_to_checkpoint(o.resume);
    auto model = std::make_shared<CharLM>(text.vocab.size(), o.model);
    distributed::DistributedDataParallel ddp(model);  // rank 0's weights everywhere; hooks nothing in a world of one
    const distributed::ZeroRedundancyOptimizer::Factory adamw =
        distributed::ZeroRedundancyOptimizer::of<optim::AdamW>(optim::AdamWOptions(o.lr).beta2(0.99));
    const std::vector<optim::ParamGroup> groups = examples::weight_decay_groups(*model, o.lr, o.weight_decay);
    // --zero: each rank updates its 1/N of the parameters and keeps only that much of AdamW's state.
    std::unique_ptr<optim::Optimizer> optimizer =
        o.zero ? std::make_unique<distributed::ZeroRedundancyOptimizer>(groups, adamw) : adamw(groups);
    optim::Optimizer& opt = *optimizer;
    // Scaled to peak at --lr after the warm-up, then decaying as 1/√step. It has no end point, so a
    // resumed run continues the same curve whatever --steps it is given (a cosine decay must know
    // the last step in advance).
    optim::NoamLR schedule(opt, o.model.d_model, o.warmup, o.lr * std::sqrt(static_cast<double>(o.model.d_model * o.warmup)));
    built_from_metadata.reset();

    // ---- the data: every window of the first 90%, each rank its share of every epoch -----------
    data::DataLoader loader = training_loader(o, text, rank_batch, world.world_size(), world.rank());

    examples::TrainingLog log;
    optim::TrainingState state = examples::training_state({*model, opt, schedule, loader}, log);
    state.add_constant("data.vocab", text.vocab_tensor());  // a model only makes sense with its characters
    if (resumed) examples::resume_run(o.resume, checkpoint_of_this_model(std::move(*resumed), o, text), state);
    if (lead && !o.resume.empty()) fmt::print("resumed from {} at step {}\n", o.resume, log.step);
    examples::open_log(log, lead ? o.log_dir : "");  // --log-dir
    const data::Batch held_out = held_out_windows(text, o.model.seq_len);
    if (lead) print_run_line(o, text, model->parameter_count(), rank_batch, world.world_size());
    if (const auto* zero = dynamic_cast<const distributed::ZeroRedundancyOptimizer*>(&opt); zero && lead)
      fmt::print("--zero: AdamW's state sharded over {} processes, rank 0 keeping the moments of {} of {} parameters\n",
                 world.world_size(), zero->shard_end() - zero->shard_begin(), zero->numel());

    // ---- the training loop ---------------------------------------------------------------------
    examples::PeriodicCheckpoints periodic(o.checkpoints, o.steps, lead);  // --save-every
    Progress progress(o.steps, log.step);
    examples::StepLosses losses;  // each step's, until the next report
    examples::LossAboveUniform diverging(static_cast<int64_t>(text.vocab.size()));  // far above a guess's: stop
    std::optional<double> last_eval;
    const std::vector<Tensor> params = model->parameters();
    model->train();
    examples::StepTrace trace(lead ? o.trace : "", log.step, o.steps);  // --trace
    while (log.step < o.steps) {
      trace.before(log.step + 1);
      const data::Batch b = loader.next();
      // dropout keyed by this rank's examples: the masks one process draws on the global batch
      auto keyed = examples::dropout_scope(o.seed, log.step, o.batch);
      Tensor logits = model->forward(b["input"]);  // (B, T, vocab)
      Tensor loss = F::cross_entropy(logits.reshape({-1, text.vocab.size()}), b["target"].reshape({-1}));
      const double loss_value = loss.item();
      // A NaN or an infinity stops the run (exit 4) instead of training on: the loss and the
      // gradient norm clipping computes are one number each.
      examples::stop_if_non_finite(log.step + 1, "the training loss", loss_value, *model);
      opt.zero_grad();
      loss.backward();  // under mpirun, returns with the gradients averaged over the ranks
      keyed.reset();    // the step's forward and backward are done
      examples::stop_if_non_finite(log.step + 1, "the gradient norm", optim::clip_grad_norm_(params, o.clip), *model);
      opt.step();
      schedule.step();
      ++log.step;

      losses.add(loss_value);
      if (auto held = examples::report_step(log, losses, progress, o.steps, o.eval_every, opt.lr(),
                                            o.batch * o.model.seq_len, lead, [&] { return loss_on(*model, held_out); },
                                            diverging))
        last_eval = held;
      if (!diverging.above())
        periodic.save_if_due(log.step, state, losses, log.train_curve,  // --save-every; a collective
                             [&] { return checkpoint_metadata(o, kept, last_eval.value_or(std::nan(""))); });
    }
    if (lead) progress.finish();
    trace.finish();  // --trace: a trace that cannot be written fails the run
    examples::stop_if_weights_non_finite(log.step, *model);  // the last update's, before anything is kept
    const double train_seconds = progress.elapsed_seconds();
    const double held = lead ? report_held_out(last_eval ? *last_eval : loss_on(*model, held_out), log.step, train_seconds)
                             : 0.0;

    // ---- what the run leaves: a checkpoint, the curves, a sample -------------------------------
    if (!o.save.empty()) examples::save_run_file(o.save, state, checkpoint_metadata(o, kept, held));
    if (!lead) return 0;
    if (!o.plot.empty()) {
      training_curves(o, text, log.step, held, held_out["input"].size(0), log.train_curve, log.eval_curve).write(o.plot);
      fmt::print("training curves written to {}\n", o.plot);
    }
    print_sample(*model, text, o);
    return 0;
  });
}
