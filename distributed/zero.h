// ZeroRedundancyOptimizer: data-parallel training in which each rank keeps only 1/N of the
// optimizer's state (ZeRO stage 1, Rajbhandari et al.; PyTorch's
// torch.distributed.optim.ZeroRedundancyOptimizer). Adam's two moments take twice the memory
// of the weights themselves; sharded, they take 2/N.
//
//   distributed::DistributedDataParallel ddp(model);          // averages the gradients
//   distributed::ZeroRedundancyOptimizer opt(model->parameters(),
//       distributed::ZeroRedundancyOptimizer::of<optim::AdamW>(optim::AdamWOptions(1e-3)));
//   for (...) { opt.zero_grad(); loss.backward(); opt.step(); }
//
// How: the parameters (across groups, in order) are laid end to end as one flat vector of
// `numel()` elements, cut into N shards of ceil(numel / N) elements (the last ones shorter, or
// empty), rank r owning shard r. A parameter may straddle shards: each rank's piece of it is a
// 1-D tensor of its own, and one optimizer built by the given factory over those pieces (in the
// same parameter groups, with the same options) keeps the state of this rank's elements only.
// step():
//   1. each rank takes its shard of the averaged gradient: by default the gradient DDP already
//      averaged (as PyTorch's ZeroRedundancyOptimizer); with reduce_scatter(true), the ranks'
//      own gradients are averaged here by one reduce-scatter, each rank receiving only its
//      shard's average (use it without DDP: no all-reduce during backward at all);
//   2. the local optimizer updates this rank's pieces;
//   3. one all-gather gives every rank every shard, copied back into the parameters.
// With reduce_scatter(true) the .grad a rank holds before step() is its own, not the average:
// clipping by the global gradient norm (optim::clip_grad_norm_) needs DDP's averaged gradients.
// Adam, AdamW and SGD update each element from that element's gradient and state alone, so the
// sharded update is the unsharded one (tests/distributed/test_zero.cpp: float64, to 1e-12).
//
// It is an optim::Optimizer: param_groups(), set_lr(), zero_grad() and the LR schedules act on
// the full parameters, and step() hands the groups' options to the local optimizer.
//
// Checkpoints. state_dict() is a collective (every rank calls it, in the same order, as every
// rank calls TrainingState::state_dict in the example programs): every rank receives the whole
// state, in exactly the format the unsharded optimizer writes (PyTorch's consolidate_state_dict
// then state_dict), so a checkpoint loads into this optimizer at any number of processes, or
// into a plain AdamW on one: load_state_dict(full) keeps this rank's share. local_state_dict()
// is the shard alone (no communication, 1/N of the bytes) with the process count it belongs to,
// and load_local_state_dict refuses a shard of another process count or rank.
//
// Rules: every rank passes the same parameters (count, shapes, dtype; checked when built, with
// an Error on every rank naming the first difference); one floating dtype (float32 or float64)
// for all of them; every rank calls step() and state_dict() together. The parameters are
// broadcast from rank 0 when it is built, so that the ranks start alike without DDP too
// (DDP's own broadcast is the same). In a world of one it is the factory's optimizer over
// flat views of the parameters, with no communication.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "../nn/options.h"
#include "../optim/optimizer.h"

namespace cppgrad::distributed {

struct ZeroRedundancyOptimizerOptions {
  // false: the gradients are already the average over the ranks (DDP's); true: each rank's
  // gradients are its own, and step() averages them with a reduce-scatter.
  CPPGRAD_ARG(bool, reduce_scatter, false)
};

class ZeroRedundancyOptimizer : public optim::Optimizer {
 public:
  // Builds the optimizer of this rank's shard from parameter groups (the pieces, with each
  // group's options); also called once over the full parameters, to learn the options.
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;
  // The factory of an optimizer class and its options: of<optim::AdamW>(optim::AdamWOptions(1e-3)).
  template <class Opt, class Options>
  static Factory of(Options options) {
    return [options](std::vector<optim::ParamGroup> groups) { return std::make_unique<Opt>(std::move(groups), options); };
  }

  ZeroRedundancyOptimizer(std::vector<Tensor> params, Factory make, ZeroRedundancyOptimizerOptions options = {});
  ZeroRedundancyOptimizer(std::vector<optim::ParamGroup> groups, Factory make,
                          ZeroRedundancyOptimizerOptions options = {});
  ~ZeroRedundancyOptimizer() override;

  void step() override;

  // The whole state, gathered from every rank (a collective), as the unsharded optimizer's.
  NamedTensors state_dict() const override;
  // A whole state (from state_dict(), or from the unsharded optimizer): checked as the
  // unsharded optimizer checks it, then this rank keeps its share. Every rank calls it.
  void load_state_dict(const NamedTensors& state) override;

  // This rank's shard only: "world_size", "rank", "numel" (int64, 0-d) and the local
  // optimizer's state_dict under "shard.". No communication.
  NamedTensors local_state_dict() const;
  // Refuses a shard written by another process count or rank, or for other parameters.
  void load_local_state_dict(const NamedTensors& state);

  // The state is sharded: a parameter's full state is on no rank. Throws, pointing to
  // local_optimizer() and state_dict().
  std::map<std::string, Tensor>& state(const Tensor& param) override;
  const std::map<std::string, Tensor>& state(const Tensor& param) const override;

  // The optimizer over this rank's pieces, and the elements [begin, end) of the flat vector
  // this rank owns.
  optim::Optimizer& local_optimizer() { return *local_; }
  const optim::Optimizer& local_optimizer() const { return *local_; }
  int64_t numel() const { return total_; }
  int64_t shard_begin() const;
  int64_t shard_end() const;
  // Bytes of state tensors this rank's optimizer holds now (0 before the first step), and what
  // an optimizer's state holds (to compare with the unsharded one's).
  int64_t state_bytes() const;
  static int64_t state_bytes(const optim::Optimizer& optimizer);

 protected:
  // Never called: step() is overridden (the local optimizer updates the pieces).
  void update(const Tensor& param, const Tensor& grad, const optim::ParamGroup& group,
              std::map<std::string, Tensor>& state) override;

 private:
  // The groups with every option filled in (by the factory's optimizer over all parameters).
  struct Resolved {
    std::vector<optim::ParamGroup> groups;
  };
  ZeroRedundancyOptimizer(Resolved resolved, Factory make, ZeroRedundancyOptimizerOptions options);

  struct Piece {
    size_t param;    // index into params_
    int64_t begin;   // first element of the parameter (flattened) this piece holds
    Tensor values;   // 1-D, this rank's copy of those elements, updated by local_
  };
  void copy_options_to_local();
  void take_gradients();
  void gather_parameters();

  Factory make_;
  ZeroRedundancyOptimizerOptions options_;
  std::vector<Tensor> params_;          // every parameter, in group order, tied ones once
  std::vector<int64_t> offsets_;        // params_[i] starts at offsets_[i] of the flat vector
  std::vector<bool> updated_;           // had a gradient (on some rank) in the current step
  int64_t total_ = 0, shard_size_ = 0;  // numel, and ceil(numel / world)
  std::vector<Piece> pieces_;           // this rank's, in flat order
  std::unique_ptr<optim::Optimizer> local_;
  bool checked_gradients_ = false;      // the first step verified DDP had averaged them
};

}  // namespace cppgrad::distributed
