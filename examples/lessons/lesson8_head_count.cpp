// Lesson 8: does the number of heads matter on a task?
//
// Lesson 3 shows that the head count changes neither the parameters nor the work, only how the
// d_model columns of the projections are grouped into softmaxes: h heads of d_k = d_model / h.
// Whether that grouping matters is a question about learning, so this lesson trains the same
// small seq2seq model with 1, 2, 4 and 8 heads, everything else equal (the same seeds, data and
// steps), on a task: reversing a sequence (each output position must find its mirrored source
// position, whatever the length), sorting it, or mirror-sum (output t is the sum of symbols t and
// len-1-t: two source positions needed at once for every output). It measures the held-out
// accuracy along the way (steps to 99%) and at the end, the weight each cross-attention head puts
// on the positions the task needs, and draws each model's cross-attention for one example, a
// picture per head, so that one sees what the heads of each model learned to look at. By
// default it runs mirror-sum on 3 seeds: float32 training moves with the seed (and the BLAS
// kernel), so a head count is named better than another only where the difference of the mean
// accuracies exceeds the seeds' spread, and each model's heads are read one by one, never
// pooled across models.
#include <cblas.h>  // openblas_get_corename
#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include "lessons/lessons.h"
#include "lessons/measure.h"
#include "lessons/training.h"

using namespace cppgrad;
using namespace seq2seq;

