// socket-exchange-probe: the measurement behind the TCP transport's shape
// (dma/transport/socket/socket_transport.h): one connection per pair of
// processes, written by the devices, under the congestion control it sets.
// Two ranks exchange `bytes` both ways at once, as a ppermute or an
// all-gather of two does, over TCP sockets of their own, in four
// structures:
//   1 socket,  1 thread: both directions share one connection, and one
//                        thread writes (non-blocking, the whole message)
//                        and reads by turns (the transport's shape);
//   2 sockets, 1 thread: one connection each way, one thread;
//   1 socket,  writer:   one connection, a second thread (woken through an
//                        eventfd) writes while the first reads;
//   2 sockets, writer:   one connection each way and a writer thread.
// and MPI_Sendrecv of the same bytes on the same ranks (MPI's connections
// keep the kernel's congestion control). Prints the median and the fastest
// time of one exchange for each; every exchange's bytes are checked (a
// wrong one aborts).
//   mpirun -np 2 --mca btl self,tcp build/bench/socket-exchange-probe \
//     [--congestion cubic]
// Across machines, --address names rank 1's IPv4 address.
#include <arpa/inet.h>
#include <mpi.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "tools/flags.h"

ABSL_FLAG(std::string, address, "127.0.0.1", "rank 1's IPv4 address");
ABSL_FLAG(int, iters, 40, "exchanges per size and structure");
ABSL_FLAG(int, rounds, 2, "times every structure is run, by turns");
ABSL_FLAG(std::string, congestion, "",
          "TCP congestion control of the probe's sockets (cubic, reno, bbr, "
          "...); empty: the kernel's default");

namespace {

double Micros() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Sets congestion control `congestion` (empty: the kernel's default) on a
// socket before it listens or connects: a connection started under one and
// switched to another may keep the first one's pacing.
void SetCongestion(int fd, const std::string& congestion) {
  if (!congestion.empty() &&
      setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, congestion.data(),
                 congestion.size()) != 0) {
    std::fprintf(stderr, "--congestion %s: ", congestion.c_str());
    std::perror("the kernel refused it");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}

// A connected TCP socket from rank 0 to rank 1 (rank 1 listens), with
// congestion control `congestion` (empty: the kernel's default) from its
// first packet.
int Connect(int rank, const std::string& address,
            const std::string& congestion) {
  int port = 0;
  int fd = -1;
  if (rank == 1) {
    const int listener = socket(AF_INET, SOCK_STREAM, 0);
    SetCongestion(listener, congestion);  // Accepted sockets inherit it.
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    socklen_t len = sizeof(sa);
    bind(listener, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
    listen(listener, 1);
    getsockname(listener, reinterpret_cast<sockaddr*>(&sa), &len);
    port = ntohs(sa.sin_port);
    MPI_Send(&port, 1, MPI_INT, 0, 0, MPI_COMM_WORLD);
    fd = accept(listener, nullptr, nullptr);
    close(listener);
  } else {
    MPI_Recv(&port, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    SetCongestion(fd, congestion);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, address.c_str(), &sa.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      std::perror("connect");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// The congestion control `fd` runs.
std::string CongestionOf(int fd) {
  char name[32] = {};
  socklen_t len = sizeof(name) - 1;
  getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len);
  return name;
}

// Writes `n` bytes of `p` to `fd`, sleeping in poll(2) while it is full.
void WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
    } else {
      pollfd pf{fd, POLLOUT, 0};
      poll(&pf, 1, 10);
    }
  }
}

// Reads `n` bytes into `p` from `fd`, spinning (yielding) while empty.
void ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
    } else if (r == 0) {
      std::fprintf(stderr, "connection closed\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    } else {
      sched_yield();
    }
  }
}

// One exchange on one thread: writes and reads by turns until both are done.
void ExchangeOneThread(int out, int in, const char* src, char* dst, size_t n) {
  size_t sent = 0, got = 0;
  while (sent < n || got < n) {
    bool moved = false;
    if (sent < n) {
      const ssize_t w =
          send(out, src + sent, n - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w > 0) sent += static_cast<size_t>(w), moved = true;
    }
    if (got < n) {
      const ssize_t r = recv(in, dst + got, n - got, MSG_DONTWAIT);
      if (r > 0) got += static_cast<size_t>(r), moved = true;
    }
    if (!moved) sched_yield();
  }
}

// A thread that writes one message to a socket whenever it is asked to,
// woken through an eventfd (as the transport's progress thread is).
class Writer {
 public:
  Writer() : wake_(eventfd(0, 0)), done_(eventfd(0, 0)) {
    thread_ = std::thread([this] {
      for (;;) {
        uint64_t n;
        if (read(wake_, &n, sizeof(n)) != sizeof(n) || fd_ < 0) return;
        WriteAll(fd_, data_, bytes_);
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t w = write(done_, &one, sizeof(one));
      }
    });
  }
  ~Writer() {
    fd_ = -1;
    Ask();
    thread_.join();
    close(wake_);
    close(done_);
  }
  void Start(int fd, const char* data, size_t bytes) {
    fd_ = fd;
    data_ = data;
    bytes_ = bytes;
    Ask();
  }
  void Wait() {
    uint64_t n;
    [[maybe_unused]] ssize_t r = read(done_, &n, sizeof(n));
  }

