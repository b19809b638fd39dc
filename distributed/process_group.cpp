// The process group over MPI_COMM_WORLD. See process_group.h.
#include "process_group.h"

#include <mpi.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <utility>

#include "../runtime/error.h"
#include "watchdog.h"

namespace cppgrad::distributed {

namespace {
bool g_exists = false;  // a ProcessGroup is alive
bool g_mpi = false;     // ... and it started MPI
int g_rank = 0;
int g_world_size = 1;
std::terminate_handler g_previous_terminate = nullptr;
Transport g_transport = Transport::SharedMemory;
int64_t g_eager_limit = 64 << 10;

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

// One of MPI's control variables (MPI_T), opened for reading: its type and how many values
// (characters, for text) it holds. `open` is false when this MPI has no such variable
// (MPICH, or an Open MPI component that is not loaded).
struct ControlVariable {
  explicit ControlVariable(const char* name) {
    int index = -1;
    if (MPI_T_cvar_get_index(name, &index) != MPI_SUCCESS) return;
    char found_name[256];
    int name_length = sizeof found_name, verbosity = 0, bind = 0, scope = 0, description_length = 0;
    MPI_T_enum enumtype;
    MPI_T_cvar_get_info(index, found_name, &name_length, &verbosity, &type, &enumtype, nullptr, &description_length,
                        &bind, &scope);
    open = MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS;
  }
  ~ControlVariable() {
    if (open) MPI_T_cvar_handle_free(&handle);
  }
  ControlVariable(const ControlVariable&) = delete;
  ControlVariable& operator=(const ControlVariable&) = delete;

  bool open = false;
  MPI_T_cvar_handle handle{};
  MPI_Datatype type = MPI_DATATYPE_NULL;
  int count = 0;
};

std::string control_text(const char* name) {
  ControlVariable variable(name);
  if (!variable.open || variable.type != MPI_CHAR) return "";
  std::string value(static_cast<size_t>(std::max(variable.count, 1)) + 1, '\0');
  MPI_T_cvar_read(variable.handle, value.data());
  return value.c_str();
}

int64_t control_number(const char* name, int64_t fallback) {
  ControlVariable variable(name);
  if (!variable.open) return fallback;
  int64_t value = fallback;
  const MPI_Datatype type = variable.type;
  if (type == MPI_INT) {
    int v = 0;
    MPI_T_cvar_read(variable.handle, &v);
    value = v;
  } else if (type == MPI_UNSIGNED) {
    unsigned v = 0;
    MPI_T_cvar_read(variable.handle, &v);
    value = v;
  } else if (type == MPI_UNSIGNED_LONG || type == MPI_LONG) {
    unsigned long v = 0;
    MPI_T_cvar_read(variable.handle, &v);
    value = static_cast<int64_t>(v);
  } else if (type == MPI_UNSIGNED_LONG_LONG || type == MPI_LONG_LONG) {
    unsigned long long v = 0;
    MPI_T_cvar_read(variable.handle, &v);
    value = static_cast<int64_t>(v);
  }
  return value > 0 ? value : fallback;
}

// May MPI move bytes between two processes of one machine through shared memory? Open MPI's
// `btl` setting lists the transports it may use ("self,vader"), or those it may not
// ("^openib"); "vader" and "sm" are its shared-memory one. No such setting (another MPI): yes.
bool shared_memory_allowed(const std::string& btl) {
  if (btl.empty()) return true;
  const bool excluding = btl[0] == '^';
  bool named = false;
  std::string_view rest = std::string_view(btl).substr(excluding ? 1 : 0);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    named = named || item == "vader" || item == "sm";
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return excluding ? !named : named;
}

// Decided together, so that every rank cuts the ring's messages alike: Network if any rank
// has a peer on another machine or may not use shared memory.
void find_transport() {
  int provided = 0;
  const bool tools = MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) == MPI_SUCCESS;
  const bool allowed = !tools || shared_memory_allowed(control_text("btl"));
  if (tools) g_eager_limit = control_number("btl_tcp_eager_limit", g_eager_limit);
  if (tools) MPI_T_finalize();
  MPI_Comm machine;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &machine);
  int on_this_machine = 0;
  MPI_Comm_size(machine, &on_this_machine);
  MPI_Comm_free(&machine);
  int network = on_this_machine < g_world_size || !allowed ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &network, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  int64_t eager = g_eager_limit;  // the smallest, should the ranks' settings differ
  MPI_Allreduce(MPI_IN_PLACE, &eager, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  g_eager_limit = eager;
  g_transport = network ? Transport::Network : Transport::SharedMemory;
}

void start(int* argc, char*** argv) {
  CPPGRAD_CHECK(!g_exists, "ProcessGroup: one already exists (MPI starts once per process)");
  g_exists = true;
  g_previous_terminate = std::set_terminate(abort_on_terminate);
  if (!launched_by_mpirun()) return;  // a world of one, without MPI
  // Until MPI has started, the rank and size are the launcher's: a refusal before then (below)
  // names the right rank.
  for (const auto& [rank_name, size_name] : {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                             std::pair{"PMI_RANK", "PMI_SIZE"}}) {
    const char* rank_text = std::getenv(rank_name);
    const char* size_text = std::getenv(size_name);
    if (rank_text == nullptr || size_text == nullptr) continue;
    g_rank = std::atoi(rank_text);
    g_world_size = std::atoi(size_text);
    break;
  }
  watchdog::configure();  // CPPGRAD_COLLECTIVE_TIMEOUT, refused before MPI starts
  int already = 0;
  MPI_Initialized(&already);
  CPPGRAD_CHECK(!already, "ProcessGroup: MPI was already initialised by someone else");
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  g_mpi = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world_size);
  find_transport();
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
    // A watched barrier first (watchdog.h): a rank stopped after its last collective ends the
    // job within the collective timeout, named, as one stopped mid-training does, instead of
    // leaving the others in MPI_Finalize, which nothing watches. A rank still busy at the end
    // (rank 0 writing files) is waited for up to the timeout, the rule for a rank busy between
    // collectives. MPI_Finalize itself is left unguarded: past the barrier every rank is at most
    // a few instructions from it.
    barrier();
    watchdog::stop();
    MPI_Finalize();
  }
  std::set_terminate(g_previous_terminate);
  g_exists = g_mpi = false;
  g_rank = 0;
  g_world_size = 1;
  g_transport = Transport::SharedMemory;
}

int ProcessGroup::rank() const { return g_rank; }
int ProcessGroup::world_size() const { return g_world_size; }

int rank() { return g_rank; }
int world_size() { return g_world_size; }
bool is_initialized() { return g_mpi; }
Transport transport() { return g_transport; }
int64_t network_eager_limit() { return g_eager_limit; }

// (barrier() is in collectives.cpp, beside the wait that does not spin.)

void abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (g_mpi) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace cppgrad::distributed
