// The ring all-reduce: reduce-scatter, then all-gather, each rank's chunk moving in pipelined
// segments (the Ring class below says how), and its tuning (internal/collectives_tuning.h).
// collectives.cpp chooses it from 64 KiB up between 2 or 3 ranks and waits for it like any
// other collective: its Work::State moves it on (internal/work_state.h).
#include <mpi.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "internal/collectives_tuning.h"
#include "internal/work_state.h"
#include "process_group.h"

namespace cppgrad::distributed {

using tuning::RingPipeline;

// The ring's messages carry a tag of their own per all-reduce and round: several all-reduces
// may be in flight at once (DDP's buckets), each moving through its rounds at its own pace, and
// MPI matches messages by (source, tag). Every rank starts its collectives in the same order,
// so counting them gives matching tags.
int ring_tag(int64_t sequence, int round) {
  static const int tag_bound = [] {
    void* value = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &found);
    return found ? *static_cast<int*>(value) : 32767;  // the least the standard allows
  }();
  const int64_t rounds = 8;  // 2(N - 1) <= 4 for the N < 4 the ring runs at; 8 leaves room
  return static_cast<int>((sequence % (tag_bound / rounds)) * rounds + round);
}

namespace {

std::optional<RingPipeline> chosen_pipeline;  // set_ring_pipeline's; else the transport's default

// The default pipeline (internal/collectives_tuning.h says why): over TCP, a message above the
// eager limit first waits a round trip for the receiver's go-ahead, so segments are the largest
// power of two that goes eagerly with room for MPI's header; 8 of them (256 KiB) on the way
// cover a round trip at 10 Gbit/s and 100 us each way. The environment's fields replace these.
RingPipeline default_ring_pipeline() {
  RingPipeline pipeline{256 << 10, 4, 1 << 20};
  if (transport() == Transport::Network) {
    int64_t segment = 4096;
    while (segment * 2 <= network_eager_limit() - 256) segment *= 2;
    pipeline = {segment, 8, 0};
  }
  if (auto n = number_from_env("CPPGRAD_RING_SEGMENT_BYTES", 0)) pipeline.segment_bytes = *n;
  if (auto n = number_from_env("CPPGRAD_RING_IN_FLIGHT", 1)) pipeline.in_flight = static_cast<int>(*n);
  if (auto n = number_from_env("CPPGRAD_RING_WHOLE_CHUNK_BYTES", 0)) pipeline.whole_chunk_bytes = *n;
  return pipeline;
}

RingPipeline current_pipeline() { return chosen_pipeline ? *chosen_pipeline : default_ring_pipeline(); }

// The ring all-reduce (reduce-scatter, then all-gather), in place on `buffer`: cut into N
// chunks; rank r sends to r + 1 and receives from r - 1. Reduce-scatter step s: send chunk
// r - s, receive chunk r - s - 1 and add it into ours; after N - 1 steps rank r holds the
// full sum of chunk r + 1. All-gather step t: send chunk r + 1 - t, receive chunk r - t in
// place. Each rank sends 2(N - 1)/N of the message in all, the least any all-reduce can.
// Every chunk is summed once, by one rank, and copied to the others, so every rank ends with
// the same bits (between 2 ranks the one addition a + b, which is b + a in IEEE arithmetic).
//
// Pipelined: each chunk moves in segments (RingPipeline), several on the way at once. A
// segment that arrives in the reduce-scatter is added at once, while it is still in cache and
// while the next segments travel, and a segment goes on to the next step as soon as its own
// previous step is done, not the whole chunk's. So a segment (s, j), segment j of step s's
// chunk, may be
//   sent      once received (and, in the reduce-scatter, added) at step s - 1: it is the same
//             chunk (r - s is what arrived at step s - 1 as r - (s - 1) - 1), the same segment;
//   received  into a scratch slot in the reduce-scatter (one of `in_flight`, freed by its
//             add), in place in the all-gather, and there only once this rank's own send of
//             those bytes at reduce-scatter step t is complete (MPI may read a send buffer
//             until then).
// Segments of one step carry the same tag and go one way between two ranks, in the order
// both sides post them, so MPI (whose messages between two ranks with one tag do not
// overtake each other) matches each with its own.
class Ring {
 public:
  Ring(const Tensor& buffer, const Tensor& scratch, ReduceOp op, RingPipeline pipeline, int64_t call)
      : n_(world_size()),
        me_(rank()),
        element_(dtype_size(buffer.dtype())),
        type_(mpi_type(buffer, "all_reduce")),
        reduction_(mpi_op(op)),
        data_(static_cast<char*>(buffer.raw_data())),
        scratch_(static_cast<char*>(scratch.raw_data())),
        slots_(slot_count(buffer.numel(), element_, pipeline)),
        slot_elements_(segment_elements(buffer.numel(), element_, pipeline)) {
    const int64_t count = buffer.numel();
    auto chunk = [count, this](int c) { return shard_range(count, ((c % n_) + n_) % n_, n_); };
    const int reduce_steps = n_ - 1;
    std::vector<int64_t> first_send, first_receive;  // each step's first segment, in each stream
    for (int s = 0; s < 2 * reduce_steps; ++s) {
      const bool reducing = s < reduce_steps;
      const int t = s - reduce_steps;
      const Range out = reducing ? chunk(me_ - s) : chunk(me_ + 1 - t);
      const Range in = reducing ? chunk(me_ - s - 1) : chunk(me_ - t);
      const int tag = ring_tag(call, s);
      first_send.push_back(static_cast<int64_t>(sends_.size()));
      first_receive.push_back(static_cast<int64_t>(receives_.size()));
      int64_t j = 0;
      for (int64_t begin = out.begin; begin < out.end; begin += slot_elements_, ++j) {
        const int64_t after = s == 0 ? -1 : first_receive[static_cast<size_t>(s - 1)] + j;
        sends_.push_back({{begin, std::min(out.end, begin + slot_elements_)}, tag, reducing, after});
      }
      j = 0;
      for (int64_t begin = in.begin; begin < in.end; begin += slot_elements_, ++j) {
        const int64_t after = reducing ? -1 : first_send[static_cast<size_t>(t)] + j;
        receives_.push_back({{begin, std::min(in.end, begin + slot_elements_)}, tag, reducing, after});
      }
    }
    send_requests_.assign(sends_.size(), MPI_REQUEST_NULL);
    receive_requests_.assign(receives_.size(), MPI_REQUEST_NULL);
  }

