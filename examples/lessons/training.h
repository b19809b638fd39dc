// What the lessons that train (4 and 8) share: the small seq2seq model of lessons.h's
// SmallSeq2Seq, its training loop (the recipe of examples/seq2seq) and held-out accuracy.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lessons/lessons.h"
#include "seq2seq/model.h"
#include "seq2seq/tasks.h"

namespace lessons {

// The model's sizes. No dropout: attention dropout draws a different mask for each head, which
// would break identical heads' symmetry by chance, and the lessons look at what weights alone do.
seq2seq::ModelConfig config_of(const SmallSeq2Seq& o);

// The recipe of examples/seq2seq: Adam (0.9, 0.98, 1e-9) and the paper's warm-up then 1/√n
// schedule (here factor 1 and `warmup` steps: seq2seq defaults to 0.5 and 200, for its larger
// model). `after_step(n)` runs after step n (1-based), for measurements along the way; it
// returns false to stop training there.
void train(seq2seq::Seq2SeqModel& model, seq2seq::Task task, const SmallSeq2Seq& o, cppgrad::Generator& data,
           const std::function<bool(int64_t)>& after_step = {});

// Percentage of held-out sequences decoded exactly, up to and including <end>.
double accuracy(seq2seq::Seq2SeqModel& model, const seq2seq::Batch& held_out);

// The model's attention layers by name, in the order of named_modules().
std::vector<std::pair<std::string, std::shared_ptr<cppgrad::nn::MultiheadAttention>>> attention_layers(
    seq2seq::Seq2SeqModel& model);

}  // namespace lessons
