// mpi-path-probe: the measurement behind the inter-host transport's design
// (dma/transport/mpi_transport.h). Two ranks ping-pong a "DMA" of `size` bytes
// followed by its semaphore increment, done two ways:
//   two-sided: MPI_Isend header+payload, receiver MPI_Irecv's into place and
//              bumps its own counter (what meshdma does);
//   one-sided: MPI_Put into the target's window, MPI_Win_flush, then
//              MPI_Accumulate(+1) on the target's counter and flush; the
//              target polls its counter with MPI_Fetch_and_op(MPI_NO_OP).
// Prints round-trip/2 latency and bandwidth for each. Then an 8-byte
// exchange (both ranks send and receive at once, as a small collective
// does) three ways, each the time of one exchange: MPI_Sendrecv; MPI_Isend
// with a ring of persistent receives polled by MPI_Test (the pattern of
// meshdma's transport); MPI_Irecv + MPI_Isend + MPI_Testall.
// Last, a streaming sender (what a device that starts puts back to back
// does): rank 0 sends 8 messages of each size in 16K-64K, busy for
// --stream_work_us before each and testing only the new request after it,
// then waits for all; rank 1 polls a ring of persistent receives. Prints,
// per size, when each message was sent and when it arrived (µs from the
// first send's start): a message that MPI moves only while its sender
// progresses arrives once the sender waits.
// Then the message sizes at which MPI changes protocol: the one-way time
// (round trip / 2) of an MPI_Send / MPI_Recv ping-pong from 64 B to 1 KiB
// in steps of 32 B.
// Last, who moves a rendezvous: a 128 KiB message laid out contiguous or as
// 16 blocks of 8 KiB on either side (as a KV-cache page spread over heads).
// Rank 0 starts its send, then computes for 300 µs without calling MPI, then
// waits; rank 1 prints when its receive completed. A receive done well
// before 300 µs moved without its sender.
// Where the two ranks share a host, last of all: one cache line's round trip
// between their cores through memory both map (MPI_Win_allocate_shared), the
// floor of any call that waits for the other core's store: a small
// collective's time over it says how many such trips the call costs.
//   mpirun -np 2 --mca btl self,tcp build/bench/mpi-path-probe [-e 16M]
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "tools/flags.h"

ABSL_FLAG(meshdma::cli::ByteSize, maxbytes, meshdma::cli::ByteSize{4 << 20},
          "largest message; sizes are 8, 4K, 64K, 1M up to it, and it");
ABSL_FLAG(int, iters, 2000, "round trips per size up to 64K");
ABSL_FLAG(int, large_iters, 50, "round trips per size above 64K");
ABSL_FLAG(int, warmup, 10, "untimed round trips before each size");
ABSL_FLAG(int, stream_work_us, 3,
          "the streaming sender's busy time before each message");

