// The collectives' watchdog: a rank that stops answering (stopped with SIGSTOP, stuck in a loop,
// its machine frozen) ends the whole job within a bounded time, with a line naming it, instead of
// leaving the others waiting for ever in a collective it will never join. PyTorch's `timeout=` of
// init_process_group, for cppgrad's collectives.
//
// Every wait of a collective (collectives.cpp: all_reduce, broadcast, all_gather, reduce_scatter,
// barrier, DDP's buckets, and the barrier with which ProcessGroup ends) has a deadline: the collective timeout, 300 s unless set otherwise, by
//   CPPGRAD_COLLECTIVE_TIMEOUT=30 scripts/mpirun 2 program     (seconds; read when MPI starts)
// or distributed::set_collective_timeout(30) in the program. Past it, the rank asks every other
// rank, on a communicator of its own, what it is doing; a rank waiting in a collective answers
// at once (and so does a rank past its own deadline). Those that do not answer within a grace
// period (a tenth of the timeout, between 1 and 10 s) are named:
//
//   cppgrad watchdog: rank 0 of 2: a collective (its 57th wait) has waited 33.0 s, past the
//   collective timeout of 30 s (CPPGRAD_COLLECTIVE_TIMEOUT): rank 1 did not answer within 3.0 s
//   (stopped, hung, or busy outside collectives for that long); ending the job
//
// and the rank ends the job (MPI_Abort, exit code 1). When every rank answers (all are waiting:
// collectives called in another order on some rank, or a transfer slower than the timeout), the
// line says which wait each is in, and the job ends too. A rank that computes for longer than the
// timeout while the others wait (a long evaluation on rank 0 only) is indistinguishable from a
// stopped one: give such a program a longer timeout. The same holds at the end of the job: the
// ProcessGroup ends with a watched barrier, so a rank stopped after its last collective ends the
// job as one stopped during training does, and a rank still busy there (rank 0 writing files
// while the others have finished) has the timeout to arrive.
#pragma once

namespace cppgrad::distributed {

// The deadline of every collective's wait, in seconds (> 0, finite). Set before or after the
// ProcessGroup starts; the environment's CPPGRAD_COLLECTIVE_TIMEOUT, read when it starts, wins
// over a value set before.
void set_collective_timeout(double seconds);
double collective_timeout();

namespace watchdog {

// Called by ProcessGroup: configure() before MPI starts (reads CPPGRAD_COLLECTIVE_TIMEOUT; a
// value that is not a positive number of seconds throws cppgrad::Error naming it), start() once
// it has (its communicator), stop() before it ends.
void configure();
void start();
void stop();

// One wait of a collective. The loop that waits calls poll() each time round: it answers the
// other ranks' questions, and past the deadline asks its own, then names the ranks that did not
// answer and ends the job. Cheap between the moments it acts (a clock read).
class Wait {
 public:
  Wait();
  ~Wait();
  Wait(const Wait&) = delete;
  Wait& operator=(const Wait&) = delete;
  void poll();

 private:
  long long number_;  // this rank's count of waits, this one included
  double started_, deadline_, next_look_;  // seconds on the steady clock
  bool asking_ = false;
  double grace_end_ = 0;
};

}  // namespace watchdog
}  // namespace cppgrad::distributed