 private:
  void Ask() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t w = write(wake_, &one, sizeof(one));
  }
  const int wake_, done_;
  int fd_ = -1;
  const char* data_ = nullptr;
  size_t bytes_ = 0;
  std::thread thread_;
};

struct Structure {
  const char* name;
  bool two_sockets;
  bool writer_thread;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

const meshdma::cli::Program kProgram = {
    .name = "socket-exchange-probe",
    .synopsis = "[flags]   (run as: mpirun -np 2 socket-exchange-probe)",
    .summary =
        "Two ranks exchange 64 KiB-8 MiB both ways over TCP sockets of their\n"
        "own, with one or two connections and with or without a writer\n"
        "thread, and with MPI_Sendrecv; prints the time of one exchange.",
    .aliases = {{'n', "iters"}},
    .footer = "",
    .ranges = {{"iters", 1, 1'000'000}, {"rounds", 1, 1'000}}};

}  // namespace

int main(int argc, char** argv) {
  meshdma::cli::ParseOrExit(kProgram, argc, argv);
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) std::fprintf(stderr, "needs exactly 2 ranks\n");
    MPI_Finalize();
    return 1;
  }
  const std::string address = absl::GetFlag(FLAGS_address);
  // Rank 0's connection first, then rank 1's: with two sockets each rank
  // writes to its own and reads from the other.
  const std::string congestion = absl::GetFlag(FLAGS_congestion);
  const int first = Connect(rank, address, congestion);
  const int second = Connect(rank, address, congestion);
  const Structure structures[] = {{"1 socket,  1 thread", false, false},
                                  {"2 sockets, 1 thread", true, false},
                                  {"1 socket,  writer  ", false, true},
                                  {"2 sockets, writer  ", true, true}};
  Writer writer;
  const int iters = absl::GetFlag(FLAGS_iters);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  if (rank == 0) {
    std::printf(
        "# %d exchanges per row, %d rounds; median (fastest) us; the "
        "sockets' congestion control: %s\n",
        iters, rounds, CongestionOf(first).c_str());
    std::printf("# %10s  %-24s %s\n", "bytes", "structure", "time");
  }
  for (const size_t bytes :
       {size_t{64} << 10, size_t{256} << 10, size_t{1} << 20, size_t{2} << 20,
        size_t{8} << 20}) {
    std::vector<char> src(bytes, static_cast<char>(rank + 1)), dst(bytes);
    std::vector<std::vector<double>> times(5);
    for (int round = 0; round < rounds; ++round) {
      for (int s = 0; s < 5; ++s) {
        for (int i = 0; i < iters; ++i) {
          MPI_Barrier(MPI_COMM_WORLD);
          const double t0 = Micros();
          if (s == 4) {
            MPI_Sendrecv(src.data(), static_cast<int>(bytes), MPI_BYTE,
                         1 - rank, 0, dst.data(), static_cast<int>(bytes),
                         MPI_BYTE, 1 - rank, 0, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
          } else {
            const Structure& st = structures[s];
            const int out = st.two_sockets && rank == 1 ? second : first;
            const int in = st.two_sockets && rank == 0 ? second : first;
            if (st.writer_thread) {
              writer.Start(out, src.data(), bytes);
              ReadAll(in, dst.data(), bytes);
              writer.Wait();
            } else {
              ExchangeOneThread(out, in, src.data(), dst.data(), bytes);
            }
          }
          times[s].push_back(Micros() - t0);
          // Every byte came from the peer, whose bytes are its rank + 1.
          const char expect = static_cast<char>(2 - rank);
          if (std::count(dst.begin(), dst.end(), expect) !=
              static_cast<std::ptrdiff_t>(bytes)) {
            std::fprintf(stderr, "rank %d: wrong bytes after %zu-byte %s\n",
                         rank, bytes,
                         s == 4 ? "MPI_Sendrecv" : structures[s].name);
            MPI_Abort(MPI_COMM_WORLD, 1);
          }
          std::fill(dst.begin(), dst.end(), 0);
        }
      }
    }
    if (rank == 0) {
      for (int s = 0; s < 5; ++s) {
        std::printf("  %10zu  %-24s %.1f (%.1f)\n", bytes,
                    s == 4 ? "MPI_Sendrecv" : structures[s].name,
                    Median(times[s]),
                    *std::min_element(times[s].begin(), times[s].end()));
      }
    }
  }
  close(first);
  close(second);
  MPI_Finalize();
  return 0;
}