namespace lessons {

namespace {

// The (last) cross-attention layer's weights on a batch, (B, H, T, S).
Tensor cross_attention(Seq2SeqModel& model, const Batch& batch) {
  std::shared_ptr<nn::MultiheadAttention> cross;
  for (auto& [name, layer] : attention_layers(model))
    if (name.find("multihead_attn") != std::string::npos) cross = layer;
  CPPGRAD_CHECK(cross != nullptr, "lesson 8: the model has no cross-attention layer");
  NoGradGuard no_grad;
  cross->store_attention = true;
  model.forward(batch.src, batch.tgt_in, batch.src_pad, batch.tgt_pad);
  cross->store_attention = false;
  Tensor weights = cross->last_attention;
  cross->last_attention = Tensor();
  return weights;
}

// Per head, the mean weight that target position t (t < len) puts on source position
// source_of(t, len), over the held-out sequences. `len` is the number of symbols before <end>.
// Reverse reads source len-1-t; mirror-sum reads both t and len-1-t.
template <class SourceOf>
std::vector<double> weight_on(const Tensor& weights, const Batch& batch, SourceOf source_of) {
  const int64_t B = weights.size(0), H = weights.size(1);
  std::vector<double> total(static_cast<size_t>(H), 0.0);
  int64_t rows = 0;
  for (int64_t b = 0; b < B; ++b) {
    int64_t len = 0;
    while (len < batch.src.size(1) && batch.src.at<int64_t>({b, len}) >= FIRST_SYMBOL) ++len;
    for (int64_t t = 0; t < len; ++t, ++rows)
      for (int64_t h = 0; h < H; ++h) total[static_cast<size_t>(h)] += weights.at<double>({b, h, t, source_of(t, len)});
  }
  for (double& v : total) v /= static_cast<double>(std::max<int64_t>(rows, 1));
  return total;
}

}  // namespace

Lesson8 run_lesson8(const Lesson8Options& options) {
  Lesson8 r;
  r.options = options;
  const Lesson8Options& o = r.options;
  r.blas_kernel = openblas_get_corename();
  r.threads = get_num_threads();
  const Task task = parse_task(o.task);
  for (int64_t s = 0; s < o.seeds; ++s) {
    const uint64_t seed = o.seed + static_cast<uint64_t>(s);
    Generator held_out_gen(seed + 1000);  // never used for training
    const Batch held_out = make_batch(task, o.held_out, o.seq_len, o.vocab, held_out_gen);
    // The picture's example: the first held-out sequence of full length.
    int64_t example = 0;
    while (example + 1 < o.held_out && held_out.src_pad.at<bool>({example, o.seq_len - 1})) ++example;
    for (int64_t heads : o.head_counts) {
      SmallSeq2Seq config = o;
      config.heads = heads;
      manual_seed(seed);  // the same initial draw for the shared layers' shapes; the data is the same
      Seq2SeqModel model(config_of(config));
      Lesson8::Run run;
      run.heads = heads;
      run.d_k = o.d_model / heads;
      run.seed = seed;
      for (const Tensor& p : model.parameters()) run.parameters += p.numel();
      Generator data(seed + 1);
      train(model, task, config, data, [&](int64_t step) {
        if (step % o.eval_every == 0 || step == o.steps) {
          const double acc = accuracy(model, held_out);
          run.accuracy_at.emplace_back(step, acc);
          if (acc >= 99.0 && run.steps_to_99 < 0) run.steps_to_99 = step;
        }
        return true;
      });
      run.accuracy = run.accuracy_at.back().second;
      const Tensor weights = cross_attention(model, held_out).to(kFloat64);  // (B, H, T, S)
      if (task == Task::Reverse || task == Task::MirrorSum)
        run.mirrored_weight = weight_on(weights, held_out, [](int64_t t, int64_t len) { return len - 1 - t; });
      if (task == Task::MirrorSum)
        run.same_weight = weight_on(weights, held_out, [](int64_t t, int64_t) { return t; });
      if (s == 0) {
        Lesson8::Picture picture;
        picture.heads = heads;
        for (int64_t h = 0; h < heads; ++h) {
          auto& map = picture.maps.emplace_back();
          for (int64_t t = 0; t <= o.seq_len; ++t) {
            auto& row = map.emplace_back();
            for (int64_t k = 0; k <= o.seq_len; ++k) row.push_back(weights.at<double>({example, h, t, k}));
          }
        }
        r.pictures.push_back(std::move(picture));
        if (r.example_source.empty()) {
          for (int64_t k = 0; k <= o.seq_len; ++k) r.example_source.push_back(held_out.src.at<int64_t>({example, k}));
          for (int64_t k = 0; k <= o.seq_len; ++k) r.example_target.push_back(held_out.tgt_out.at<int64_t>({example, k}));
        }
      }
      r.runs.push_back(std::move(run));
    }
  }
  return r;
}

std::vector<HeadCountSummary> summarise(const Lesson8& r) {
  std::vector<HeadCountSummary> out;
  for (int64_t heads : r.options.head_counts) {
    HeadCountSummary s{heads};
    double steps = 0.0;
    for (const auto& run : r.runs) {
      if (run.heads != heads) continue;
      s.per_seed.push_back(run.accuracy);
      if (run.steps_to_99 >= 0) {
        steps += static_cast<double>(run.steps_to_99);
        ++s.reached_99;
      }
    }
    s.seeds = static_cast<int64_t>(s.per_seed.size());
    if (s.seeds > 0) s.accuracy = mean(s.per_seed);
    s.spread = spread(s.per_seed);
    if (s.reached_99 > 0) s.steps_to_99 = steps / static_cast<double>(s.reached_99);
    out.push_back(s);
  }
  return out;
}

bool beats(const HeadCountSummary& a, const HeadCountSummary& b) { return clearly_higher(a.per_seed, b.per_seed); }

Reads reads(double same_weight, double mirrored_weight) {
  if (same_weight >= 2.0 * mirrored_weight) return Reads::SamePosition;
  if (mirrored_weight >= 2.0 * same_weight) return Reads::MirroredPosition;
  return Reads::Both;
}

namespace {

// A symbol as a letter (a, b, ...), <end> as '$', padding as '.'.
char symbol(int64_t token) {
  if (token == EOS) return '$';
  if (token < FIRST_SYMBOL) return '.';
  return static_cast<char>('a' + (token - FIRST_SYMBOL));
}

}  // namespace

void print(const Lesson8& r) {
  const auto& o = r.options;
  fmt::print("Lesson 8: does the number of heads matter on a task?\n\n");
  fmt::print("The seq2seq model of lesson 4 (d_model {}, {}+{} layers, feed-forward {}), trained on {} for {} steps\n",
             o.d_model, o.layers, o.layers, o.ff, o.task, o.steps);
  fmt::print("with {} heads in turn: the same seeds, data and steps. BLAS kernel {}, {} thread(s): float32\n",
             fmt::format("{}", fmt::join(o.head_counts, ", ")), r.blas_kernel, r.threads);
  fmt::print("training depends on both; the conclusion below is chosen from the figures measured here.\n\n");

  fmt::print("1. Held-out accuracy ({} sequences), per seed, at the last step and the first step at 99%:\n",
             o.held_out);
  fmt::print("     heads   d_k   parameters   seed   accuracy   steps to 99%\n");
  for (const auto& run : r.runs)
    fmt::print("     {:>5}   {:>3}   {:>10}   {:>4}   {:>7.1f}%   {:>12}\n", run.heads, run.d_k, run.parameters, run.seed,
               run.accuracy, run.steps_to_99 < 0 ? std::string("not reached") : fmt::format("{}", run.steps_to_99));
  const auto summary = summarise(r);
  fmt::print("   Mean over {} seed(s), ± the seeds' standard deviation (their spread):\n", o.seeds);
  for (const auto& s : summary)
    fmt::print("     {} head(s): accuracy {:.1f}% ± {:.1f}, 99% reached by {} of {} seed(s){}\n", s.heads, s.accuracy,
               s.spread, s.reached_99, s.seeds,
               s.reached_99 > 0 ? fmt::format(", after {:.0f} steps on average", s.steps_to_99) : "");

  // The learning curves: mean accuracy over the seeds at (up to) six of the measured steps.
  const auto& steps_measured = r.runs.front().accuracy_at;
  const size_t stride = std::max<size_t>(1, (steps_measured.size() + 5) / 6);
  fmt::print("   Mean held-out accuracy along the way:\n     step   ");
  for (size_t i = stride - 1; i < steps_measured.size(); i += stride) fmt::print("{:>7}", steps_measured[i].first);
  fmt::print("\n");
  for (int64_t heads : o.head_counts) {
    fmt::print("     {} head(s)", heads);
    for (size_t i = stride - 1; i < steps_measured.size(); i += stride) {
      std::vector<double> at_step;
      for (const auto& run : r.runs)
        if (run.heads == heads) at_step.push_back(run.accuracy_at[i].second);
      fmt::print("{:>6.1f}%", mean(at_step));
    }
    fmt::print("\n");
  }

  if (!r.runs.empty() && !r.runs.front().mirrored_weight.empty()) {
    const bool two_operands = !r.runs.front().same_weight.empty();
    if (two_operands) {
      fmt::print("\n2. Mirror-sum: what each cross-attention head reads, model by model. For every head, the\n");
      fmt::print("   weight output t puts on the two source positions it must add, t and len-1-t (mean over\n");
      fmt::print("   the held-out positions), and which it reads: one operand when it puts at least twice the\n");
      fmt::print("   weight on it as on the other, both otherwise.\n");
      for (const auto& run : r.runs) {
        std::string list;
        int64_t same = 0, mirrored = 0;
        for (size_t h = 0; h < run.mirrored_weight.size(); ++h) {
          const Reads what = reads(run.same_weight[h], run.mirrored_weight[h]);
          same += what == Reads::SamePosition;
          mirrored += what == Reads::MirroredPosition;
          list += fmt::format("  {:.2f}/{:.2f} {}", run.same_weight[h], run.mirrored_weight[h],
                              what == Reads::SamePosition ? "t" : what == Reads::MirroredPosition ? "m" : "both");
        }
        const std::string verdict = same > 0 && mirrored > 0 ? "divided: a head for each operand"
                                    : same + mirrored > 0    ? "a head took one operand, none the other"
                                                             : "every head reads both";
        fmt::print("     seed {}, {} head(s) ({:.1f}%): {}\n      {}\n", run.seed, run.heads, run.accuracy, verdict, list);
      }
    } else {
      fmt::print("\n2. Reverse: the weight each cross-attention head puts on the mirrored source position\n");
      fmt::print("   (len-1-t for output t, the symbol it must write), seed {}:\n", o.seed);
      for (const auto& run : r.runs) {
        if (run.seed != o.seed) continue;
        std::string list;
        for (double w : run.mirrored_weight) list += fmt::format(" {:.2f}", w);
        fmt::print("     {} head(s):{}\n", run.heads, list);
      }
    }
  }

  fmt::print("\n3. Cross-attention on one held-out example (source {}, target {}), seed {}: a picture\n",
             [&] { std::string s; for (int64_t t : r.example_source) s += symbol(t); return s; }(),
             [&] { std::string s; for (int64_t t : r.example_target) s += symbol(t); return s; }(), o.seed);
  fmt::print("   per head, a row per output position, a column per source position; ' .:-=+*#%@' from\n");
  fmt::print("   weight 0 to 1.\n");
  const std::string shades = " .:-=+*#%@";
  for (const auto& picture : r.pictures) {
    fmt::print("   {} head(s):\n", picture.heads);
    const size_t rows = picture.maps.front().size();
    for (size_t t = 0; t < rows; ++t) {
      std::string line = "     ";
      for (const auto& map : picture.maps) {
        line += '|';
        for (double w : map[t]) line += shades[static_cast<size_t>(std::clamp(w, 0.0, 0.999) * 10.0)];
      }
      fmt::print("{}|\n", line);
    }
  }

  // The conclusion: a head count is named better than another only when it is higher on every seed
  // and by more than the seeds' spread.
  fmt::print("\nAnswer: with the parameters and the work the same, on {} after {} steps ({} seed(s)):\n", o.task, o.steps,
             o.seeds);
  std::vector<std::string> wins;
  for (const auto& a : summary)
    for (const auto& b : summary)
      if (beats(a, b))
        wins.push_back(fmt::format("{} head(s) beat {} ({:.1f}% against {:.1f}%, spread {:.1f})", a.heads, b.heads,
                                   a.accuracy, b.accuracy, std::max(a.spread, b.spread)));
  if (o.seeds < 2)
    fmt::print("one seed has no spread, so no head count is named better: run --heads-seeds 3 or more.\n");
  else if (wins.empty())
    fmt::print("no head count learned better than another both on every seed and beyond the seeds' spread.\n");
  else
    for (const auto& w : wins) fmt::print("  {};\n", w);
  if (!wins.empty())
    fmt::print("each higher on every seed and by more than the seeds' spread; {} seeds are still few, and\n"
               "every other difference, which a seed reverses or the spread covers, says nothing either way.\n",
               o.seeds);
}

}  // namespace lessons
