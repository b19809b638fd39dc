// ZeroRedundancyOptimizer: the flat layout, the shard's pieces, and the three collectives of a
// step (zero.h says what and why).
#include "zero.h"

#include <algorithm>
#include <set>
#include <string>

#include "../autograd/node.h"
#include "../tensor/kernels.h"
#include "../tensor/state_dict.h"
#include "collectives.h"
#include "process_group.h"

namespace cppgrad::distributed {

namespace {

constexpr const char* kName = "ZeroRedundancyOptimizer";

// The factory's optimizer over the full parameters: its param_groups() are the groups with
// every option filled in (and tied tensors listed once), which this optimizer takes as its own.
std::vector<optim::ParamGroup> resolved_groups(const ZeroRedundancyOptimizer::Factory& make,
                                               std::vector<optim::ParamGroup> groups) {
  CPPGRAD_CHECK(make != nullptr, "{}: no optimizer factory given", kName);
  std::unique_ptr<optim::Optimizer> probe = make(std::move(groups));
  CPPGRAD_CHECK(probe != nullptr, "{}: the optimizer factory returned no optimizer", kName);
  return probe->param_groups();
}

// Every option a resolved group has: the base class accepts an option only if its defaults set
// it, and each group's own value wins over these.
optim::ParamGroup options_of(const std::vector<optim::ParamGroup>& groups) {
  optim::ParamGroup options = groups.at(0);
  options.params.clear();
  return options;
}

template <class Dst, class Src>
void copy_options(Dst& dst, const Src& src) {
  optim::for_each_option([](const char*, auto& to, const auto& from) { to = from; }, dst, src);
}

// Every rank's string, by rank (a collective): lengths first, then the characters, padded.
std::vector<std::string> all_gather_strings(const std::string& mine) {
  const Tensor lengths = all_gather(scalar_tensor(static_cast<double>(mine.size()), kInt64).reshape({1}));
  const std::vector<int64_t> sizes = lengths.to_vector<int64_t>();
  const int64_t longest = *std::max_element(sizes.begin(), sizes.end());
  Tensor chars = zeros({longest}, kInt64);
  for (size_t c = 0; c < mine.size(); ++c) chars.data<int64_t>()[c] = static_cast<unsigned char>(mine[c]);
  const Tensor gathered = all_gather(chars);  // (world, longest)
  std::vector<std::string> out;
  for (int64_t r = 0; r < gathered.size(0); ++r) {
    const Tensor row = gathered.select(0, r).contiguous();
    std::string s;
    for (int64_t c = 0; c < sizes[r]; ++c) s.push_back(static_cast<char>(row.data<int64_t>()[c]));
    out.push_back(std::move(s));
  }
  return out;
}

// A shape as one number, to compare the ranks' parameters without sending every dimension.
int64_t shape_code(const Shape& shape) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t d : shape) h = (h ^ static_cast<uint64_t>(d + 1)) * 1099511628211ull;
  return static_cast<int64_t>(h >> 1);
}

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params, Factory make,
                                                 ZeroRedundancyOptimizerOptions options)
    : ZeroRedundancyOptimizer(std::vector<optim::ParamGroup>{optim::ParamGroup{.params = std::move(params)}},
                              std::move(make), options) {}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<optim::ParamGroup> groups, Factory make,
                                                 ZeroRedundancyOptimizerOptions options)
    // (`make` is copied, not moved: the arguments are evaluated in no fixed order)
    : ZeroRedundancyOptimizer(Resolved{resolved_groups(make, std::move(groups))}, make, options) {}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(Resolved resolved, Factory make, ZeroRedundancyOptimizerOptions options)
    : Optimizer(resolved.groups, options_of(resolved.groups), kName), make_(std::move(make)), options_(options) {
  NoGradGuard no_grad;
  std::vector<size_t> group_of;
  for (size_t g = 0; g < param_groups().size(); ++g)
    for (const Tensor& p : param_groups()[g].params) {
      params_.push_back(p);
      group_of.push_back(g);
    }
  CPPGRAD_CHECK(!params_.empty(), "{}: no parameters given", kName);
  const DType dtype = params_[0].dtype();
  for (size_t i = 0; i < params_.size(); ++i) {
    // One flat vector holds them all, and the collectives carry float32 and float64.
    CPPGRAD_CHECK(params_[i].dtype() == dtype && (dtype == kFloat32 || dtype == kFloat64),
                  "{}: parameter {} is {} and parameter 0 is {}: all must be float32, or all float64 (the shards are "
                  "one flat vector)", kName, i, dtype_name(params_[i].dtype()), dtype_name(dtype));
    CPPGRAD_CHECK(params_[i].is_contiguous(), "{}: parameter {} of shape {} is not contiguous", kName, i,
                  shape_str(params_[i].shape()));
    offsets_.push_back(total_);
    total_ += params_[i].numel();
  }
  updated_.assign(params_.size(), false);

  // Every rank must have the same parameters, or the shards would not line up: each rank
  // compares every rank's (count, numel, dtype) and then each parameter's size and shape with
  // its own, so that all of them throw the same Error rather than some waiting in a collective.
  const int world = world_size(), me = rank();
  if (world > 1) {
    std::vector<int64_t> summary = {static_cast<int64_t>(params_.size()), total_, static_cast<int64_t>(dtype)};
    const std::vector<int64_t> all = all_gather(tensor(summary, {3})).to_vector<int64_t>();
    for (int r = 0; r < world; ++r)
      CPPGRAD_CHECK(all[r * 3] == all[0] && all[r * 3 + 1] == all[1] && all[r * 3 + 2] == all[2],
                    "{}: rank {} has {} parameters of {} elements ({}), rank 0 has {} of {} ({}): every rank must pass "
                    "the same parameters", kName, r, all[r * 3], all[r * 3 + 1],
                    dtype_name(static_cast<DType>(all[r * 3 + 2])), all[0], all[1], dtype_name(static_cast<DType>(all[2])));
    std::vector<int64_t> sizes;
    for (const Tensor& p : params_) {
      sizes.push_back(p.numel());
      sizes.push_back(shape_code(p.shape()));
    }
    const int64_t n = static_cast<int64_t>(sizes.size());
    const std::vector<int64_t> every = all_gather(tensor(sizes, {n})).to_vector<int64_t>();
    for (int r = 0; r < world; ++r)
      for (int64_t i = 0; i < n; i += 2)
        CPPGRAD_CHECK(every[r * n + i] == every[i] && every[r * n + i + 1] == every[i + 1],
                      "{}: parameter {} has {} elements on rank {} and {} on rank 0{} (shape {} on rank {}): every rank "
                      "must pass the same parameters, in the same order", kName, i / 2, every[r * n + i], r, every[i],
                      every[r * n + i] == every[i] ? ", in another shape" : "", shape_str(params_[i / 2].shape()), me);
  }

  // Rank 0's values everywhere (DDP does the same; without DDP nothing else would).
  shard_size_ = (total_ + world - 1) / world;
  if (world > 1) {
    Tensor flat = empty({total_}, dtype);
    for (size_t i = 0; i < params_.size(); ++i)
      flat.narrow(0, offsets_[i], params_[i].numel()).copy_(params_[i].detach().reshape({-1}));
    broadcast(flat, 0);
    for (size_t i = 0; i < params_.size(); ++i)
      params_[i].detach().copy_(flat.narrow(0, offsets_[i], params_[i].numel()).reshape(params_[i].shape()));
  }

  // This rank's pieces: views of the parameters' own memory, so that the local optimizer
  // updates them in place and a weight loaded after this optimizer was built is what it sees.
  std::vector<optim::ParamGroup> local_groups;
  for (const optim::ParamGroup& g : param_groups()) {
    optim::ParamGroup options = g;
    options.params.clear();
    local_groups.push_back(std::move(options));
  }
  const int64_t lo = shard_begin(), hi = shard_end();
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t n = params_[i].numel();
    const int64_t begin = std::max(lo, offsets_[i]), end = std::min(hi, offsets_[i] + n);
    // An empty parameter has no elements to own: rank 0 keeps its (empty) state.
    if (end <= begin && !(n == 0 && me == 0)) continue;
    // (A 0-d parameter's piece is the parameter itself, so that its state keeps the shape [].)
    Tensor values = params_[i].dim() == 0 ? params_[i].detach()
                                          : params_[i].detach().reshape({-1}).narrow(0, begin - offsets_[i],
                                                                                     std::max<int64_t>(end - begin, 0));
    pieces_.push_back({i, begin - offsets_[i], values});
    local_groups[group_of[i]].params.push_back(values);
  }
  local_ = make_(std::move(local_groups));
  CPPGRAD_CHECK(local_ != nullptr, "{}: the optimizer factory returned no optimizer", kName);
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() = default;

