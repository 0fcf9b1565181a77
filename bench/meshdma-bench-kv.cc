// meshdma-bench-kv: KV-cache transfer from prefill to decode devices
// (collectives/fused/kv_transfer.h) against MPI point-to-point moving the
// same pages between the same processes, in the same run.
//
//   mpirun -np 2 -x MESHDMA_FORCE_INTERHOST=1 meshdma-bench-kv
//   mpirun -np 4 -x MESHDMA_HOSTS=2 meshdma-bench-kv      (2 hosts x 2)
//
// Mesh {stage: 2, x: n/2}, one device per process: prefill device (0, i)
// feeds decode device (1, i). The launch orders devices hosts outermost, so
// with two hosts (real, simulated with MESHDMA_HOSTS=2, or every process its
// own with MESHDMA_FORCE_INTERHOST=1) the prefill devices sit on the first
// host and the decode devices on the second: every page crosses hosts.
//
// For each prompt length S, per pair: L layers of K and V, f32
// [Hkv, S, D] each, in pages of P tokens (2 * L * Hkv * ceil(S / P) pages,
// scattered through the decode cache by the block table). Columns:
//   meshdma_ms   the transfer alone (OverlapMode::kCommunicationOnly)
//   GBps, pages/s of that transfer, per pair
//   mpi_page_ms  MPI_Isend / MPI_Irecv of every page into its cache slot
//                (receives pre-posted, then a barrier, then the sends)
//   mpi_vec_ms   the same with one message per (layer, prompt page): an
//                MPI_Type_vector of that page's rows in every key and value
//                head, on both sides
//   vs_mpi       min(mpi_page_ms, mpi_vec_ms) / meshdma_ms (above 1:
//                meshdma is faster than the better MPI layout)
//   mpi_bulk_GBps one MPI message per pair of all the bytes: the best MPI
//                can do without paging
//   compute_ms   the compute without transfer (kComputeOnly), slowest
//                device: decode attention per layer (paged attention, 4
//                query heads per KV head), or prefill's layers (filling
//                keys and values, then --prefill_us of busy time each)
//   overlap      kOverlapped time / max(compute_ms, meshdma_ms): 1.0 is
//                perfect overlap, compute_ms + meshdma_ms over their max is
//                none
//   feed_ms      kOverlapped with decode doing nothing with what arrives:
//                prefill's layers and the transfer they feed, pipelined
//   hidden       the share of decode's compute (its devices' own,
//                kComputeOnly) that the overlapped run hid behind the feed:
//                (feed_ms + decode compute - overlapped_ms) / decode
//                compute; 0 is none, and 1 - 1/layers all that can hide
//                (the last layer's attention follows its arrival)
// Every timing is the slowest device's, from a barrier to the device's own
// end (no barrier after, as for MPI's baseline), median of --iters after a
// warm-up. As in a server, each prompt length runs in one Runtime::Run: the
// decode cache, meshdma's state for each pair and MPI's buffers are kept
// from call to call, and every process's device thread runs the modes and
// the MPI baselines in turn.
// The first overlapped run checks every page on every decode device against
// the values prefill wrote; `#wrong` counts the elements that differ.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/fused/kv_transfer.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "tools/runtime_flags.h"

ABSL_FLAG(int, layers, 8, "transformer layers");
ABSL_FLAG(int64_t, kv_heads, 8, "key/value heads");
ABSL_FLAG(int64_t, dim, 128, "head dimension");
ABSL_FLAG(int64_t, page, 16, "tokens per page");
ABSL_FLAG(int64_t, seq_min, 64, "shortest prompt (tokens)");
ABSL_FLAG(int64_t, seq_max, 4096, "longest prompt (tokens)");
ABSL_FLAG(int, iters, 5, "timed iterations per mode and size");
ABSL_FLAG(int64_t, prefill_us, 0,
          "busy time of each prefill layer beyond filling its keys and "
          "values, as a model's layer compute (microseconds)");

