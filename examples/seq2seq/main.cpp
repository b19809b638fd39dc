// seq2seq: train an encoder-decoder Transformer to copy, reverse or sort sequences.
//
//   seq2seq                          # copy task, default model, 900 steps
//   seq2seq --task reverse --steps 2000 --plot loss.svg --attention attn.svg
//   seq2seq --save run.safetensors   # ...later: seq2seq --resume run.safetensors --steps 3000
//   seq2seq --target-accuracy 99     # stop at the first held-out evaluation that reaches 99%
//   seq2seq --export-onnx s2s.onnx   # the trained model for ONNX Runtime (docs/onnx.md)
//   scripts/mpirun 2 build/release/examples/seq2seq --threads 1   # data-parallel, 16 a rank
//
// Data-parallel: under mpirun each of N processes trains on batch/N sequences of every global
// batch (its share of the epoch's one permutation) and DistributedDataParallel averages the
// gradients, so N processes take the steps one process takes on the whole batch. Rank 0 alone
// evaluates, prints and writes files.
//
// Exit codes: 0 done; 2 refused options or input (a checkpoint that does not fit, a path that
// cannot be written), with one line on stderr; 3 out of memory; 4 a NaN or an infinity in the
// loss or the weights (one line naming the step and the quantity; nothing saved).
#include <CLI/CLI.hpp>
#include <cmath>
#include <fmt/core.h>

#include "common/data_parallel.h"
#include "common/observe.h"
#include "seq2seq/evaluate.h"
#include "seq2seq/model.h"
#include "seq2seq/options.h"
#include "seq2seq/show.h"
#include "seq2seq/tasks.h"

using namespace cppgrad;
using namespace seq2seq;
namespace F = cppgrad::nn::functional;