int64_t ZeroRedundancyOptimizer::shard_begin() const { return std::min(total_, rank() * shard_size_); }
int64_t ZeroRedundancyOptimizer::shard_end() const { return std::min(total_, (rank() + 1) * shard_size_); }

void ZeroRedundancyOptimizer::update(const Tensor&, const Tensor&, const optim::ParamGroup&,
                                     std::map<std::string, Tensor>&) {
  throw Error(fmt::format("{}::update: not used (step() has the local optimizer update this rank's shard)", kName));
}

std::map<std::string, Tensor>& ZeroRedundancyOptimizer::state(const Tensor&) {
  throw Error(fmt::format("{}::state: each rank holds a shard of each parameter's state, not the whole; read "
                          "local_optimizer().state(piece), or the gathered state_dict()", kName));
}
const std::map<std::string, Tensor>& ZeroRedundancyOptimizer::state(const Tensor& param) const {
  return const_cast<ZeroRedundancyOptimizer*>(this)->state(param);
}

void ZeroRedundancyOptimizer::copy_options_to_local() {
  for (size_t g = 0; g < param_groups().size(); ++g) copy_options(local_->param_groups()[g], param_groups()[g]);
}

// ---- step ---------------------------------------------------------------------------------------
void ZeroRedundancyOptimizer::step() {
  NoGradGuard no_grad;
  copy_options_to_local();  // a schedule set this optimizer's rates
  take_gradients();
  try {
    local_->step();
  } catch (...) {
    for (const Piece& piece : pieces_) piece.values.set_grad(Tensor());
    throw;
  }
  for (const Piece& piece : pieces_) piece.values.set_grad(Tensor());
  gather_parameters();
}