  // The scratch a ring of `count` elements needs: a slot for each received segment on the way.
  static int64_t scratch_elements(int64_t count, size_t element, RingPipeline pipeline) {
    return slot_count(count, element, pipeline) * segment_elements(count, element, pipeline);
  }

  int64_t segment_bytes() const { return slot_elements_ * static_cast<int64_t>(element_); }

  // Tests what is on the way (oldest first: segments arrive in order), adds what arrived,
  // starts what may start.
  Progress advance() {
    bool advanced = false;
    for (;;) {
      start_what_may_start();
      bool moved = false;
      while (received_ < receives_posted_) {
        int done = 0;
        MPI_Test(&receive_requests_[static_cast<size_t>(received_)], &done, MPI_STATUS_IGNORE);
        if (!done) break;
        const Segment& segment = receives_[static_cast<size_t>(received_)];
        if (segment.reducing)  // ours += what arrived
          MPI_Reduce_local(slot(received_), at(segment), length(segment), type_, reduction_);
        ++received_;
        moved = true;
      }
      while (sent_ < sends_posted_) {
        int done = 0;
        MPI_Test(&send_requests_[static_cast<size_t>(sent_)], &done, MPI_STATUS_IGNORE);
        if (!done) break;
        ++sent_;
        moved = true;
      }
      if (!moved) break;
      advanced = true;
    }
    if (received_ == static_cast<int64_t>(receives_.size()) && sent_ == static_cast<int64_t>(sends_.size()))
      return Progress::Done;
    return advanced ? Progress::Advanced : Progress::None;
  }

 private:
  struct Segment {
    Range range;
    int tag;
    bool reducing;  // a reduce-scatter step's (received into a scratch slot, then added)
    int64_t after;  // the other stream's segment that must be complete first (-1: none)
  };