int main(int argc, char** argv) {
  distributed::ProcessGroup world(argc, argv);  // a world of one without mpirun
  const bool lead = world.rank() == 0;          // rank 0 prints, evaluates and writes files
  Options o;
  CLI::App app{"Train an encoder-decoder Transformer on a synthetic sequence task (copy, reverse, sort)."};
  add_options(app, o);
  if (auto code = examples::parse_command_line(app, argc, argv, "seq2seq")) return *code;
  return examples::run_program("seq2seq", "--batch, --d-model, --ff or --layers", [&] {
    examples::KeptOptions kept = kept_options(app, o);
    o.resume = examples::resolve_resume(o.resume, o.checkpoints, lead);  // --resume latest, or a directory
    std::optional<nn::SafetensorsContents> resumed = kept.resume_from_file(o.resume, lead);
    const int64_t rank_batch = check_options(o);  // everything that can be refused, before training
    const Task task = parse_task(o.task);

    // ---- the model, its optimizer, the schedule and the moving average of its weights ----------
    manual_seed(o.seed);  // the weights (rank 0's are broadcast); dropout is keyed by example
    auto built_from_metadata = examples::limit_to_checkpoint(o.resume);
    auto model = std::make_shared<Seq2SeqModel>(o.model);
    model->transformer->set_checkpoint_layers(o.checkpoint_layers);
    distributed::DistributedDataParallel ddp(model);  // rank 0's weights everywhere; hooks nothing in a world of one
    optim::Adam opt(model->parameters(), optim::AdamOptions(1.0).beta1(0.9).beta2(0.98).eps(1e-9));
    optim::NoamLR schedule(opt, o.model.d_model, o.warmup, o.lr);
    optim::ExponentialMovingAverage average(model->parameters(), o.average);
    built_from_metadata.reset();

    // ---- the data: each rank its share of every epoch's permutation, padded per batch ----------
    data::DataLoader loader = training_loader(o, task, rank_batch, world.world_size(), world.rank());
    const Batch held_out = held_out_batch(task, o.eval_size, o.seq_len, o.vocab, o.seed + 1000003);  // never trained on

    examples::TrainingLog log;
    optim::TrainingState state = examples::training_state({*model, opt, schedule, loader, &average}, log);
    if (resumed) examples::resume_run(o.resume, checkpoint_of_task(std::move(*resumed), o), state);
    if (lead && !o.resume.empty()) fmt::print("resumed from {} at step {}\n", o.resume, log.step);
    examples::open_log(log, lead ? o.log_dir : "");  // --log-dir
    if (lead) print_run_line(o, model->parameter_count(), rank_batch, world.world_size());

    // ---- the training loop ---------------------------------------------------------------------
    examples::PeriodicCheckpoints periodic(o.checkpoints, o.steps, lead);  // --save-every
    double last_accuracy = std::nan("");  // the last evaluation's, for --save-every's metadata
    Progress progress(o.steps, log.step);
    examples::StepLosses losses;  // each step's, until the next report
    examples::LossAboveUniform diverging(o.vocab);  // a loss far above a uniform guess's stops the run
    auto save_if_due = [&] {  // --save-every; a collective; none while the loss is far above a guess's
      if (!diverging.above()) periodic.save_if_due(log.step, state, losses, log.train_curve, [&] { return checkpoint_metadata(o, kept, last_accuracy); });
    };
    int64_t tokens = 0;           // over all ranks, since the last report
    std::optional<double> reached;  // the accuracy that met --target-accuracy
    StepProfile step_profile(o.profile, log.step + 10);
    model->train();
    examples::StepTrace trace(lead ? o.trace : "", log.step, o.steps);  // --trace
    while (log.step < o.steps && !reached) {
      trace.before(log.step + 1);
      step_profile.before(log.step + 1);
      const Batch b = to_batch(loader.next());
      // dropout keyed by this rank's examples: the masks one process draws on the global batch
      auto keyed = examples::dropout_scope(o.seed, log.step, o.batch);
      Tensor logits = model->forward(b.src, b.tgt_in, b.src_pad, b.tgt_pad);  // (B, T, vocab)
      Tensor loss = F::cross_entropy(logits.reshape({-1, o.vocab}), b.tgt_out.reshape({-1}),
                                     F::CrossEntropyOptions().ignore_index(PAD));  // this rank's token mean
      const double rank_tokens = static_cast<double>(b.tgt_pad.numel()) - b.tgt_pad.sum().item<double>();
      tokens += static_cast<int64_t>(examples::to_global_token_mean(loss, rank_tokens));  // weighs the ranks' means
      const double loss_value = loss.item();
      // A NaN or an infinity stops the run (exit 4) instead of training on; the loss is one number.
      examples::stop_if_non_finite(log.step + 1, "the training loss", loss_value, *model);
      opt.zero_grad();
      loss.backward();  // under mpirun, returns with the gradients averaged over the ranks
      keyed.reset();    // the step's forward and backward are done
      opt.step();
      average.update();
      schedule.step();
      step_profile.after(++log.step, progress, rank_batch);

      losses.add(loss_value);
      const bool eval_now = log.step % o.eval_every == 0 || log.step == o.steps;
      if (!eval_now && log.step % 10 != 0) {
        save_if_due();
        continue;
      }
      const double mean = losses.report(log.step, log.train_curve);  // a collective
      diverging.check(log.step, mean, log.step == o.steps);          // the same global mean on every rank
      std::optional<HeldOut> eval;
      if (eval_now && lead) {
        eval = evaluate_averaged(*model, average, held_out, log);
        last_accuracy = eval->accuracy;
        if (o.target_accuracy > 0 && eval->accuracy >= o.target_accuracy) reached = eval->accuracy;
      }
      if (lead)
        progress.update(log.step, mean, opt.lr(), tokens, eval_now, eval ? std::optional(eval->loss) : std::nullopt,
                        eval ? fmt::format("{:.1f}% right", eval->accuracy) : "");
      examples::log_new_points(log, opt.lr());  // --log-dir
      if (eval_now && o.target_accuracy > 0 && examples::decided_by_rank0(reached.has_value()) && !reached)
        reached = o.target_accuracy;  // the other ranks stop with rank 0
      tokens = 0;
      save_if_due();  // after the step's evaluation, which the checkpoint's curves hold
    }
    if (lead) progress.finish();
    trace.finish();  // --trace: a trace that cannot be written fails the run
    examples::stop_if_weights_non_finite(log.step, *model);  // the last update's, before anything is kept
    const double train_seconds = progress.elapsed_seconds();
    if (lead && reached)
      fmt::print("target reached: {:.1f}% of held-out sequences right after {} steps, {} of training\n", *reached,
                 log.step, format_duration(train_seconds));

    // ---- held-out sequences, decoded greedily with the averaged weights ------------------------
    const double accuracy = lead ? report_accuracy(*model, average, held_out, o, log.step, train_seconds) : 0.0;

    // ---- what the run leaves: a checkpoint, the curves, the attention of every head ------------
    if (!o.save.empty()) examples::save_run_file(o.save, state, checkpoint_metadata(o, kept, accuracy));
    if (!lead) return 0;
    if (!o.plot.empty()) {
      training_curves(o, log.step, accuracy, log.train_curve, log.eval_curve, log.accuracy_curve).write(o.plot);
      fmt::print("training curves written to {}\n", o.plot);
    }
    if (!o.attention.empty()) write_attention_grid(*model, average, held_out, o, log.step);
    if (!o.export_onnx.empty()) export_onnx_file(*model, average, o.export_onnx);
    return 0;
  });
}
