#include "autograd/side_tables.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

namespace cppgrad::autograd {

namespace {

// A node's entry, looked up only while the table holds any (one atomic load otherwise). Nodes
// are made and freed on any thread, so the map is behind a mutex.
template <class T>
class SideTable {
 public:
  void put(const Node* node, const T& value) {
    std::lock_guard lock(mutex_);
    entries_[node] = value;
    size_.store(entries_.size(), std::memory_order_release);
  }
  std::optional<T> lookup(const Node* node) const {
    if (size_.load(std::memory_order_acquire) == 0) return std::nullopt;
    std::lock_guard lock(mutex_);
    auto it = entries_.find(node);
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }
  void drop(const Node* node) {
    if (size_.load(std::memory_order_acquire) == 0) return;
    std::lock_guard lock(mutex_);
    entries_.erase(node);
    size_.store(entries_.size(), std::memory_order_release);
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<const Node*, T> entries_;
  std::atomic<size_t> size_{0};
};

// The table of T's, one per type: the autocast state a node was recorded under, the slice a node
// took, the rows it selected. Never destroyed: nodes may still die while the program exits.
template <class T>
SideTable<T>& table() {
  static auto* instance = new SideTable<T>;
  return *instance;
}
auto& autocast_states() { return table<autocast::State>(); }
auto& slices() { return table<SliceOf>(); }
auto& selected_rows() { return table<RowsOf>(); }

}  // namespace

void note_forward_state(const Node& node) {
  if (autocast::is_enabled()) autocast_states().put(&node, autocast::state());
}

autocast::State forward_autocast(const Node& node) { return autocast_states().lookup(&node).value_or(autocast::State{}); }

void note_slice(const Node& node, SliceOf at) { slices().put(&node, at); }
std::optional<SliceOf> slice_of(const Node& node) { return slices().lookup(&node); }

void note_rows(const Node& node, RowsOf rows) { selected_rows().put(&node, rows); }
std::optional<RowsOf> rows_of(const Node& node) { return selected_rows().lookup(&node); }

void forget_side_tables(const Node* node) {
  autocast_states().drop(node);
  slices().drop(node);
  selected_rows().drop(node);
}

}  // namespace cppgrad::autograd
