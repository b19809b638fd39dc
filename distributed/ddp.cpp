// DistributedDataParallel's reducer: buckets, hooks, and the wait at the end of backward.
// See ddp.h for what it promises.
#include "ddp.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <vector>

#include "collectives.h"
#include "process_group.h"

namespace cppgrad::distributed {

struct DistributedDataParallel::Reducer {
  struct Param {
    std::string name;
    Tensor tensor;
    int64_t bucket = 0;
    int64_t offset = 0;  // into the bucket's flat buffer
    bool ready = false;  // its gradient of this backward is in the bucket
    // A no_sync() backward reached it since the last synchronised one: its .grad holds a
    // local sum that must be averaged even if the synchronised backward does not reach it.
    bool accumulated = false;
  };
  struct Bucket {
    Tensor flat;                  // the gradients of its parameters, back to back
    std::vector<int64_t> params;  // indices into `params`
    int64_t pending = 0;          // parameters not ready yet
    bool started = false;
    int64_t ready_at_start = 0;  // gradients of this backward that had arrived when it started
    // Gradients of this backward that had arrived when its all-reduce was seen complete (-1: not yet).
    int64_t ready_at_completion = -1;
    Work work;
  };

  std::vector<Param> params;
  std::vector<Bucket> buckets;
  double bucket_cap_bytes = 0;
  bool find_unused = false;
  // The buckets are laid out once more after the first synchronised backward, in the order
  // its gradients became ready (PyTorch's rebuilt buckets): then the first bucket fills first.
  bool buckets_rebuilt = false;
  std::vector<int64_t> ready_order;  // this backward's parameters in the order they became ready
  int64_t overlapped_buckets = 0;    // the last backward's buckets started before its last gradient
  int64_t completed_buckets = 0;     // ... and those whose all-reduce completed before it too
  bool sync_enabled = true;  // false inside no_sync()
  bool join_enabled = false;  // inside join(): each synchronised backward says this rank still trains
  // Alive while this backward's end callback is queued: the callback owns it. A backward that
  // throws half-way drops its callbacks, so the next hook sees it expired and starts afresh.
  std::weak_ptr<int> backward_token;
  int64_t next_bucket = 0;   // buckets start in index order, the same on every rank
  double last_wait_seconds = 0;

  void on_gradient(int64_t i) {
    if (!sync_enabled) {
      params[i].accumulated = true;
      return;
    }
    if (backward_token.expired()) begin_backward();
    Param& p = params[i];
    if (p.ready) return;  // (one leaf is delivered once per backward)
    {
      NoGradGuard no_grad;
      bucket_slice(p).copy_(p.tensor.grad());
    }
    p.ready = true;
    ready_order.push_back(i);
    --buckets[p.bucket].pending;
    start_ready_buckets();
    progress();
  }

  // MPI moves a non-blocking collective on only inside MPI calls: each hook, and each node of
  // backward after the first bucket started, tests the buckets in flight (and an all-reduce
  // that completes writes its averages into its bucket there and then).
  void progress() {
    for (int64_t b = 0; b < next_bucket; ++b) {
      Bucket& bucket = buckets[b];
      if (bucket.ready_at_completion < 0 && bucket.work.is_completed())
        bucket.ready_at_completion = static_cast<int64_t>(ready_order.size());
    }
  }

  void begin_backward() {
    // All-reduces still in flight from a backward that threw half-way write into the buckets:
    // let them land before this backward's gradients go in.
    for (Bucket& b : buckets) b.work.wait();
    if (join_enabled) all_reduce(scalar_tensor(1, kInt64), ReduceOp::Sum);  // met by join()'s count
    next_bucket = 0;
    ready_order.clear();
    for (Param& p : params) p.ready = false;
    for (Bucket& b : buckets) {
      b.pending = static_cast<int64_t>(b.params.size());
      b.started = false;
      b.ready_at_completion = -1;
    }
    auto token = std::make_shared<int>(0);
    backward_token = token;
    autograd::queue_callback([this, token] { end_backward(); });
    autograd::call_between_nodes([this] { progress(); });
  }