void ZeroRedundancyOptimizer::take_gradients() {
  const int world = world_size();
  const DType dtype = params_[0].dtype();
  // A parameter is updated when it has a gradient (PyTorch skips one whose .grad is None), on
  // some rank: with DDP every rank has the same; without, a rank's missing gradient counts as 0.
  std::vector<int64_t> has(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) has[i] = params_[i].grad().defined() ? 1 : 0;
  Tensor shard;  // the averaged gradient of this rank's elements, as one 1-D tensor
  if (options_.reduce_scatter()) {
    Tensor flags = tensor(has, {static_cast<int64_t>(has.size())});
    all_reduce(flags, ReduceOp::Max);
    has = flags.to_vector<int64_t>();
    Tensor flat = zeros({world * shard_size_}, dtype);  // padded to N equal shards
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor g = params_[i].grad();
      if (g.defined()) flat.narrow(0, offsets_[i], params_[i].numel()).copy_(g.detach().reshape({-1}));
    }
    shard = reduce_scatter(flat.reshape({world, shard_size_}), ReduceOp::Average).reshape({-1});  // (1, L) -> (L)
  } else if (!checked_gradients_ && world > 1) {
    // Once: the gradients must be DDP's averages, the same on every rank. A run that forgot DDP
    // would otherwise update each shard with its own rank's gradient and train on nonsense.
    double count = 0, magnitude = 0;
    for (const Tensor& p : params_)
      if (p.grad().defined()) {
        count += 1;
        magnitude += p.grad().detach().abs().sum().to(kFloat64).item<double>();
      }
    const std::vector<double> all = all_gather(tensor(std::vector<double>{count, magnitude}, {2})).to_vector<double>();
    for (int r = 1; r < world; ++r)
      CPPGRAD_CHECK(all[2 * r] == all[0] && std::abs(all[2 * r + 1] - all[1]) <= 1e-5 * std::abs(all[1]),
                    "{}::step: the gradients differ between ranks (rank {}: {} gradients summing to {} in magnitude, "
                    "rank 0: {} summing to {}): wrap the model in DistributedDataParallel, or build this optimizer "
                    "with ZeroRedundancyOptimizerOptions().reduce_scatter(true)", kName, r, all[2 * r], all[2 * r + 1],
                    all[0], all[1]);
    checked_gradients_ = true;
  }
  for (size_t i = 0; i < params_.size(); ++i) updated_[i] = has[i] != 0;
  const int64_t lo = shard_begin();
  for (const Piece& piece : pieces_) {
    if (!updated_[piece.param]) continue;  // no gradient: the local optimizer skips the piece
    const int64_t length = piece.values.numel();
    if (shard.defined()) {
      piece.values.set_grad(
          shard.narrow(0, offsets_[piece.param] + piece.begin - lo, length).reshape(piece.values.shape()));
    } else {
      const Tensor g = params_[piece.param].grad().detach();
      piece.values.set_grad(g.reshape({-1}).narrow(0, piece.begin, length).reshape(piece.values.shape()));
    }
  }
}

