// DistributedDataParallel: data-parallel training. Each rank runs the same model on its own
// share of the batch; the wrapper averages the gradients over the ranks during backward(), so
// after it every rank holds the gradient of the global batch and the optimizers (one per rank,
// fed the same gradients from the same weights) keep the ranks' weights identical.
//
//   distributed::ProcessGroup world(argc, argv);
//   auto model = std::make_shared<Net>();
//   distributed::DistributedDataParallel ddp(model);    // rank 0's weights everywhere
//   optim::Adam opt(model->parameters(), 1e-3);
//   for (...) {
//     loss = loss_fn(model->forward(my_share_of_the_batch));
//     opt.zero_grad();
//     loss.backward();                                  // gradients averaged over the ranks
//     opt.step();
//   }
//
// How: a post-accumulate-grad hook on every parameter copies its gradient into a bucket (a
// flat buffer of about bucket_cap_mb) the moment it is final; a full bucket starts its
// non-blocking all-reduce at once, so communication overlaps the rest of backward. MPI moves
// a non-blocking collective on only while it is called, so the buckets in flight are tested
// between backward's nodes (autograd::call_between_nodes), not first at its end. Buckets
// start in the same order on every rank, as MPI requires. At first the parameters go into
// buckets in reverse order of registration; after the first synchronised backward the buckets
// are laid out again in the order rank 0 saw the gradients become ready (as PyTorch rebuilds
// its buckets), the first one capped at 1 MiB, so that an embedding registered first but
// ready last no longer holds back every bucket until the end of backward. When backward has updated every gradient, a
// callback it runs before returning waits for every bucket and writes the averages into .grad:
// when backward() returns the gradients are final, so no optimizer, clipping or user code can
// read a half-reduced gradient, and nothing needs to be called in between.
//
// Rules, as PyTorch's DDP: every rank runs the same number of synchronised backward passes,
// unless they run inside join() (uneven inputs, below); a parameter
// shared by two modules (tied weights) is one tensor and is reduced once; a parameter that got
// no gradient on a rank is an error unless find_unused_parameters(true), which lets that rank
// bring its .grad as it stands (zeros where it has none: after zero_grad()), and leaves .grad
// untouched where no rank used it. Under no_sync() "used" means used since the last
// synchronised backward: a parameter that only an earlier micro-batch reached is averaged with
// its accumulated gradient. Gradients accumulated over several synchronised backwards (no
// zero_grad() in between) are averaged alike: a rank that skips a parameter brings the
// average already in its .grad. Each backward must
// reach at least one parameter on every rank. In a world of one (no mpirun) the
// wrapper hooks nothing: backward() is exactly what it is without it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../nn/module.h"
#include "../nn/options.h"

namespace cppgrad::distributed {

struct DistributedDataParallelOptions {
  // Bucket size in MiB (PyTorch's default, 25): smaller buckets start sooner and overlap more,
  // larger ones pay the per-message latency fewer times.
  CPPGRAD_ARG(double, bucket_cap_mb, 25.0)
  CPPGRAD_ARG(bool, find_unused_parameters, false)
};

class DistributedDataParallel {
 public:
  // Broadcasts the module's parameters and buffers from rank 0, and hooks its parameters.
  explicit DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                   DistributedDataParallelOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  nn::Module& module() { return *module_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return module_; }

  // Within a NoSync's scope backward() leaves the gradients local and accumulating (micro-
  // batches); the first backward after it averages the accumulated gradients.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }

  // Uneven inputs, as PyTorch's `with ddp.join():`. Every rank calls join() together, and its
  // `body` trains on its own data, however many batches that is:
  //
  //   ddp.join([&] {
  //     for (const auto& batch : my_batches) { opt.zero_grad(); loss(batch).backward(); opt.step(); }
  //   });
  //
  // A rank whose body has returned shadows the ranks still training: for each of their
  // synchronised backwards it brings zeros to every bucket's all-reduce, so theirs completes.
  // The averages keep dividing by the whole world size (PyTorch's divide_by_initial_world_size
  // = True): a step that only k of W ranks take moves the weights by the sum of those k
  // gradients / W, as if the joined ranks had brought zero gradients. join() returns once every
  // rank's body has returned; then every rank takes the parameters and buffers of the last rank
  // to finish (the highest, of several), so the joined ranks, which skipped the last steps, end
  // with the same weights as the others. The optimizers' state is not synchronised (as in PyTorch):
  // a joined rank's momenta are those of its last step.
  //
  // Inside join, each synchronised backward starts with one small blocking all-reduce that says
  // which ranks still train (PyTorch's notify_join_context, there in forward). The body may use
  // no_sync(); it must not call other collectives (ZeroRedundancyOptimizer::step among them),
  // which a joined rank would not meet. If the body throws, the exception leaves join() at once,
  // unshadowed: the other ranks then wait in a collective until the watchdog ends the job. In a
  // world of one join(body) is body().
  void join(const std::function<void()>& body);

  // How the buckets came out, and what the last synchronised backward spent waiting.
  int64_t bucket_count() const;
  // The parameters of each bucket by name, in the order their all-reduces start.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  double last_wait_seconds() const;  // blocked in backward's end, waiting for the all-reduces
  // How many of the last synchronised backward's buckets started their all-reduce while some
  // gradient was still to come, i.e. overlapped backward (0 in a world of one).
  int64_t last_overlapped_buckets() const;
  // Of those, how many had their all-reduce complete before that last gradient came: MPI moved
  // them on while backward computed (0 in a world of one).
  int64_t last_completed_buckets() const;
  // How many of the running backward's buckets have had their all-reduce seen complete so far
  // (a node's backward may watch it: MPI's progress between nodes is what moves it).
  int64_t completed_buckets_so_far() const;

  struct Reducer;  // the buckets and the per-backward state (ddp.cpp)

 private:
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<Reducer> reducer_;  // the hooks hold it weakly
};

}  // namespace cppgrad::distributed
