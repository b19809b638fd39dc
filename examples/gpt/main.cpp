// gpt: train a decoder-only language model (GPT-2's or Llama's architecture) on a text, then
// sample from it.
//
//   gpt                                        # the Jargon File, BPE of 512 tokens, small gpt2: minutes
//   gpt --arch llama --kv-heads 2 --plot loss.svg
//   gpt --data book.txt --tokenizer char --size gpt-M --steps 5000 --accum 4 --checkpoint
//   gpt --size gpt-M --dtype bf16              # matrix products in bfloat16 (autocast)
//   gpt --save run.safetensors                 # ...later: gpt --resume run.safetensors --steps 2000
//   gpt --resume run.safetensors --steps 0 --prompt "The hacker" --top-p 0.9   # sample only
//   gpt --export-onnx gpt.onnx                 # the trained model for ONNX Runtime (docs/onnx.md)
//   gpt --init-from hf:gpt2 --steps 0 --prompt "Hello"   # GPT-2's model.safetensors, config.json, vocab.json, merges.txt
//   gpt --init-from hf:gpt2 --data mine.txt --seq-len 128 --steps 200 --lr 1e-4 --save-hf tuned   # fine-tune
//   scripts/mpirun 2 build/release/examples/gpt/gpt --threads 1   # data-parallel, 8 windows a rank
//
// The training windows are every start in the tokens of the text's first 90%, read in a fresh
// random order each epoch; the held-out loss is measured on windows of the last 10%. Under mpirun
// each process reads its share of every global batch and DistributedDataParallel averages the
// gradients; rank 0 alone evaluates, prints, writes files and samples.
//
// Exit codes: 0 done; 2 refused options or input (a checkpoint that does not fit, a path that
// cannot be written, a --data that is not a text file of a sensible size), with one line on
// stderr; 3 out of memory; 4 a NaN or an infinity in the loss, the gradient norm or the weights
// (one line naming the step and the quantity; nothing saved).
#include <CLI/CLI.hpp>
#include <cmath>
#include <fmt/core.h>

#include "common/data_parallel.h"
#include "common/observe.h"
#include "gpt/evaluate.h"
#include "gpt/options.h"
#include "gpt/sample.h"

using namespace cppgrad;
using namespace gpt;
namespace F = cppgrad::nn::functional;