  // Packs the parameters, taken in `order`, into buckets of about bucket_cap_bytes (the first
  // bucket `first_cap_bytes`), one dtype per bucket.
  void lay_out_buckets(const std::vector<int64_t>& order, double first_cap_bytes) {
    buckets.clear();
    std::vector<int64_t> sizes;  // elements per bucket
    std::vector<DType> dtypes;
    double bucket_bytes = 0;
    for (int64_t i : order) {
      Param& p = params[i];
      const double bytes = static_cast<double>(p.tensor.numel()) * dtype_size(p.tensor.dtype());
      const double cap = buckets.size() == 1 ? first_cap_bytes : bucket_cap_bytes;
      if (buckets.empty() || dtypes.back() != p.tensor.dtype() || (bucket_bytes > 0 && bucket_bytes + bytes > cap)) {
        buckets.emplace_back();
        sizes.push_back(0);
        dtypes.push_back(p.tensor.dtype());
        bucket_bytes = 0;
      }
      p.bucket = static_cast<int64_t>(buckets.size()) - 1;
      p.offset = sizes.back();
      sizes.back() += p.tensor.numel();
      bucket_bytes += bytes;
      buckets.back().params.push_back(i);
    }
    for (size_t b = 0; b < buckets.size(); ++b) buckets[b].flat = zeros({sizes[b]}, dtypes[b]);
  }

  // After the first synchronised backward: rank 0's ready order (the parameters its backward did
  // not reach go last, in their old order) becomes every rank's bucket layout, so buckets still start in the
  // same order everywhere. Its first bucket is capped at 1 MiB as in PyTorch, so that the
  // first all-reduce starts early in backward.
  void rebuild_buckets() {
    buckets_rebuilt = true;
    const auto count = static_cast<int64_t>(params.size());
    Tensor order = zeros({count}, kInt64);
    std::vector<bool> listed(params.size(), false);
    int64_t n = 0;
    for (int64_t i : ready_order) {
      order.data<int64_t>()[n++] = i;
      listed[i] = true;
    }
    for (const Bucket& b : buckets)
      for (int64_t i : b.params)
        if (!listed[i]) order.data<int64_t>()[n++] = i;
    broadcast(order, 0);
    lay_out_buckets(std::vector<int64_t>(order.data<int64_t>(), order.data<int64_t>() + count),
                    std::min(bucket_cap_bytes, 1024.0 * 1024.0));
  }

  Tensor bucket_slice(const Param& p) {
    return buckets[p.bucket].flat.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.shape());
  }

  void start_ready_buckets() {
    while (next_bucket < static_cast<int64_t>(buckets.size()) && buckets[next_bucket].pending == 0) {
      Bucket& b = buckets[next_bucket++];
      b.work = all_reduce_async(b.flat, ReduceOp::Average);
      b.started = true;
      b.ready_at_start = static_cast<int64_t>(ready_order.size());
    }
  }

  // A joined rank's part in a backward it does not run: the same collectives as end_backward,
  // in the same order, with zeros for every gradient and "used nowhere" for every parameter.
  void shadow_backward() {
    NoGradGuard no_grad;
    for (Bucket& b : buckets) {
      b.flat.zero_();
      b.work = all_reduce_async(b.flat, ReduceOp::Average);
    }
    Work used_work;
    if (find_unused) used_work = all_reduce_async(zeros({static_cast<int64_t>(params.size())}, kInt64), ReduceOp::Max);
    for (Bucket& b : buckets) b.work.wait();
    used_work.wait();
    if (!buckets_rebuilt) rebuild_buckets();
  }

