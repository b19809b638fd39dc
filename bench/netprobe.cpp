// netprobe: what a link really does, measured over TCP on this host's loopback (scripts/netns
// runs it inside the emulated network before a job, to show that the shaping holds).
//
//   netprobe [MEGABYTES]      # default 64
//
// Round trip: a 1-byte message and its 1-byte answer over one connection (TCP_NODELAY), 200
// times; the median and the 10th/90th percentiles. Throughput: MEGABYTES sent one way over a
// fresh connection, timed from the first byte sent to the receiver's acknowledgement of the
// last; the median of 3. A server thread and a client in one process, on 127.0.0.1.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("netprobe: ") + what + " failed");
}

void send_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t sent = send(fd, data, n, 0);
    check(sent > 0, "send");
    data += sent;
    n -= static_cast<size_t>(sent);
  }
}

void receive_all(int fd, char* data, size_t n) {
  while (n > 0) {
    const ssize_t got = recv(fd, data, n, 0);
    check(got > 0, "recv");
    data += got;
    n -= static_cast<size_t>(got);
  }
}

int listening_socket(uint16_t& port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  check(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0, "bind");
  check(listen(fd, 4) == 0, "listen");
  socklen_t length = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  port = ntohs(address.sin_port);
  return fd;
}

int connect_to(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  check(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0, "connect");
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  const size_t megabytes = argc > 1 ? static_cast<size_t>(std::atol(argv[1])) : 64;
  uint16_t port = 0;
  const int server = listening_socket(port);
  constexpr int kPings = 200, kTransfers = 3;
  const size_t bytes = megabytes << 20;

  std::thread answer([&] {
    const int one = 1;
    const int pinged = accept(server, nullptr, nullptr);
    setsockopt(pinged, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char byte = 0;
    for (int i = 0; i < kPings; ++i) {
      receive_all(pinged, &byte, 1);
      send_all(pinged, &byte, 1);
    }
    close(pinged);
    std::vector<char> sink(1 << 20);
    for (int t = 0; t < kTransfers; ++t) {
      const int fd = accept(server, nullptr, nullptr);
      for (size_t left = bytes; left > 0;) {
        const size_t chunk = std::min(left, sink.size());
        receive_all(fd, sink.data(), chunk);
        left -= chunk;
      }
      send_all(fd, &byte, 1);  // all of it is in
      close(fd);
    }
  });

  std::vector<double> round_trips;
  const int fd = connect_to(port);
  char byte = 1;
  for (int i = 0; i < kPings; ++i) {
    const auto start = Clock::now();
    send_all(fd, &byte, 1);
    receive_all(fd, &byte, 1);
    round_trips.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  close(fd);

  std::vector<double> rates;
  std::vector<char> source(1 << 20, 'x');
  for (int t = 0; t < kTransfers; ++t) {
    const int out = connect_to(port);
    const auto start = Clock::now();
    for (size_t left = bytes; left > 0;) {
      const size_t chunk = std::min(left, source.size());
      send_all(out, source.data(), chunk);
      left -= chunk;
    }
    receive_all(out, &byte, 1);
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    rates.push_back(static_cast<double>(bytes) * 8 / s / 1e9);
    close(out);
  }
  answer.join();
  close(server);
  std::printf("netprobe: round trip (1 byte each way, %d times): median %.1f us (10%%: %.1f, 90%%: %.1f)\n", kPings,
              percentile(round_trips, 0.5) * 1e6, percentile(round_trips, 0.1) * 1e6,
              percentile(round_trips, 0.9) * 1e6);
  std::printf("netprobe: throughput (%zu MB one way, median of %d): %.2f Gbit/s\n", megabytes, kTransfers,
              percentile(rates, 0.5));
  return 0;
}