  // Elements in a segment: segment_bytes' worth, at most the largest chunk.
  // Received segments on the way at once: `in_flight`, or as many as the largest chunk has, if fewer.
  static int slot_count(int64_t count, size_t element, RingPipeline pipeline) {
    const Range largest = shard_range(count, 0, world_size());
    const int64_t segment = segment_elements(count, element, pipeline);
    const int64_t segments = std::max<int64_t>(1, (largest.end - largest.begin + segment - 1) / segment);
    return static_cast<int>(std::min<int64_t>(std::max(1, pipeline.in_flight), segments));
  }

  static int64_t segment_elements(int64_t count, size_t element, RingPipeline pipeline) {
    const Range largest = shard_range(count, 0, world_size());
    const int64_t whole = std::max<int64_t>(1, largest.end - largest.begin);
    if (pipeline.segment_bytes <= 0 || whole * static_cast<int64_t>(element) <= pipeline.whole_chunk_bytes)
      return whole;
    return std::clamp<int64_t>(pipeline.segment_bytes / static_cast<int64_t>(element), 1, whole);
  }

  void start_what_may_start() {
    const int left = (me_ + n_ - 1) % n_, right = (me_ + 1) % n_;
    while (receives_posted_ < static_cast<int64_t>(receives_.size()) && receives_posted_ - received_ < slots_) {
      const Segment& segment = receives_[static_cast<size_t>(receives_posted_)];
      if (segment.after >= sent_) break;  // this rank still sends from where it would land
      void* into = segment.reducing ? slot(receives_posted_) : at(segment);
      MPI_Irecv(into, length(segment), type_, left, segment.tag, MPI_COMM_WORLD,
                &receive_requests_[static_cast<size_t>(receives_posted_)]);
      ++receives_posted_;
    }
    while (sends_posted_ < static_cast<int64_t>(sends_.size())) {
      const Segment& segment = sends_[static_cast<size_t>(sends_posted_)];
      if (segment.after >= received_) break;  // not yet received (and added) at the step before
      MPI_Isend(at(segment), length(segment), type_, right, segment.tag, MPI_COMM_WORLD,
                &send_requests_[static_cast<size_t>(sends_posted_)]);
      ++sends_posted_;
    }
  }

  char* at(const Segment& segment) const { return data_ + segment.range.begin * static_cast<int64_t>(element_); }
  char* slot(int64_t receive) const {
    return scratch_ + (receive % slots_) * slot_elements_ * static_cast<int64_t>(element_);
  }
  static int length(const Segment& segment) { return static_cast<int>(segment.range.end - segment.range.begin); }

  int n_, me_;
  size_t element_;
  MPI_Datatype type_;
  MPI_Op reduction_;
  char* data_;
  char* scratch_;
  int slots_;
  int64_t slot_elements_;
  std::vector<Segment> sends_, receives_;  // in the order this rank posts them
  std::vector<MPI_Request> send_requests_, receive_requests_;
  int64_t sends_posted_ = 0, sent_ = 0, receives_posted_ = 0, received_ = 0;
};

}  // namespace

void start_ring(Work::State& state, const Tensor& buffer, ReduceOp op) {
  static int64_t sequence = 0;
  const RingPipeline pipeline = current_pipeline();
  Tensor scratch = empty({Ring::scratch_elements(buffer.numel(), dtype_size(buffer.dtype()), pipeline)}, buffer.dtype());
  state.buffers.push_back(scratch);
  auto ring = std::make_shared<Ring>(buffer, scratch, op, pipeline, sequence++);
  state.advance = [ring] { return ring->advance(); };
  state.bytes = ring->segment_bytes();  // a step of progress moves a segment: how long a busy wait spins after one
  ring->advance();  // the first segments
}

void tuning::set_ring_pipeline(RingPipeline pipeline) {
  CPPGRAD_CHECK(pipeline.in_flight >= 1, "set_ring_pipeline: in_flight {} (at least 1 segment must be on the way)",
                pipeline.in_flight);
  chosen_pipeline = pipeline;
}
RingPipeline tuning::get_ring_pipeline() { return current_pipeline(); }
void tuning::reset_ring_pipeline() { chosen_pipeline.reset(); }


}  // namespace cppgrad::distributed
