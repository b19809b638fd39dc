// The collectives' watchdog. See watchdog.h.
//
// The questions and answers travel on a duplicate of MPI_COMM_WORLD, so they never match a
// message of the program's own. A question is {round}; an answer {round, the answerer's wait
// number}. Sends are non-blocking: a stopped rank never holds up the one that asks it.
#include "watchdog.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <string>
#include <vector>

#include "../runtime/error.h"

namespace cppgrad::distributed {

namespace {

constexpr int kQuestion = 1, kAnswer = 2;
constexpr double kDefaultTimeout = 300;

double g_timeout = kDefaultTimeout;
MPI_Comm g_comm = MPI_COMM_NULL;
int g_rank = 0, g_world = 1;
long long g_waits = 0;       // waits started on this rank
long long g_in_wait = 0;     // the wait in progress (0: none)
long long g_round = 0;       // this rank's rounds of questions
std::vector<long long> g_answers;  // per rank, this round: its wait number, or -1 before it answers

struct Send {
  MPI_Request request = MPI_REQUEST_NULL;
  long long message[2] = {0, 0};
};
std::list<Send> g_sends;  // in flight (a list: MPI keeps pointers into each message)

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double grace_seconds() { return std::clamp(g_timeout / 10, 1.0, 10.0); }

void send(int to, int tag, long long a, long long b) {
  Send& s = g_sends.emplace_back();
  s.message[0] = a;
  s.message[1] = b;
  MPI_Isend(s.message, 2, MPI_LONG_LONG, to, tag, g_comm, &s.request);
}

// Lets MPI finish the sends it can, and forgets them.
void retire_sends() {
  for (auto it = g_sends.begin(); it != g_sends.end();) {
    int done = 0;
    MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
    it = done ? g_sends.erase(it) : std::next(it);
  }
}

// Every question that has come is answered with the wait this rank is in; every answer that has
// come is recorded when it belongs to the current round (an older round's is dropped).
void handle_messages() {
  for (;;) {
    int pending = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, g_comm, &pending, &status);
    if (!pending) break;
    long long message[2];
    MPI_Recv(message, 2, MPI_LONG_LONG, status.MPI_SOURCE, status.MPI_TAG, g_comm, MPI_STATUS_IGNORE);
    if (status.MPI_TAG == kQuestion)
      send(status.MPI_SOURCE, kAnswer, message[0], g_in_wait);
    else if (status.MPI_TAG == kAnswer && message[0] == g_round && !g_answers.empty())
      g_answers[static_cast<size_t>(status.MPI_SOURCE)] = message[1];
  }
  retire_sends();
}

std::string ordinal(long long n) {
  const long long tens = n % 100, ones = n % 10;
  const char* suffix = (tens >= 11 && tens <= 13) ? "th" : ones == 1 ? "st" : ones == 2 ? "nd" : ones == 3 ? "rd" : "th";
  return std::to_string(n) + suffix;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i)
    text += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  return text;
}

[[noreturn]] void end_the_job(long long wait_number, double waited) {
  std::vector<int> silent;
  std::string answered;
  for (int r = 0; r < g_world; ++r) {
    if (r == g_rank) continue;
    const long long answer = g_answers[static_cast<size_t>(r)];
    if (answer < 0) {
      silent.push_back(r);
      continue;
    }
    answered += fmt::format("{}rank {} is in its {} wait", answered.empty() ? "" : ", ", r, ordinal(answer));
  }
  std::string message = fmt::format(
      "cppgrad watchdog: rank {} of {}: a collective (its {} wait) has waited {:.1f} s, past the collective timeout "
      "of {:g} s (CPPGRAD_COLLECTIVE_TIMEOUT): ", g_rank, g_world, ordinal(wait_number), waited, g_timeout);
  if (!silent.empty())
    message += fmt::format("{} did not answer within {:.1f} s (stopped, hung, or busy outside collectives for that "
                           "long)", rank_list(silent), grace_seconds());
  else
    message += "every rank answered (collectives called in another order on some rank, or a transfer slower than "
               "the timeout)";
  if (!answered.empty()) message += fmt::format("; {}", answered);
  message += "; ending the job\n";
  std::fflush(stdout);
  std::fputs(message.c_str(), stderr);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

}  // namespace

void set_collective_timeout(double seconds) {
  CPPGRAD_CHECK(std::isfinite(seconds) && seconds > 0,
                "set_collective_timeout: {} is not a positive number of seconds", seconds);
  g_timeout = seconds;
}

double collective_timeout() { return g_timeout; }

namespace watchdog {

void configure() {
  const char* text = std::getenv("CPPGRAD_COLLECTIVE_TIMEOUT");
  if (text == nullptr || *text == '\0') return;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  CPPGRAD_CHECK(*end == '\0' && std::isfinite(seconds) && seconds > 0,
                "CPPGRAD_COLLECTIVE_TIMEOUT is '{}': not a positive number of seconds", excerpt(text));
  g_timeout = seconds;
}

void start() {
  MPI_Comm_dup(MPI_COMM_WORLD, &g_comm);
  MPI_Comm_rank(g_comm, &g_rank);
  MPI_Comm_size(g_comm, &g_world);
  g_waits = g_in_wait = g_round = 0;
}

void stop() {
  if (g_comm == MPI_COMM_NULL) return;
  handle_messages();
  // MPI completes the sends still in flight on its own; their messages stay where they are (the
  // list lives past MPI_Finalize), and the next start() finds the freed requests done.
  for (Send& s : g_sends) MPI_Request_free(&s.request);
  g_answers.clear();
  // The communicator is left to MPI_Finalize: freeing it may wait for the other ranks.
  g_comm = MPI_COMM_NULL;
}

Wait::Wait() : number_(++g_waits), started_(now_seconds()) {
  deadline_ = started_ + g_timeout;
  next_look_ = started_ + 0.001;
  g_in_wait = number_;
}

Wait::~Wait() { g_in_wait = 0; }

void Wait::poll() {
  if (g_comm == MPI_COMM_NULL) return;
  const double now = now_seconds();
  if (now < next_look_) return;
  next_look_ = now + 0.001;  // questions are answered within a millisecond or so
  handle_messages();
  if (!asking_) {
    if (now < deadline_) return;
    asking_ = true;
    grace_end_ = now + grace_seconds();
    ++g_round;
    g_answers.assign(static_cast<size_t>(g_world), -1);
    for (int r = 0; r < g_world; ++r)
      if (r != g_rank) send(r, kQuestion, g_round, 0);
    return;
  }
  const bool all_answered = std::count(g_answers.begin(), g_answers.end(), -1) <= 1;  // this rank's own is -1
  if (all_answered || now >= grace_end_) end_the_job(number_, now - started_);
}

}  // namespace watchdog
}  // namespace cppgrad::distributed
