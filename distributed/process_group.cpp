// The process group over MPI_COMM_WORLD. See process_group.h.
#include "process_group.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "../runtime/error.h"
#include "watchdog.h"

namespace cppgrad::distributed {

namespace {
bool g_exists = false;  // a ProcessGroup is alive
bool g_mpi = false;     // ... and it started MPI
int g_rank = 0;
int g_world_size = 1;
std::terminate_handler g_previous_terminate = nullptr;

// mpirun (Open MPI's, and MPICH's Hydra) tells each process its place through the environment.
bool launched_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

// An exception escaped main on this rank: print it with the rank, then end every rank, since
// the others may be waiting in a collective that this one will never join.
[[noreturn]] void abort_on_terminate() {
  std::string message = "std::terminate called";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      message = std::string("uncaught exception: ") + ex.what();
    } catch (...) {
      message = "uncaught exception of unknown type";
    }
  }
  std::fprintf(stderr, "rank %d of %d: %s\n", g_rank, g_world_size, message.c_str());
  std::fflush(stderr);
  if (g_mpi) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

void start(int* argc, char*** argv) {
  CPPGRAD_CHECK(!g_exists, "ProcessGroup: one already exists (MPI starts once per process)");
  g_exists = true;
  g_previous_terminate = std::set_terminate(abort_on_terminate);
  if (!launched_by_mpirun()) return;  // a world of one, without MPI
  watchdog::configure();              // CPPGRAD_COLLECTIVE_TIMEOUT, refused before MPI starts
  int already = 0;
  MPI_Initialized(&already);
  CPPGRAD_CHECK(!already, "ProcessGroup: MPI was already initialised by someone else");
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  g_mpi = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world_size);
  watchdog::start();
}
}  // namespace

ProcessGroup::ProcessGroup(int& argc, char**& argv) { start(&argc, &argv); }
ProcessGroup::ProcessGroup() { start(nullptr, nullptr); }

ProcessGroup::~ProcessGroup() {
  if (g_mpi) {
    // Leaving main by an exception that someone catches further out (the others may be stuck
    // in a collective): MPI_Finalize would wait for them forever, so end the job instead.
    if (std::uncaught_exceptions() > 0) {
      std::fprintf(stderr, "rank %d of %d: leaving the process group by an exception; ending the job\n", g_rank,
                   g_world_size);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    // (No watched barrier first: rank 0 may still be writing files or sampling, for as long as
    // it takes, while the others have finished.)
    watchdog::stop();
    MPI_Finalize();
  }
  std::set_terminate(g_previous_terminate);
  g_exists = g_mpi = false;
  g_rank = 0;
  g_world_size = 1;
}

int ProcessGroup::rank() const { return g_rank; }
int ProcessGroup::world_size() const { return g_world_size; }

int rank() { return g_rank; }
int world_size() { return g_world_size; }
bool is_initialized() { return g_mpi; }

// (barrier() is in collectives.cpp, beside the wait that does not spin.)

void abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (g_mpi) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace cppgrad::distributed