int main(int argc, char** argv) {
  distributed::ProcessGroup world(argc, argv);  // a world of one without mpirun
  const bool lead = world.rank() == 0;          // rank 0 prints, evaluates, writes files and samples
  Options o;
  CLI::App app{"Train a decoder-only Transformer language model (GPT-2 or Llama) on a text, then sample from it."};
  add_options(app, o);
  if (auto code = examples::parse_command_line(app, argc, argv, "gpt")) return *code;
  return examples::run_program("gpt", "--batch, --seq-len, --d-model, --layers or --size", [&] {
    examples::KeptOptions kept = kept_options(app, o);
    choose_checkpoint_to_resume(o, lead);  // --resume latest, or a directory; a fine-tune's restart
    std::optional<Checkpoint> resumed;
    if (!o.resume.empty()) resumed = read_checkpoint(o.resume);
    if (resumed)
      for (const std::string& notice : kept.resume_from(resumed->metadata))
        if (lead) fmt::print("{}\n", notice);
    std::optional<HFCheckpoint> pretrained = read_pretrained(app, o);  // --init-from hf:PATH
    // before training, what can be refused
    const int64_t rank_batch = finish_options(app, o, resumed ? &*resumed : nullptr, pretrained ? &*pretrained : nullptr);
    const Corpus corpus = read_corpus(o, resumed ? &*resumed : nullptr);
    if (o.model.vocab == 0) o.model.vocab = corpus.tokenizer.vocab_size();  // else a pretrained model's, or as saved
    check_vocabularies_agree(o, corpus.tokenizer);  // a token id is a row of the embedding
    if (lead) write_token_files(o, corpus);  // --write-tokens

    // ---- the model and AdamW, warm-up then cosine ----------------------------------------------
    manual_seed(o.seed);  // the weights (rank 0's are broadcast); dropout is keyed by example
    auto built_from_metadata = examples::limit_to_checkpoint(o.resume);
    std::shared_ptr<LanguageModel> model = make_model(o.model);
    if (pretrained) init_from(*model, *pretrained, lead);
    // The names --save-hf writes: the file's, or transformers' own. The file's tensors, now in
    // the model, are not kept through training (GPT-2 124M's are half a gigabyte).
    const HFLayout hf_layout = pretrained ? pretrained->layout : default_hf_layout(o.model.arch);
    pretrained.reset();
    model->set_checkpoint_layers(o.checkpoint);
    distributed::DistributedDataParallel ddp(model);  // rank 0's weights everywhere; hooks nothing in a world of one
    optim::AdamW opt(examples::weight_decay_groups(*model, o.lr, o.weight_decay), optim::AdamWOptions(o.lr).beta2(o.beta2));
    optim::WarmupCosineLR schedule(opt, o.warmup, o.decay_steps, o.min_lr);
    built_from_metadata.reset();

    // ---- the data: every window of the training tokens, each rank its share of every epoch -----
    const int64_t T = o.window;
    data::DataLoader loader = training_loader(o, corpus, rank_batch, world.world_size(), world.rank());

    examples::TrainingLog log;
    optim::TrainingState state = examples::training_state({*model, opt, schedule, loader}, log);
    state.add_constant("data.tokenizer", corpus.tokenizer.to_tensor());  // token ids are the model's rows
    if (resumed) examples::resume_run(o.resume, resumed->tensors, state);
    if (lead && resumed) fmt::print("resumed from {} at step {}\n{}\n", o.resume, log.step, schedule_line(o, log.step));
    examples::open_log(log, lead ? o.log_dir : "");  // --log-dir
    const data::Batch held_out = examples::spread_windows(corpus.held_out, T, o.eval_windows);
    if (lead) print_run_line(o, corpus, model->parameter_count(), rank_batch, world.world_size());

    // ---- the training loop ---------------------------------------------------------------------
    const int64_t first_step = log.step;
    examples::PeriodicCheckpoints periodic(o.checkpoints, o.steps, lead);  // --save-every
    Progress progress(o.steps, log.step);
    examples::StepLosses losses;  // each step's, until the next report
    examples::LossAboveUniform diverging(o.model.vocab);  // a loss far above a uniform guess's: stop
    std::optional<double> last_eval;
    const std::vector<Tensor> params = model->parameters();
    // --dtype bf16: every matrix product from here on (training, evaluation, sampling) in bfloat16.
    autocast::Guard products(kBFloat16, o.dtype == "bf16");
    model->train();
    examples::StepTrace trace(lead ? o.trace : "", log.step, o.steps);  // --trace
    while (log.step < o.steps) {
      trace.before(log.step + 1);
      opt.zero_grad();
      double step_loss = 0;
      for (int64_t micro = 0; micro < o.accum; ++micro) {
        std::optional<distributed::DistributedDataParallel::NoSync> local;  // average only after the last
        if (micro + 1 < o.accum) local.emplace(ddp);
        const data::Batch b = loader.next();
        // dropout keyed by this rank's examples: the masks one process draws on the global batch
        const auto keyed = examples::dropout_scope(o.seed, log.step, o.batch, micro);
        Tensor logits = model->forward(b["input"]);  // (B, T, vocab)
        Tensor loss = F::cross_entropy(logits.reshape({-1, o.model.vocab}), b["target"].reshape({-1}));
        const double loss_value = loss.item();
        // A NaN or an infinity stops the run (exit 4) instead of training on: the loss and the
        // gradient norm clipping computes are one number each.
        examples::stop_if_non_finite(log.step + 1, "the training loss", loss_value, *model);
        step_loss += loss_value / static_cast<double>(o.accum);
        (loss / static_cast<double>(o.accum)).backward();  // the gradients sum to the step's mean's
      }
      examples::stop_if_non_finite(log.step + 1, "the gradient norm", optim::clip_grad_norm_(params, o.clip), *model);
      opt.step();
      schedule.step();
      ++log.step;

      losses.add(step_loss);
      if (auto held = examples::report_step(log, losses, progress, o.steps, o.eval_every, opt.lr(), o.accum * o.batch * T,
                                            lead, [&] { return loss_on(*model, held_out); }, diverging))
        last_eval = held;
      if (!diverging.above())
        periodic.save_if_due(log.step, state, losses, log.train_curve,  // --save-every; a collective
                             [&] { return checkpoint_metadata(o, kept, last_eval.value_or(std::nan(""))); });
    }
    if (lead) progress.finish();
    trace.finish();  // --trace: a trace that cannot be written fails the run
    examples::stop_if_weights_non_finite(log.step, *model);  // the last update's, before anything is kept
    const double train_seconds = progress.elapsed_seconds();
    const double held = lead ? report_held_out(last_eval ? *last_eval : loss_on(*model, held_out), corpus, log.step,
                                               log.step - first_step, train_seconds)
                             : 0.0;

    // ---- what the run leaves: a checkpoint, the curves, a sample -------------------------------
    if (!o.save.empty()) examples::save_run_file(o.save, state, checkpoint_metadata(o, kept, held));
    if (!o.save_hf.empty() && lead) {
      save_hf_directory(*model, hf_layout, o.save_hf);
      save_hf_tokenizer(corpus.tokenizer, o.save_hf);  // so that --init-from hf:DIR needs nothing else
      fmt::print("model written under Hugging Face's names to {}/model.safetensors and config.json, its {} tokenizer "
                 "to {} and tokenizer_config.json\n", o.save_hf, corpus.tokenizer.kind,
                 hf_tokenizer_file_names(corpus.tokenizer));
    }
    if (!o.export_onnx.empty() && lead) {
      export_onnx_file(*model, o.export_onnx);
      fmt::print("ONNX model written to {}\n", o.export_onnx);
    }
    if (!lead) return 0;
    if (!o.plot.empty()) {
      training_curves(o, corpus, log.step, held, held_out["input"].size(0), log.train_curve, log.eval_curve).write(o.plot);
      fmt::print("training curves written to {}\n", o.plot);
    }
    print_sample(*model, corpus, o);
    return 0;
  });
}