namespace meshdma {
namespace {

const cli::Program kProgram = {
    .name = "meshdma-bench-kv",
    .synopsis = "[flags]   (under mpirun -np 2N, one device per process)",
    .summary =
        "KV-cache transfer from prefill to decode devices (pages per second, "
        "GB/s)\nagainst MPI point-to-point of the same pages, and how well "
        "decode overlaps it.",
    .aliases = {},
    .footer = cli::kRuntimeFlagsFooter,
    .ranges = {{"layers", 1, 1024},
               {"kv_heads", 1, 1024},
               {"dim", 1, 4096},
               {"page", 1, 1 << 20},
               {"seq_min", 1, 1 << 20},
               {"seq_max", 1, 1 << 20},
               {"iters", 1, 10000},
               {"prefill_us", 0, 10'000'000}}};

struct Shape {
  int layers;
  int64_t kv_heads, dim, page, seq;
  int64_t pages() const { return (seq + page - 1) / page; }
  int64_t total_pages() const { return 2 * pages() + 1; }
  // Elements of one layer's K (or V) on the prefill side.
  int64_t staged() const { return kv_heads * seq * dim; }
  // Bytes and pages moved per pair.
  double bytes() const { return 8.0 * layers * staged(); }
  int64_t moved_pages() const { return 2LL * layers * kv_heads * pages(); }
};

// What prefill writes at (layer, key or value, head, token, d).
float Expected(int l, int kv, int64_t h, int64_t t, int64_t d) {
  return static_cast<float>((l * 7 + kv * 3 + h * 5 + t * 11 + d) % 251);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Element-wise, the slowest process's value of each entry.
std::vector<double> Slowest(std::vector<double> mine) {
  MPI_Allreduce(MPI_IN_PLACE, mine.data(), static_cast<int>(mine.size()),
                MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return mine;
}

// The decode device's page choice: every other page, from the end.
std::vector<int32_t> BlockTable(const Shape& s) {
  std::vector<int32_t> table(s.pages());
  for (int64_t p = 0; p < s.pages(); ++p)
    table[p] = static_cast<int32_t>(s.total_pages() - 1 - 2 * p);
  return table;
}

// Elements of layer `l`'s cache pages that differ from what prefill wrote.
int64_t CountWrong(const Shape& s, const std::vector<int32_t>& table, int l,
                   const ArrayRef& key_cache, const ArrayRef& value_cache) {
  int64_t wrong = 0;
  for (int kv = 0; kv < 2; ++kv) {
    const float* cache = (kv == 0 ? key_cache : value_cache).data_as<float>();
    for (int64_t h = 0; h < s.kv_heads; ++h)
      for (int64_t t = 0; t < s.seq; ++t) {
        const int64_t row =
            (h * s.total_pages() + table[t / s.page]) * s.page + t % s.page;
        for (int64_t d = 0; d < s.dim; ++d)
          wrong += cache[row * s.dim + d] != Expected(l, kv, h, t, d);
      }
  }
  return wrong;
}

// Decode's work on an arrived layer: one query token's paged attention with
// 4 query heads per KV head.
absl::Status DecodeLayer(const Shape& s, const std::vector<int32_t>& table,
                         const ArrayRef& key_cache,
                         const ArrayRef& value_cache) {
  const int64_t heads = 4 * s.kv_heads;
  std::vector<float> q(heads * s.dim, 0.01f);
  return DecodePagedAttention(q.data(), heads, key_cache, value_cache, s.seq,
                              table, 1.0f / std::sqrt(float(s.dim)))
      .status();
}

// Spins for `us` microseconds: a model's compute, which holds its core.
void BusyFor(int64_t us) {
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < end) {
  }
}

// What a decode device does with an arrived layer.
enum class OnArrival {
  kDecode,  // Decode attention (DecodeLayer).
  kCheck,   // Count the elements that differ from `Expected`.
  kNothing,
};

KvTransferOptions KvOptions(const Shape& s) {
  return {.num_layers = s.layers,
          .num_kv_heads = s.kv_heads,
          .head_dim = s.dim,
          .page_size = s.page,
          .total_pages = s.total_pages()};
}

// One prompt's transfer in `mode`, on this device, from a device barrier to
// its own end (no barrier after, as MPI's baseline times each rank's
// Waitall): milliseconds. With OnArrival::kCheck, decode devices count the
// cache elements that differ from `Expected` into `wrong`.
absl::StatusOr<double> TransferMs(const Shape& s, const ArrayRef& cache,
                                  OverlapMode mode, OnArrival on_arrival,
                                  int64_t& wrong) {
  const std::vector<int32_t> table = BlockTable(s);
  const int64_t prefill_us = absl::GetFlag(FLAGS_prefill_us);
  KvTransferOptions options = KvOptions(s);
  options.mode = mode;
  MESHDMA_RETURN_IF_ERROR(device_barrier());
  const auto t0 = std::chrono::steady_clock::now();
  MESHDMA_RETURN_IF_ERROR(KvTransfer(
      s.seq, table, cache, options,
      [&](int l, const ArrayRef& k, const ArrayRef& v) {
        for (int kv = 0; kv < 2; ++kv) {
          float* out = (kv == 0 ? k : v).data_as<float>();
          for (int64_t h = 0; h < s.kv_heads; ++h)
            for (int64_t t = 0; t < s.seq; ++t)
              for (int64_t d = 0; d < s.dim; ++d)
                *out++ = Expected(l, kv, h, t, d);
        }
        BusyFor(prefill_us);
        return absl::OkStatus();
      },
      [&](int l, const ArrayRef& key_cache,
          const ArrayRef& value_cache) -> absl::Status {
        switch (on_arrival) {
          case OnArrival::kDecode:
            return DecodeLayer(s, table, key_cache, value_cache);
          case OnArrival::kCheck:
            wrong += CountWrong(s, table, l, key_cache, value_cache);
            return absl::OkStatus();
          case OnArrival::kNothing:
            return absl::OkStatus();
        }
        return absl::OkStatus();
      }));
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - t0)
      .count();
}

// How the MPI baseline cuts a layer into messages.
enum class MpiLayout {
  kPerPage,    // one message per (key/value, kv head, page)
  kPerPrompt,  // one strided message per prompt page, every head's rows
  kBulk,       // one message of all the bytes, no paging
};

// The MPI baseline, on the device thread of each process: prefill rank i
// sends every layer's pages to decode rank i + n/2 with MPI_Isend, into the
// cache slots the block table names (receives posted before a barrier), cut
// as `layout` says, from and into `buffer` (resized to fit, and kept from
// call to call as the decode cache and the staging slots of meshdma are).
// Returns this rank's ms.
double MpiTransferMs(const Shape& s, MpiLayout layout,
                     std::vector<float>& buffer) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int half = size / 2;
  const bool prefill = rank < half;
  const int peer = prefill ? rank + half : rank - half;
  const std::vector<int32_t> table = BlockTable(s);
  const int64_t page_elems = s.page * s.dim;
  const int64_t layer_elems =
      prefill ? s.staged() : s.kv_heads * s.total_pages() * page_elems;
  buffer.resize(2 * s.layers * layer_elems, 1.0f);
  std::vector<MPI_Request> requests;
  auto post = [&](float* base, int64_t count, MPI_Datatype type) {
    requests.emplace_back();
    if (prefill) {
      MPI_Isend(base, static_cast<int>(count), type, peer, 0, MPI_COMM_WORLD,
                &requests.back());
    } else {
      MPI_Irecv(base, static_cast<int>(count), type, peer, 0, MPI_COMM_WORLD,
                &requests.back());
    }
  };
  // A prompt page's rows in the 2 * Hkv heads of a layer's keys then
  // values, which sit at one stride: full pages, and the last page's rows.
  const int64_t head_stride =
      prefill ? s.seq * s.dim : s.total_pages() * page_elems;
  const int64_t last_rows = s.seq - (s.pages() - 1) * s.page;
  MPI_Datatype full_page = MPI_DATATYPE_NULL, last_page = MPI_DATATYPE_NULL;
  if (layout == MpiLayout::kPerPrompt) {
    MPI_Type_vector(static_cast<int>(2 * s.kv_heads),
                    static_cast<int>(page_elems), static_cast<int>(head_stride),
                    MPI_FLOAT, &full_page);
    MPI_Type_vector(static_cast<int>(2 * s.kv_heads),
                    static_cast<int>(last_rows * s.dim),
                    static_cast<int>(head_stride), MPI_FLOAT, &last_page);
    MPI_Type_commit(&full_page);
    MPI_Type_commit(&last_page);
  }
  auto post_all = [&] {
    if (layout == MpiLayout::kBulk) {
      const int64_t elems = 2 * s.layers * s.staged();
      for (int64_t at = 0; at < elems; at += int64_t{1} << 28)
        post(buffer.data() + at, std::min<int64_t>(elems - at, 1 << 28),
             MPI_FLOAT);
      return;
    }
    if (layout == MpiLayout::kPerPrompt) {
      for (int64_t l = 0; l < s.layers; ++l)
        for (int64_t p = 0; p < s.pages(); ++p) {
          const int64_t at =
              prefill ? p * s.page * s.dim : table[p] * page_elems;
          post(buffer.data() + 2 * l * layer_elems + at, 1,
               p + 1 < s.pages() ? full_page : last_page);
        }
      return;
    }
    for (int64_t i = 0; i < 2 * s.layers; ++i)
      for (int64_t h = 0; h < s.kv_heads; ++h)
        for (int64_t p = 0; p < s.pages(); ++p) {
          const int64_t rows = std::min(s.page, s.seq - p * s.page);
          const int64_t at =
              prefill ? (h * s.seq + p * s.page) * s.dim
                      : (h * s.total_pages() + table[p]) * page_elems;
          post(buffer.data() + i * layer_elems + at, rows * s.dim, MPI_FLOAT);
        }
  };
  if (!prefill) post_all();
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  if (prefill) post_all();
  MPI_Waitall(static_cast<int>(requests.size()), requests.data(),
              MPI_STATUSES_IGNORE);
  const double ms = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - t0)
                        .count();
  if (full_page != MPI_DATATYPE_NULL) {
    MPI_Type_free(&full_page);
    MPI_Type_free(&last_page);
  }
  return ms;
}