void ZeroRedundancyOptimizer::gather_parameters() {
  const int world = world_size();
  if (world == 1) return;  // the pieces are the parameters' own memory
  Tensor mine = zeros({shard_size_}, params_[0].dtype());
  const int64_t lo = shard_begin();
  for (const Piece& piece : pieces_)
    if (piece.values.numel() > 0)
      mine.narrow(0, offsets_[piece.param] + piece.begin - lo, piece.values.numel()).copy_(piece.values);
  const Tensor flat = all_gather(mine).reshape({-1});  // (world, L) -> (world·L), every rank's shard in order
  for (size_t i = 0; i < params_.size(); ++i)
    if (updated_[i])
      params_[i].detach().copy_(flat.narrow(0, offsets_[i], params_[i].numel()).reshape(params_[i].shape()));
}

// ---- checkpoints ------------------------------------------------------------------------------
namespace {
// A state entry with a value per element (Adam's moments): of its tensor's shape and dtype. The
// others are numbers, the same for every piece of a parameter (Adam's step).
bool is_buffer(const Tensor& entry, const Tensor& tensor) {
  return entry.shape() == tensor.shape() && entry.dtype() == tensor.dtype();
}
}  // namespace

// What each parameter's state holds, agreed by all ranks: every entry is either a buffer of the
// parameter's shape (whose pieces are spread over the ranks) or a 0-d number (the same in every
// piece, e.g. Adam's step), in which case the rank holding the parameter's first element says it.
NamedTensors ZeroRedundancyOptimizer::state_dict() const {
  NoGradGuard no_grad;
  const DType dtype = params_[0].dtype();
  const int64_t lo = shard_begin();
  // 1. The entry names any rank holds, as "b:<name>" (buffer) or "s<dtype>:<name>" (0-d).
  std::set<std::string> names;
  for (const Piece& piece : pieces_)
    for (const auto& [name, t] : local_->state(piece.values)) {
      CPPGRAD_CHECK(t.dim() == 0 || is_buffer(t, piece.values),
                    "{}::state_dict: the local optimizer's '{}' is {} {}, neither 0-d nor its piece's {} {}", kName,
                    name, dtype_name(t.dtype()), shape_str(t.shape()), shape_str(piece.values.shape()), dtype_name(dtype));
      names.insert(is_buffer(t, piece.values) ? "b:" + name : fmt::format("s{}:{}", static_cast<int>(t.dtype()), name));
    }
  std::string mine;
  for (const std::string& n : names) mine += n + "\n";
  for (const std::string& theirs : all_gather_strings(mine))
    for (size_t at = 0, next; (next = theirs.find('\n', at)) != std::string::npos; at = next + 1)
      names.insert(theirs.substr(at, next - at));
  const std::vector<std::string> entries(names.begin(), names.end());  // the same order on every rank

  // 2. Which parameter has which entry, from the rank holding its first element (one per parameter).
  const int64_t P = static_cast<int64_t>(params_.size()), K = static_cast<int64_t>(entries.size());
  Tensor present = zeros({P, K}, kInt64);
  for (const Piece& piece : pieces_) {
    if (piece.begin != 0) continue;
    const auto& state = local_->state(piece.values);
    for (int64_t k = 0; k < K; ++k) {
      const auto found = state.find(entries[k].substr(entries[k].find(':') + 1));
      if (found != state.end() && is_buffer(found->second, piece.values) == (entries[k][0] == 'b'))
        present.data<int64_t>()[piece.param * K + k] = 1;
    }
  }
  all_reduce(present, ReduceOp::Sum);

  // 3. Each entry's values: buffers all-gathered shard by shard, numbers summed from their one holder.
  std::unique_ptr<optim::Optimizer> whole = make_(param_groups());  // the current options, no state yet
  for (int64_t k = 0; k < K; ++k) {
    const std::string name = entries[k].substr(entries[k].find(':') + 1);
    if (entries[k][0] == 'b') {
      Tensor shard = zeros({shard_size_}, dtype);
      for (const Piece& piece : pieces_) {
        const auto& state = local_->state(piece.values);
        if (state.count(name) && is_buffer(state.at(name), piece.values) && piece.values.numel() > 0)
          shard.narrow(0, offsets_[piece.param] + piece.begin - lo, piece.values.numel()).copy_(state.at(name));
      }
      const Tensor flat = all_gather(shard).reshape({-1});  // (world, L) -> (world·L)
      for (int64_t i = 0; i < P; ++i)
        if (present.data<int64_t>()[i * K + k])
          whole->state(params_[i])[name] = flat.narrow(0, offsets_[i], params_[i].numel()).reshape(params_[i].shape()).clone();
    } else {
      const DType number_dtype = static_cast<DType>(std::stoi(entries[k].substr(1)));
      Tensor numbers = zeros({P}, number_dtype);
      for (const Piece& piece : pieces_) {
        const auto& state = local_->state(piece.values);
        if (piece.begin == 0 && state.count(name) && !is_buffer(state.at(name), piece.values)) numbers.select(0, piece.param).copy_(state.at(name));
      }
      all_reduce(numbers, ReduceOp::Sum);
      for (int64_t i = 0; i < P; ++i)
        if (present.data<int64_t>()[i * K + k]) whole->state(params_[i])[name] = numbers.select(0, i).clone();
    }
  }
  return whole->state_dict();
}

