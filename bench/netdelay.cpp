// netdelay: holds every packet of a netfilter queue for a fixed time before letting it through,
// the delay of an emulated network link (scripts/netns sets it up; this kernel has no netem).
//
//   netdelay QUEUE DELAY_US        # e.g. after: iptables -A OUTPUT -o lo -j NFQUEUE --queue-num 0
//
// The kernel keeps the packets; this program receives only their ids and metadata (no payload
// is copied), notes when each arrived, and gives the verdict "accept" DELAY_US later, in the
// order they came (a fixed delay keeps them in order). It sleeps in ppoll until the next packet
// is due, with the timer slack set to 1 ns, so it costs no spinning core. It ends on SIGTERM or
// SIGINT, letting through what it still holds. It prints one line when ready.
#include <arpa/inet.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <deque>
#include <string>

namespace {

using Clock = std::chrono::steady_clock;

struct Held {
  uint32_t id;
  Clock::time_point release;
};

std::deque<Held> held;
std::chrono::microseconds delay{0};
volatile sig_atomic_t stopping = 0;
uint64_t packets = 0;

int on_packet(nfq_q_handle*, nfgenmsg*, nfq_data* data, void*) {
  const nfqnl_msg_packet_hdr* header = nfq_get_msg_packet_hdr(data);
  if (header) held.push_back({ntohl(header->packet_id), Clock::now() + delay});
  ++packets;
  return 0;
}

void release_due(nfq_q_handle* queue, bool all) {
  const auto now = Clock::now();
  while (!held.empty() && (all || held.front().release <= now)) {
    nfq_set_verdict(queue, held.front().id, NF_ACCEPT, 0, nullptr);
    held.pop_front();
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: netdelay QUEUE DELAY_US\n");
    return 2;
  }
  const int queue_number = std::atoi(argv[1]);
  delay = std::chrono::microseconds(std::atol(argv[2]));
  if (queue_number < 0 || queue_number > 65535 || delay.count() < 0) {
    std::fprintf(stderr, "netdelay: queue %s or delay %s us out of range\n", argv[1], argv[2]);
    return 2;
  }
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // wake when asked, not up to 50 us later
  struct sigaction action {};
  action.sa_handler = [](int) { stopping = 1; };
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);

  nfq_handle* handle = nfq_open();
  if (!handle) {
    std::fprintf(stderr, "netdelay: nfq_open: %s (needs CAP_NET_ADMIN)\n", std::strerror(errno));
    return 1;
  }
  nfq_q_handle* queue = nfq_create_queue(handle, static_cast<uint16_t>(queue_number), &on_packet, nullptr);
  if (!queue || nfq_set_mode(queue, NFQNL_COPY_META, 0) < 0) {
    std::fprintf(stderr, "netdelay: cannot bind queue %d: %s\n", queue_number, std::strerror(errno));
    return 1;
  }
  nfq_set_queue_maxlen(queue, 65536);  // what the kernel may hold for us: far above a link's worth
  const int fd = nfq_fd(handle);
  nfnl_rcvbufsiz(nfq_nfnlh(handle), 8 << 20);
  std::printf("netdelay: queue %d, %ld us\n", queue_number, static_cast<long>(delay.count()));
  std::fflush(stdout);

  char buffer[65536];
  while (!stopping) {
    release_due(queue, false);
    timespec timeout{1, 0};
    if (!held.empty()) {
      const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(held.front().release - Clock::now());
      const long ns = std::max<long>(0, static_cast<long>(wait.count()));
      timeout = {ns / 1000000000L, ns % 1000000000L};
    }
    pollfd ready{fd, POLLIN, 0};
    const int n = ppoll(&ready, 1, &timeout, nullptr);
    if (n < 0 && errno != EINTR) break;
    if (n > 0) {
      for (;;) {  // everything queued now, without blocking
        const ssize_t got = recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
        if (got <= 0) {
          if (got < 0 && errno == ENOBUFS)
            std::fprintf(stderr, "netdelay: the kernel dropped queue messages (ENOBUFS)\n");
          break;
        }
        nfq_handle_packet(handle, buffer, static_cast<int>(got));
      }
    }
  }
  release_due(queue, true);
  std::printf("netdelay: %llu packets held %ld us each\n", static_cast<unsigned long long>(packets),
              static_cast<long>(delay.count()));
  nfq_destroy_queue(queue);
  nfq_close(handle);
  return 0;
}