  // Run by the engine once backward has updated every .grad.
  void end_backward() {
    backward_token.reset();
    const auto count = static_cast<int64_t>(params.size());
    // Not reached by this backward: `late` if an earlier no_sync() micro-batch reached it, else
    // unused since the last sync (an error without find_unused_parameters).
    std::vector<int64_t> late, unused;
    for (int64_t i = 0; i < count; ++i)
      if (!params[i].ready) (params[i].accumulated ? late : unused).push_back(i);
    // Whether this rank has a gradient for it since the last sync; reduced with Max below so
    // that the ranks agree on which parameters get an average.
    Tensor used = zeros({count}, kInt64);
    for (int64_t i = 0; i < count; ++i) {
      used.data<int64_t>()[i] = params[i].ready || params[i].accumulated;
      params[i].accumulated = false;
    }
    if (!unused.empty() && !find_unused) {
      std::vector<std::string> names;
      for (int64_t i : unused) names.push_back(params[i].name);
      throw Error(fmt::format(
          "DistributedDataParallel: rank {}: {} parameter(s) got no gradient in this backward: {}; every rank must "
          "reduce every parameter, so construct with DistributedDataParallelOptions().find_unused_parameters(true) "
          "when some are not used in every step",
          rank(), names.size(), fmt::join(names, ", ")));
    }
    // Either brings its .grad, as PyTorch's DDP does, or zeros where it has none. A late one's
    // .grad holds its local sum since the last sync. An unused one's is none after zero_grad(),
    // or, when the gradients accumulate across synchronised backwards, the average an earlier
    // one wrote, the same on every rank: averaged with the ranks that did reach the parameter
    // (whose .grad is that average plus their new gradient) it gives what one process has.
    // Zeros in its place would halve the earlier average on 2 ranks.
    {
      NoGradGuard no_grad;
      for (const auto& indices : {late, unused})
        for (int64_t i : indices) {
          const Tensor& grad = params[i].tensor.grad();
          if (grad.defined())
            bucket_slice(params[i]).copy_(grad);
          else
            bucket_slice(params[i]).zero_();
          params[i].ready = true;
          --buckets[params[i].bucket].pending;
        }
    }
    start_ready_buckets();
    Work used_work;
    if (find_unused)
      used_work = all_reduce_async(used, ReduceOp::Max);
    else
      used = Tensor();  // every rank used every parameter
    overlapped_buckets = completed_buckets = 0;
    const auto arrived = static_cast<int64_t>(ready_order.size());
    for (const Bucket& b : buckets) {
      overlapped_buckets += b.started && b.ready_at_start < arrived;
      completed_buckets += b.ready_at_completion >= 0 && b.ready_at_completion < arrived;
    }
    const auto start = std::chrono::steady_clock::now();
    for (Bucket& b : buckets) b.work.wait();
    used_work.wait();
    last_wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    NoGradGuard no_grad;
    for (int64_t i = 0; i < count; ++i) {
      Param& p = params[i];
      if (used.defined() && used.data<int64_t>()[i] == 0) continue;  // no rank used it: .grad stays
      Tensor average = bucket_slice(p);
      if (p.tensor.grad().defined())
        p.tensor.grad().copy_(average);
      else
        p.tensor.set_grad(average.clone());
    }
    if (!buckets_rebuilt) rebuild_buckets();
  }
};