absl::Status Main(const RuntimeOptions& options) {
  MESHDMA_ASSIGN_OR_RETURN(auto runtime, Runtime::Create(options));
  Runtime& rt = *runtime;
  const Launch& launch = rt.launch();
  if (launch.num_processes() < 2 || launch.num_processes() % 2 != 0 ||
      rt.num_devices() != launch.num_processes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "meshdma-bench-kv needs an even number of processes (at least 2) "
        "with one device each, under mpirun; this launch has ",
        launch.num_processes(), " process(es) and ", rt.num_devices(),
        " device(s)"));
  }
  const int pairs = rt.num_devices() / 2;
  MESHDMA_ASSIGN_OR_RETURN(Mesh mesh,
                           rt.MakeMesh({{"stage", 2}, {"x", pairs}}));
  const bool root = launch.rank() == 0;
  const int iters = absl::GetFlag(FLAGS_iters);
  Shape s{.layers = absl::GetFlag(FLAGS_layers),
          .kv_heads = absl::GetFlag(FLAGS_kv_heads),
          .dim = absl::GetFlag(FLAGS_dim),
          .page = absl::GetFlag(FLAGS_page),
          .seq = 0};
  const bool cross_host = !launch.SameHost(
      launch.devices()[0].rank, launch.devices()[rt.num_devices() - 1].rank);
  if (root) {
    std::printf(
        "# meshdma-bench-kv: %d prefill -> %d decode devices, %d processes on "
        "%d host(s) (pages %s hosts)\n"
        "# %d layers, Hkv=%lld, D=%lld, f32, pages of %lld tokens, prefill "
        "layers busy %lld us; per pair; slowest device, median of %d\n",
        pairs, pairs, launch.num_processes(), launch.num_hosts(),
        cross_host ? "cross" : "stay within", s.layers, (long long)s.kv_heads,
        (long long)s.dim, (long long)s.page,
        (long long)absl::GetFlag(FLAGS_prefill_us), iters);
    std::printf(
        "%7s %7s %9s %11s %7s %10s %11s %10s %7s %13s %10s %13s %7s %9s "
        "%6s %6s\n",
        "seq", "pages", "MB", "meshdma_ms", "GBps", "pages/s", "mpi_page_ms",
        "mpi_vec_ms", "vs_mpi", "mpi_bulk_GBps", "compute_ms", "overlapped_ms",
        "overlap", "feed_ms", "hidden", "#wrong");
  }
  for (int64_t seq = absl::GetFlag(FLAGS_seq_min);
       seq <= absl::GetFlag(FLAGS_seq_max); seq *= 4) {
    s.seq = seq;
    // One Run per prompt length, as a server keeps its runtime: the
    // transfers of every mode and MPI's baselines, interleaved, on each
    // process's device thread. Row r of `mine` is what this device measured
    // in column r.
    enum Column {
      kComm,
      kCompute,
      kDecodeCompute,  // kCompute's time on decode devices, 0 elsewhere.
      kOverlapped,
      kFeed,
      kMpiPage,
      kMpiVec,
      kMpiBulk,
      kColumns
    };
    std::vector<std::vector<double>> mine(kColumns);
    int64_t wrong = 0;
    MESHDMA_RETURN_IF_ERROR(rt.Run(mesh, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(int role, axis_index("stage"));
      // The decode cache outlives the transfers, as in a server: allocated
      // (and zeroed when the Run ends) outside the timed part, like MPI's
      // buffers.
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef cache, AllocateKvCache(KvOptions(s)));
      // Step 1: one checked transfer, which also warms every path up.
      MESHDMA_RETURN_IF_ERROR(TransferMs(s, cache, OverlapMode::kOverlapped,
                                         OnArrival::kCheck, wrong)
                                  .status());
      std::vector<float> mpi_buffer;
      for (MpiLayout layout :
           {MpiLayout::kPerPage, MpiLayout::kPerPrompt, MpiLayout::kBulk})
        MpiTransferMs(s, layout, mpi_buffer);
      // Step 2: the modes and the baselines, interleaved.
      int64_t unused = 0;
      for (int it = 0; it < iters; ++it) {
        auto time = [&](Column column, OverlapMode mode,
                        OnArrival on_arrival) -> absl::StatusOr<double> {
          MESHDMA_ASSIGN_OR_RETURN(
              double ms, TransferMs(s, cache, mode, on_arrival, unused));
          mine[column].push_back(ms);
          return ms;
        };
        MESHDMA_RETURN_IF_ERROR(
            time(kComm, OverlapMode::kCommunicationOnly, OnArrival::kDecode)
                .status());
        MESHDMA_ASSIGN_OR_RETURN(
            double compute,
            time(kCompute, OverlapMode::kComputeOnly, OnArrival::kDecode));
        mine[kDecodeCompute].push_back(role == 1 ? compute : 0.0);
        MESHDMA_RETURN_IF_ERROR(
            time(kOverlapped, OverlapMode::kOverlapped, OnArrival::kDecode)
                .status());
        MESHDMA_RETURN_IF_ERROR(
            time(kFeed, OverlapMode::kOverlapped, OnArrival::kNothing)
                .status());
        mine[kMpiPage].push_back(
            MpiTransferMs(s, MpiLayout::kPerPage, mpi_buffer));
        mine[kMpiVec].push_back(
            MpiTransferMs(s, MpiLayout::kPerPrompt, mpi_buffer));
        mine[kMpiBulk].push_back(
            MpiTransferMs(s, MpiLayout::kBulk, mpi_buffer));
      }
      return device_barrier();
    }));
    std::vector<double> median(kColumns);
    for (int column = 0; column < kColumns; ++column) {
      median[column] = Median(Slowest(mine[column]));
    }
    int64_t all_wrong = 0;
    MPI_Allreduce(&wrong, &all_wrong, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (!root) continue;
    const double c = median[kComm], d = median[kCompute],
                 o = median[kOverlapped], f = median[kFeed],
                 decode_alone = median[kDecodeCompute];
    const double mp = median[kMpiPage], mv = median[kMpiVec],
                 mb = median[kMpiBulk];
    std::printf(
        "%7lld %7lld %9.3f %11.3f %7.3f %10.0f %11.3f %10.3f %7.2f %13.3f "
        "%10.3f %13.3f %7.2f %9.3f %6.2f %6lld\n",
        (long long)seq, (long long)s.moved_pages(), s.bytes() / 1e6, c,
        s.bytes() / c / 1e6, s.moved_pages() / c * 1e3, mp, mv,
        std::min(mp, mv) / c, s.bytes() / mb / 1e6, d, o, o / std::max(c, d), f,
        (f + decode_alone - o) / decode_alone, (long long)all_wrong);
    std::fflush(stdout);
    if (all_wrong != 0) {
      return absl::InternalError(absl::StrCat(
          all_wrong, " cache elements differ from what prefill wrote at seq ",
          seq));
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace meshdma

int main(int argc, char** argv) {
  const meshdma::RuntimeOptions options =
      meshdma::cli::ParseRuntimeOptionsOrExit(meshdma::kProgram, argc, argv);
  // Flags that depend on each other, checked before anything is allocated:
  // a sweep that runs at least once, and a KV cache (K and V of f32 per
  // layer, head, token and dimension) that fits in this host's memory.
  absl::Status flags =
      meshdma::cli::CheckOrder(meshdma::kProgram, "seq_min", "seq_max");
  if (flags.ok()) {
    flags = meshdma::cli::CheckProduct(
        meshdma::kProgram,
        {{"layers", absl::GetFlag(FLAGS_layers)},
         {"kv_heads", absl::GetFlag(FLAGS_kv_heads)},
         {"seq_max", absl::GetFlag(FLAGS_seq_max)},
         {"dim", absl::GetFlag(FLAGS_dim)},
         {nullptr, 8, "bytes of K and V"}},
        "the KV cache", meshdma::cli::HostMemoryBytes(), "this host's memory");
  }
  if (!flags.ok()) meshdma::cli::ExitWithStatus(meshdma::kProgram, flags);
  const absl::Status s = meshdma::Main(options);
  if (s.ok()) return 0;
  std::fprintf(stderr, "meshdma-bench-kv: %s\n",
               std::string(s.message()).c_str());
  return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}