namespace {

double TwoSided(int rank, int64_t bytes, int iters, std::vector<char>& buf) {
  const int peer = 1 - rank;
  int64_t header[2] = {bytes, 0};
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    for (int turn = 0; turn < 2; ++turn) {
      if (turn == rank) {
        MPI_Request r[2];
        MPI_Isend(header, 2, MPI_INT64_T, peer, 1, MPI_COMM_WORLD, &r[0]);
        MPI_Isend(buf.data(), static_cast<int>(bytes), MPI_BYTE, peer, 2,
                  MPI_COMM_WORLD, &r[1]);
        MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
      } else {
        int64_t h[2];
        MPI_Recv(h, 2, MPI_INT64_T, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Recv(buf.data(), static_cast<int>(h[0]), MPI_BYTE, peer, 2,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        ++header[1];  // The semaphore bump, after the data.
      }
    }
  }
  return (MPI_Wtime() - t0) / iters / 2;
}

double OneSided(int rank, int64_t bytes, int iters, MPI_Win data_win,
                MPI_Win flag_win, std::vector<char>& buf) {
  const int peer = 1 - rank;
  int64_t one = 1, expect = 0, got = 0, dummy = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    for (int turn = 0; turn < 2; ++turn) {
      if (turn == rank) {
        MPI_Put(buf.data(), static_cast<int>(bytes), MPI_BYTE, peer, 0,
                static_cast<int>(bytes), MPI_BYTE, data_win);
        MPI_Win_flush(peer, data_win);  // Data complete at the target...
        MPI_Accumulate(&one, 1, MPI_INT64_T, peer, 0, 1, MPI_INT64_T, MPI_SUM,
                       flag_win);
        MPI_Win_flush(peer, flag_win);  // ...before the flag moves.
      } else {
        ++expect;
        do {
          MPI_Fetch_and_op(&dummy, &got, MPI_INT64_T, rank, 0, MPI_NO_OP,
                           flag_win);
          MPI_Win_flush(rank, flag_win);
        } while (got < expect);
      }
    }
  }
  return (MPI_Wtime() - t0) / iters / 2;
}

// The exchange patterns: time of one 8-byte exchange, in seconds.
enum class Exchange { kSendrecv, kPersistentTest, kIrecvTestall };
double TimeExchange(Exchange how, int rank, int iters) {
  const int peer = 1 - rank;
  constexpr int kBytes = 8, kTag = 3, kRing = 8, kSlot = 64;
  char send[kBytes] = {}, recv[kSlot];
  std::vector<char> slots(kRing * kSlot);
  MPI_Request ring[kRing];
  if (how == Exchange::kPersistentTest) {
    for (int k = 0; k < kRing; ++k) {
      MPI_Recv_init(&slots[k * kSlot], kSlot, MPI_BYTE, peer, kTag,
                    MPI_COMM_WORLD, &ring[k]);
      MPI_Start(&ring[k]);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0, head = 0; i < iters; ++i) {
    if (how == Exchange::kSendrecv) {
      MPI_Sendrecv(send, kBytes, MPI_BYTE, peer, kTag, recv, kSlot, MPI_BYTE,
                   peer, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (how == Exchange::kPersistentTest) {
      MPI_Request s;
      MPI_Isend(send, kBytes, MPI_BYTE, peer, kTag, MPI_COMM_WORLD, &s);
      int got = 0;
      while (!got) MPI_Test(&ring[head], &got, MPI_STATUS_IGNORE);
      std::memcpy(recv, &slots[head * kSlot], kBytes);
      MPI_Start(&ring[head]);
      head = (head + 1) % kRing;
      MPI_Wait(&s, MPI_STATUS_IGNORE);
    } else {
      MPI_Request r[2];
      MPI_Irecv(recv, kSlot, MPI_BYTE, peer, kTag, MPI_COMM_WORLD, &r[0]);
      MPI_Isend(send, kBytes, MPI_BYTE, peer, kTag, MPI_COMM_WORLD, &r[1]);
      int done = 0;
      while (!done) MPI_Testall(2, r, &done, MPI_STATUSES_IGNORE);
    }
  }
  const double t = (MPI_Wtime() - t0) / iters;
  if (how == Exchange::kPersistentTest) {
    MPI_Barrier(MPI_COMM_WORLD);  // Both ranks done sending.
    for (int k = 0; k < kRing; ++k) {
      MPI_Cancel(&ring[k]);
      MPI_Wait(&ring[k], MPI_STATUS_IGNORE);
      MPI_Request_free(&ring[k]);
    }
  }
  return t;
}

const meshdma::cli::Program kProgram = {
    .name = "mpi-path-probe",
    .synopsis = "[flags]   (run as: mpirun -np 2 mpi-path-probe)",
    .summary =
        "Two ranks ping-pong a message and its semaphore increment two-sided\n"
        "(MPI_Isend/MPI_Irecv) and one-sided (MPI_Put, MPI_Accumulate), and\n"
        "print half the round trip and the bandwidth of each per size; then\n"
        "when the messages of a streaming sender arrive.",
    .aliases = {{'e', "maxbytes"}, {'n', "iters"}, {'w', "warmup"}},
    .footer = "",
    .ranges = {{"maxbytes", 1, 1 << 30},
               {"iters", 1, 10'000'000},
               {"large_iters", 1, 10'000'000},
               {"warmup", 0, 10'000'000},
               {"stream_work_us", 0, 1'000'000}}};

// The streaming sender (see the top): per message, rank 0's send time and
// rank 1's arrival time, in µs from the first send's start, on rank 0.
void Streaming(int rank, int64_t bytes, int work_us, std::vector<double>& sent,
               std::vector<double>& arrived) {
  constexpr int kMessages = 8;
  const int peer = 1 - rank;
  std::vector<std::vector<char>> bufs(kMessages, std::vector<char>(bytes, 1));
  std::vector<MPI_Request> requests(kMessages);
  std::vector<double> at(kMessages);
  if (rank == 1) {
    for (int i = 0; i < kMessages; ++i) {
      MPI_Recv_init(bufs[i].data(), static_cast<int>(bytes), MPI_BYTE, peer, 3,
                    MPI_COMM_WORLD, &requests[i]);
    }
    MPI_Startall(kMessages, requests.data());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < kMessages; ++i) {
    if (rank == 0) {
      while ((MPI_Wtime() - t0) * 1e6 < (i + 1) * work_us) {
      }
      MPI_Isend(bufs[i].data(), static_cast<int>(bytes), MPI_BYTE, peer, 3,
                MPI_COMM_WORLD, &requests[i]);
      int done = 0;
      MPI_Test(&requests[i], &done, MPI_STATUS_IGNORE);
    } else {
      int done = 0;
      while (!done) MPI_Test(&requests[i], &done, MPI_STATUS_IGNORE);
    }
    at[i] = (MPI_Wtime() - t0) * 1e6;
  }
  if (rank == 0) {
    MPI_Waitall(kMessages, requests.data(), MPI_STATUSES_IGNORE);
  } else {
    for (MPI_Request& r : requests) MPI_Request_free(&r);
  }
  // Both clocks start at a barrier's exit, which lies within a few µs.
  sent = at;
  arrived = at;
  if (rank == 0) {
    MPI_Recv(arrived.data(), kMessages, MPI_DOUBLE, peer, 4, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
  } else {
    MPI_Send(at.data(), kMessages, MPI_DOUBLE, peer, 4, MPI_COMM_WORLD);
  }
}

// One-way µs of a ping-pong of `bytes`, `iters` round trips.
double PingPong(int rank, int64_t bytes, int iters, std::vector<char>& buf) {
  const int peer = 1 - rank;
  const int n = static_cast<int>(bytes);
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    if (rank == 0) {
      MPI_Send(buf.data(), n, MPI_BYTE, peer, 5, MPI_COMM_WORLD);
      MPI_Recv(buf.data(), n, MPI_BYTE, peer, 5, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buf.data(), n, MPI_BYTE, peer, 5, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      MPI_Send(buf.data(), n, MPI_BYTE, peer, 5, MPI_COMM_WORLD);
    }
  }
  return (MPI_Wtime() - t0) / iters / 2 * 1e6;
}

// Who moves a rendezvous (see the top): rank 1's µs from the barrier to its
// receive's completion, with the sender idle from MPI for `idle_us`.
double RendezvousArrival(int rank, bool strided_send, bool strided_recv,
                         double idle_us) {
  constexpr int kBlocks = 16, kBlockBytes = 8 << 10;
  // Strided: every other block of a buffer twice the size.
  std::vector<char> buf(2 * kBlocks * kBlockBytes, 1);
  MPI_Datatype strided;
  MPI_Type_vector(kBlocks, kBlockBytes, 2 * kBlockBytes, MPI_BYTE, &strided);
  MPI_Type_commit(&strided);
  const bool is_strided = rank == 0 ? strided_send : strided_recv;
  const int count = is_strided ? 1 : kBlocks * kBlockBytes;
  const MPI_Datatype type = is_strided ? strided : MPI_BYTE;
  MPI_Request request;
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  double arrived = 0;
  if (rank == 0) {
    MPI_Isend(buf.data(), count, type, 1, 6, MPI_COMM_WORLD, &request);
    while ((MPI_Wtime() - t0) * 1e6 < idle_us) {
    }
    MPI_Wait(&request, MPI_STATUS_IGNORE);
    MPI_Recv(&arrived, 1, MPI_DOUBLE, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  } else {
    MPI_Irecv(buf.data(), count, type, 0, 6, MPI_COMM_WORLD, &request);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
    arrived = (MPI_Wtime() - t0) * 1e6;
    MPI_Send(&arrived, 1, MPI_DOUBLE, 0, 7, MPI_COMM_WORLD);
  }
  MPI_Type_free(&strided);
  return arrived;
}

}  // namespace

// ns of one round trip of a cache line between the two ranks' cores: rank 0
// stores i into one line and waits to read i in another, which rank 1
// stores once it has read i; about `iters` timed trips, or half a second
// (ranks that share a core take a scheduler turn a trip), after a warm-up;
// then rank 0 stores kStop. -1 where the ranks do not share a host, -2
// where the MPI library gives them no shared window.
double CacheLineRoundTripNs(int rank, int iters) {
  MPI_Comm host;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL,
                      &host);
  int host_size = 0;
  MPI_Comm_size(host, &host_size);
  double ns = -1;
  if (host_size == 2) {
    constexpr int kLineWords = 16;  // 128 bytes: ping and pong lines apart.
    constexpr uint64_t kStop = ~uint64_t{0};
    constexpr uint64_t kWarmup = 1000;
    void* mine = nullptr;
    MPI_Win win = MPI_WIN_NULL;
    MPI_Comm_set_errhandler(host, MPI_ERRORS_RETURN);
    int ok = MPI_Win_allocate_shared(
                 rank == 0 ? 2 * kLineWords * sizeof(uint64_t) : 0, 1,
                 MPI_INFO_NULL, host, &mine, &win) == MPI_SUCCESS;
    MPI_Aint bytes = 0;
    int unit = 0;
    void* base = nullptr;
    if (ok) {
      ok = MPI_Win_shared_query(win, 0, &bytes, &unit, &base) == MPI_SUCCESS &&
           base != nullptr;
    }
    // Both ranks measure, or neither.
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, host);
    if (!ok) {
      if (win != MPI_WIN_NULL) MPI_Win_free(&win);
      MPI_Comm_free(&host);
      return -2;
    }
    uint64_t* ping = static_cast<uint64_t*>(base);
    uint64_t* pong = ping + kLineWords;
    if (rank == 0) {
      __atomic_store_n(ping, 0, __ATOMIC_RELAXED);
      __atomic_store_n(pong, 0, __ATOMIC_RELAXED);
    }
    MPI_Barrier(host);
    if (rank == 0) {
      // The clock is read every 64 trips: warm-up ends after kWarmup trips
      // or 50 ms, the timed trips after `iters` or half a second.
      double t0 = MPI_Wtime();
      uint64_t warm = 0;  // Trips of the warm-up, once it has ended.
      uint64_t i = 1;
      for (;; ++i) {
        if ((i & 63) == 0) {
          const double now = MPI_Wtime();
          if (warm == 0 && (i > kWarmup || now - t0 > 0.05)) {
            warm = i - 1;
            t0 = now;
          } else if (warm > 0 &&
                     (i - 1 - warm >= static_cast<uint64_t>(iters) ||
                      now - t0 > 0.5)) {
            break;
          }
        }
        __atomic_store_n(ping, i, __ATOMIC_RELEASE);
        while (__atomic_load_n(pong, __ATOMIC_ACQUIRE) != i) {
        }
      }
      ns = (MPI_Wtime() - t0) / static_cast<double>(i - 1 - warm) * 1e9;
      __atomic_store_n(ping, kStop, __ATOMIC_RELEASE);
    } else {
      for (uint64_t i = 1;; ++i) {
        uint64_t seen;
        while ((seen = __atomic_load_n(ping, __ATOMIC_ACQUIRE)) != i &&
               seen != kStop) {
        }
        if (seen == kStop) break;
        __atomic_store_n(pong, i, __ATOMIC_RELEASE);
      }
    }
    MPI_Barrier(host);
    MPI_Win_free(&win);
  }
  MPI_Comm_free(&host);
  return ns;
}

int main(int argc, char** argv) {
  meshdma::cli::ParseOrExit(kProgram, argc, argv);
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0)
      std::fprintf(stderr, "mpi-path-probe needs exactly 2 ranks\n");
    MPI_Finalize();
    return 2;
  }
  const int64_t max_bytes = absl::GetFlag(FLAGS_maxbytes).bytes;
  std::vector<char> buf(max_bytes, 1);
  // Window creation may be refused (e.g. Open MPI over TCP only with
  // MPI_THREAD_MULTIPLE): report it and measure two-sided alone.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  void* win_mem;
  MPI_Win data_win = MPI_WIN_NULL, flag_win = MPI_WIN_NULL;
  int64_t* flag = nullptr;
  int rc = MPI_Win_allocate(max_bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD,
                            &win_mem, &data_win);
  if (rc == MPI_SUCCESS) {
    rc = MPI_Win_allocate(sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL,
                          MPI_COMM_WORLD, &flag, &flag_win);
  }
  const bool rma = rc == MPI_SUCCESS;
  if (!rma && rank == 0) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    std::printf("# RMA windows unavailable here (%.*s): two-sided only\n", len,
                text);
  }
  if (rma) *flag = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  if (rma) {
    MPI_Win_lock_all(0, data_win);
    MPI_Win_lock_all(0, flag_win);
  }
  if (rank == 0) {
    std::printf("# %10s %14s %14s %14s %14s\n", "size(B)", "2sided_us",
                "2sided_GB/s", "rma_us", "rma_GB/s");
  }
  std::vector<int64_t> sizes;
  for (int64_t bytes :
       {int64_t{8}, int64_t{4096}, int64_t{65536}, int64_t{1} << 20}) {
    if (bytes < max_bytes) sizes.push_back(bytes);
  }
  sizes.push_back(max_bytes);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  for (int64_t bytes : sizes) {
    const int iters = bytes <= 65536 ? absl::GetFlag(FLAGS_iters)
                                     : absl::GetFlag(FLAGS_large_iters);
    TwoSided(rank, bytes, warmup, buf);
    const double t2 = TwoSided(rank, bytes, iters, buf);
    double t1 = 0;
    if (rma) {
      OneSided(rank, bytes, warmup, data_win, flag_win, buf);
      t1 = OneSided(rank, bytes, iters, data_win, flag_win, buf);
    }
    if (rank == 0) {
      std::printf("  %10lld %14.2f %14.3f %14.2f %14.3f\n",
                  static_cast<long long>(bytes), t2 * 1e6, bytes / t2 / 1e9,
                  t1 * 1e6, rma ? bytes / t1 / 1e9 : 0.0);
    }
  }
  // The exchange patterns, twice in turn so that a slow spell of a shared
  // machine shows in both rounds.
  const int exchange_iters = absl::GetFlag(FLAGS_iters);
  for (int round = 0; round < 2; ++round) {
    double us[3];
    for (Exchange how : {Exchange::kSendrecv, Exchange::kPersistentTest,
                         Exchange::kIrecvTestall}) {
      TimeExchange(how, rank, warmup);
      us[static_cast<int>(how)] = TimeExchange(how, rank, exchange_iters) * 1e6;
    }
    if (rank == 0) {
      std::printf(
          "# 8 B exchange, us: MPI_Sendrecv %.2f, persistent receives + "
          "MPI_Test %.2f, MPI_Irecv + MPI_Isend + MPI_Testall %.2f\n",
          us[0], us[1], us[2]);
    }
  }
  const int work_us = absl::GetFlag(FLAGS_stream_work_us);
  for (int64_t bytes :
       {int64_t{16} << 10, int64_t{32} << 10, int64_t{64} << 10}) {
    std::vector<double> sent, arrived;
    Streaming(rank, bytes, work_us, sent, arrived);  // Warm-up.
    Streaming(rank, bytes, work_us, sent, arrived);
    if (rank == 0) {
      std::printf("# streaming %lld B every %d us: sent at", (long long)bytes,
                  work_us);
      for (double t : sent) std::printf(" %.1f", t);
      std::printf("; arrived at");
      for (double t : arrived) std::printf(" %.1f", t);
      std::printf("\n");
    }
  }
  if (rank == 0) std::printf("# one-way us by payload:");
  for (int64_t bytes = 64; bytes <= 1024; bytes += 32) {
    std::vector<char> small(bytes, 1);
    PingPong(rank, bytes, warmup, small);
    const double us = PingPong(rank, bytes, exchange_iters, small);
    if (rank == 0) std::printf(" %lld:%.2f", (long long)bytes, us);
  }
  if (rank == 0) std::printf("\n");
  constexpr double kIdleUs = 300;
  for (const auto& [send_strided, recv_strided] :
       {std::pair{false, false}, std::pair{false, true}, std::pair{true, false},
        std::pair{true, true}}) {
    double us[3];
    RendezvousArrival(rank, send_strided, recv_strided, kIdleUs);  // Warm-up.
    for (double& u : us) {
      u = RendezvousArrival(rank, send_strided, recv_strided, kIdleUs);
    }
    if (rank == 0) {
      std::printf(
          "# 128 KiB, %s -> %s, sender away from MPI for %.0f us: received "
          "at %.1f %.1f %.1f us\n",
          send_strided ? "16 x 8 KiB" : "contiguous",
          recv_strided ? "16 x 8 KiB" : "contiguous", kIdleUs, us[0], us[1],
          us[2]);
    }
  }
  const double round_trip_ns = CacheLineRoundTripNs(rank, 200'000);
  if (rank == 0) {
    if (round_trip_ns == -1) {
      std::printf("# cache line round trip: the ranks do not share a host\n");
    } else if (round_trip_ns < 0) {
      std::printf(
          "# cache line round trip: the MPI library gave the ranks no shared "
          "window (MPI_Win_allocate_shared)\n");
    } else {
      std::printf(
          "# cache line round trip between the ranks' cores (shared memory, "
          "up to 200000 trips or half a second): %.0f ns\n",
          round_trip_ns);
    }
  }
  if (rma) {
    MPI_Win_unlock_all(flag_win);
    MPI_Win_unlock_all(data_win);
    MPI_Win_free(&flag_win);
    MPI_Win_free(&data_win);
  }
  MPI_Finalize();
  return 0;
}