namespace {

// Each parameter as rank 0 has it: the count, then per parameter its dtype, rank and sizes.
std::vector<int64_t> parameter_layout(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<int64_t> layout{static_cast<int64_t>(named.size())};
  for (const auto& [name, t] : named) {
    layout.push_back(static_cast<int64_t>(t.dtype()));
    layout.push_back(t.dim());
    for (int64_t size : t.shape()) layout.push_back(size);
  }
  return layout;
}

// What differs between this rank's parameters and rank 0's `layout` (parameter_layout's), or "".
std::string first_difference(const std::vector<std::pair<std::string, Tensor>>& named, const std::vector<int64_t>& layout) {
  const auto count = static_cast<size_t>(layout[0]);
  size_t at = 1;
  for (size_t i = 0; i < std::min(count, named.size()); ++i) {
    const Tensor& t = named[i].second;
    const auto dtype = static_cast<DType>(layout[at]);
    const auto dims = static_cast<size_t>(layout[at + 1]);
    const Shape shape(layout.begin() + static_cast<int64_t>(at + 2), layout.begin() + static_cast<int64_t>(at + 2 + dims));
    at += 2 + dims;
    if (dtype != t.dtype() || shape != t.shape())
      return fmt::format("parameter {} ('{}') is {} {} here and {} {} on rank 0", i, named[i].first,
                         dtype_name(t.dtype()), shape_str(t.shape()), dtype_name(dtype), shape_str(shape));
  }
  if (count != named.size()) return fmt::format("it has {} parameters, rank 0 {}", named.size(), count);
  return "";
}

// PyTorch's DDP compares the parameters across ranks when it is made: ranks that built different
// models (another size, another option) would otherwise exchange buffers of other sizes and end
// in a garbled Open MPI message. Every rank compares its own with rank 0's, and all throw
// together, the ranks that differ naming the first difference.
void check_same_parameters_as_rank0(const nn::Module& module) {
  if (world_size() == 1) return;
  const auto named = module.named_parameters();
  const std::vector<int64_t> own = parameter_layout(named);
  Tensor length = scalar_tensor(static_cast<double>(own.size()), kInt64);
  broadcast(length, 0);
  Tensor rank0 = rank() == 0 ? tensor(own, {static_cast<int64_t>(own.size())}) : zeros({length.item<int64_t>()}, kInt64);
  broadcast(rank0, 0);
  const std::string difference = first_difference(named, rank0.to_vector<int64_t>());
  Tensor differing = scalar_tensor(difference.empty() ? 0 : 1, kInt64);
  all_reduce(differing, ReduceOp::Sum);
  if (differing.item<int64_t>() == 0) return;
  if (!difference.empty())
    throw Error(fmt::format("DistributedDataParallel: rank {}'s model differs from rank 0's: {}", rank(), difference));
  throw Error(fmt::format("DistributedDataParallel: rank {}: {} other rank(s) built a model that differs from rank 0's "
                          "(their messages name the difference); every rank must build the same model",
                          rank(), differing.item<int64_t>()));
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 DistributedDataParallelOptions options)
    : module_(std::move(module)), reducer_(std::make_shared<Reducer>()) {
  CPPGRAD_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  CPPGRAD_CHECK(options.bucket_cap_mb() > 0, "DistributedDataParallel: bucket_cap_mb must be > 0, got {}",
                options.bucket_cap_mb());
  Reducer& r = *reducer_;
  r.find_unused = options.find_unused_parameters();

  check_same_parameters_as_rank0(*module_);
  // Everyone starts from rank 0's weights (and buffers), whatever their own seeds gave them.
  for (const auto& [name, t] : module_->named_parameters()) broadcast(t, 0);
  for (const auto& [name, t] : module_->named_buffers()) broadcast(t, 0);

  // named_parameters lists a tied tensor once. Until the first backward shows the order the
  // gradients come in, the buckets take them in reverse order of registration (roughly the
  // order backward reaches them: the output layer's first).
  for (const auto& [name, t] : module_->named_parameters())
    if (t.requires_grad()) r.params.push_back({name, t});
  std::reverse(r.params.begin(), r.params.end());
  r.bucket_cap_bytes = options.bucket_cap_mb() * 1024 * 1024;
  std::vector<int64_t> order(r.params.size());
  std::iota(order.begin(), order.end(), 0);
  r.lay_out_buckets(order, r.bucket_cap_bytes);

  // In a world of one the gradients are already the global batch's: no hooks, nothing to copy
  // (the buckets are still laid out, for bucket_parameter_names()).
  if (world_size() == 1) return;
  std::weak_ptr<Reducer> weak = reducer_;
  for (int64_t i = 0; i < static_cast<int64_t>(r.params.size()); ++i)
    autograd::register_post_accumulate_grad_hook(r.params[i].tensor, [weak, i](const Tensor&) {
      if (auto reducer = weak.lock()) reducer->on_gradient(i);
    });
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::join(const std::function<void()>& body) {
  if (world_size() == 1) return body();
  Reducer& r = *reducer_;
  CPPGRAD_CHECK(!r.join_enabled, "DistributedDataParallel::join: already inside join()");
  r.join_enabled = true;
  try {
    body();
  } catch (...) {
    r.join_enabled = false;
    throw;
  }
  r.join_enabled = false;
  // Until every rank is here: the ranks still training say so (1 each) at the start of each of
  // their synchronised backwards, and this rank shadows that backward's all-reduces.
  int64_t shadowed = 0;
  for (;;) {
    Tensor training = scalar_tensor(0, kInt64);
    all_reduce(training, ReduceOp::Sum);
    if (training.item<int64_t>() == 0) break;
    r.shadow_backward();
    ++shadowed;
  }
  // The ranks that shadowed nothing finished last, with the final weights: the highest of them
  // gives its parameters and buffers to all.
  Tensor last = scalar_tensor(shadowed == 0 ? rank() : -1, kInt64);
  all_reduce(last, ReduceOp::Max);
  const int source = static_cast<int>(last.item<int64_t>());
  for (const auto& [name, t] : module_->named_parameters()) broadcast(t, source);
  for (const auto& [name, t] : module_->named_buffers()) broadcast(t, source);
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.reducer_->sync_enabled) {
  ddp_.reducer_->sync_enabled = false;
}
DistributedDataParallel::NoSync::~NoSync() { ddp_.reducer_->sync_enabled = previous_; }

int64_t DistributedDataParallel::bucket_count() const { return static_cast<int64_t>(reducer_->buckets.size()); }
std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> names;
  for (const auto& bucket : reducer_->buckets) {
    names.emplace_back();
    for (int64_t i : bucket.params) names.back().push_back(reducer_->params[i].name);
  }
  return names;
}

double DistributedDataParallel::last_wait_seconds() const { return reducer_->last_wait_seconds; }
int64_t DistributedDataParallel::last_overlapped_buckets() const { return reducer_->overlapped_buckets; }
int64_t DistributedDataParallel::last_completed_buckets() const { return reducer_->completed_buckets; }
int64_t DistributedDataParallel::completed_buckets_so_far() const {
  int64_t completed = 0;
  for (int64_t b = 0; b < reducer_->next_bucket; ++b) completed += reducer_->buckets[b].ready_at_completion >= 0;
  return completed;
}

}  // namespace cppgrad::distributed