void ZeroRedundancyOptimizer::load_state_dict(const NamedTensors& state) {
  NoGradGuard no_grad;
  // The unsharded optimizer checks the file (every key, shape, range), as for a plain run.
  std::unique_ptr<optim::Optimizer> whole = make_(param_groups());
  try {
    whole->load_state_dict(state);
  } catch (const Error& e) {
    throw Error(fmt::format("{}::load_state_dict: {}", kName, e.what()));
  }
  NamedTensors shard;  // this rank's pieces, in the local optimizer's numbering
  for (const auto& entry : state)
    if (entry.first.starts_with("param_groups.")) shard.push_back(entry);
  for (size_t j = 0; j < pieces_.size(); ++j) {
    const Piece& piece = pieces_[j];
    for (const auto& [name, t] : whole->state(params_[piece.param]))
      shard.emplace_back(fmt::format("state.{}.{}", j, name),
                         !is_buffer(t, params_[piece.param])
                             ? t
                             : t.reshape({-1}).narrow(0, piece.begin, piece.values.numel()).reshape(piece.values.shape()).clone());
  }
  local_->load_state_dict(shard);
  for (size_t g = 0; g < param_groups().size(); ++g) copy_options(param_groups()[g], whole->param_groups()[g]);
}

NamedTensors ZeroRedundancyOptimizer::local_state_dict() const {
  NamedTensors out{{"world_size", scalar_tensor(world_size(), kInt64)},
                   {"rank", scalar_tensor(rank(), kInt64)},
                   {"numel", scalar_tensor(static_cast<double>(total_), kInt64)}};
  // The local optimizer's options are this optimizer's as of its last step: save the current ones.
  const_cast<ZeroRedundancyOptimizer*>(this)->copy_options_to_local();
  for (auto& entry : with_prefix("shard.", local_->state_dict())) out.push_back(std::move(entry));
  return out;
}

void ZeroRedundancyOptimizer::load_local_state_dict(const NamedTensors& state) {
  const std::string op = fmt::format("{}::load_local_state_dict", kName);
  StateReader in(state, op);
  const int64_t world = in.int64("world_size", Bounds::at_least(1));
  const int64_t saved_rank = in.int64("rank", Bounds::at_least(0));
  const int64_t numel = in.int64("numel", Bounds::at_least(0));
  CPPGRAD_CHECK(world == world_size() && saved_rank == rank() && numel == total_,
                "{}: the shard is rank {}'s of {} processes over {} elements; this is rank {} of {} over {}: a shard "
                "loads only where it was written (load the gathered state_dict() to change the process count)",
                op, saved_rank, world, numel, rank(), world_size(), total_);
  in.load_part("shard.", [&](const NamedTensors& shard) { local_->load_state_dict(shard); });
  in.finish();
  for (size_t g = 0; g < param_groups().size(); ++g) copy_options(param_groups()[g], local_->param_groups()[g]);
}

// ---- memory -------------------------------------------------------------------------------------
int64_t ZeroRedundancyOptimizer::state_bytes(const optim::Optimizer& optimizer) {
  if (const auto* zero = dynamic_cast<const ZeroRedundancyOptimizer*>(&optimizer)) return zero->state_bytes();
  int64_t bytes = 0;
  for (const optim::ParamGroup& g : optimizer.param_groups())
    for (const Tensor& p : g.params)
      for (const auto& entry : optimizer.state(p))
        bytes += entry.second.numel() * static_cast<int64_t>(dtype_size(entry.second.dtype()));
  return bytes;
}

int64_t ZeroRedundancyOptimizer::state_bytes() const { return state_bytes(*local_); }

}  // namespace cppgrad::distributed
