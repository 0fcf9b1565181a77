// The configuration table: every `MESHDMA_*` environment variable the library
// reads, one row each (name, type, default, range, what it does), the way
// NCCL's `NCCL_PARAM` keeps its knobs. Code reads a variable through its row
// (`base_internal::EnvInt(config::kHeapBytes)` and the other readers of
// base/env.h), never by a string of its own; `meshdma-info --config` prints
// the table and docs/configuration.md lists it. An explicit option
// (`RuntimeOptions`, `LaunchOptions`, a program's flag) still beats its
// variable, and the variable beats the default.
#ifndef MESHDMA_BASE_CONFIG_H_
#define MESHDMA_BASE_CONFIG_H_

#include <cstdint>
#include <limits>
#include <string>

#include "absl/types/span.h"

namespace meshdma::config {

enum class Type {
  kBool,     // 1/true/yes or 0/false/no, in any case.
  kInt,      // An integer in [min, max].
  kSeconds,  // A number of seconds in (0, max], or "inf".
  kChoice,   // One of `choices`, separated by '|'.
  kString,   // Free text: a path, a name, a list.
};

struct Variable {
  const char* name;
  Type type;
  const char* default_value;  // As the docs and `meshdma-info` print it.
  int64_t min = 0;            // kInt only.
  int64_t max = 0;            // kInt; kSeconds: the largest finite value.
  const char* choices = "";   // kChoice only: "async|eager".
  const char* doc = "";       // What it does, one sentence.
};

inline constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// The runtime (dma/runtime.h, `RuntimeOptions`).
inline constexpr Variable kHeapBytes{
    "MESHDMA_HEAP_BYTES",
    Type::kInt,
    "268435456 (256 MiB)",
    16 << 10,
    int64_t{1} << 40,
    "",
    "Symmetric heap per device (`RuntimeOptions::heap_bytes`), reserved "
    "lazily; the bottom of it holds the semaphores."};
inline constexpr Variable kDmaMode{
    "MESHDMA_DMA_MODE",
    Type::kChoice,
    "async",
    0,
    0,
    "async|eager",
    "Who copies a DMA between devices that share memory: copy workers that "
    "overlap compute (async) or `start()` itself (eager)."};
inline constexpr Variable kWaitTimeout{
    "MESHDMA_WAIT_TIMEOUT_S",
    Type::kSeconds,
    "120",
    0,
    1'000'000'000,
    "",
    "How long a wait may block before it fails with DeadlineExceeded and a "
    "hang report; inf for no limit."};
inline constexpr Variable kSpinNs{
    "MESHDMA_SPIN_NS",
    Type::kInt,
    "20000",
    0,
    kInt64Max,
    "",
    "How long a wait spins before it sleeps on a futex "
    "(`RuntimeOptions::spin_ns`)."};
inline constexpr Variable kRemoteSpinNs{
    "MESHDMA_REMOTE_SPIN_NS",
    Type::kInt,
    "1000000",
    0,
    kInt64Max,
    "",
    "The spin of a wait in a launch with devices on other hosts, where the "
    "waiter progresses the remote transport (`remote_spin_ns`)."};
inline constexpr Variable kMpiPiecedBytes{
    "MESHDMA_MPI_PIECED_BYTES",
    Type::kInt,
    "266240 over a network, 16384 through MPI's shared memory",
    0,
    int64_t{1} << 30,
    "",
    "DMAs to another host's devices up to this size leave as several "
    "messages counted one by one on the receiver's semaphore; 0: never."};
inline constexpr Variable kRemoteTransport{
    "MESHDMA_REMOTE_TRANSPORT",
    Type::kChoice,
    "auto",
    0,
    0,
    "auto|tcp|mpi",
    "The path to devices on other hosts: meshdma's TCP connections, MPI "
    "messages, or MPI where some host has RDMA or MPI shares memory."};
inline constexpr Variable kTcpCongestion{
    "MESHDMA_TCP_CONGESTION",
    Type::kString,
    "cubic",
    0,
    0,
    "",
    "The congestion control of the TCP transport's connections (a name the "
    "kernel offers, or `system` for its default)."};
inline constexpr Variable kFusedTransfer{
    "MESHDMA_FUSED_TRANSFER",
    Type::kChoice,
    "auto",
    0,
    0,
    "auto|dma|peer_read",
    "Who moves the blocks of the fused kernels' rings (collective matmuls, "
    "ring attention): the consumer's compute reading them in place where "
    "every member's memory is readable (auto, peer_read) or remote DMAs "
    "(dma)."};
inline constexpr Variable kCollectiveMatmulSchedule{
    "MESHDMA_COLLECTIVE_MATMUL_SCHEDULE",
    Type::kChoice,
    "auto",
    0,
    0,
    "auto|ring|one_product",
    "The collective matmuls' schedule: the ring, whose transfer of one rows "
    "block overlaps the product of another (ring), or the collective and one "
    "product, which reads the weight once (one_product, on one host); auto "
    "takes one_product on one host where the ring would read the weight more "
    "bytes than the collective moves."};
inline constexpr Variable kCheck{
    "MESHDMA_CHECK",
    Type::kChoice,
    "off",
    0,
    0,
    "off|races",
    "Checked mode: races reports unordered accesses to the same bytes as an "
    "error from `Runtime::Run` (docs/checked_mode.md)."};
inline constexpr Variable kTrace{
    "MESHDMA_TRACE",
    Type::kString,
    "off",
    0,
    0,
    "",
    "Writes a Chrome/Perfetto timeline of every kernel, DMA, signal and wait "
    "to this file at shutdown (rank 0 writes every rank's events)."};
inline constexpr Variable kTraceMaxEvents{
    "MESHDMA_TRACE_MAX_EVENTS",
    Type::kInt,
    "262144",
    1,
    int64_t{1} << 40,
    "",
    "Events the timeline keeps per process; older ones are dropped first and "
    "counted."};
inline constexpr Variable kHangDir{
    "MESHDMA_HANG_DIR",
    Type::kString,
    "$TMPDIR, else /tmp",
    0,
    0,
    "",
    "The folder where the processes of a timed-out launch leave their hang "
    "reports for rank 0 to gather."};
inline constexpr Variable kSocketInterface{
    "MESHDMA_SOCKET_IFNAME",
    Type::kString,
    "loopback on one machine, else the first interface that is up",
    0,
    0,
    "",
    "The network interface whose IPv4 address the TCP transport listens on "
    "(eth0, ib0)."};

// The collectives (collectives/internal/channel.h).
inline constexpr Variable kChannelProtocol{
    "MESHDMA_CHANNEL_PROTOCOL",
    Type::kChoice,
    "auto",
    0,
    0,
    "auto|dma",
    "The rows of the collectives' channels; dma forces DMA rows everywhere. "
    "Checked by `Runtime::Create`."};

// The launch (topology/launch.h, `LaunchOptions`).
inline constexpr Variable kDevicesPerProcess{
    "MESHDMA_DEVICES_PER_PROCESS",
    Type::kInt,
    "the host's cores divided among its processes",
    1,
    1024,
    "",
    "Devices (threads) in each process."};
inline constexpr Variable kForceInterhost{
    "MESHDMA_FORCE_INTERHOST",
    Type::kBool,
    "false",
    0,
    0,
    "",
    "Every process is its own host, so the inter-host path runs on one "
    "machine."};
inline constexpr Variable kSimulatedHosts{
    "MESHDMA_HOSTS",
    Type::kInt,
    "the real hosts",
    1,
    1 << 20,
    "",
    "Groups the processes into this many simulated hosts, ranks in "
    "contiguous blocks: shared memory inside one, the remote transport "
    "between them."};

// Logging (base/logging.h). Bad words are reported once and ignored.
inline constexpr Variable kDebug{"MESHDMA_DEBUG",
                                 Type::kChoice,
                                 "NONE",
                                 0,
                                 0,
                                 "NONE|WARN|INFO|TRACE",
                                 "The log level (any case)."};
inline constexpr Variable kDebugSubsys{
    "MESHDMA_DEBUG_SUBSYS",
    Type::kString,
    "ALL",
    0,
    0,
    "",
    "Comma-separated subsystems to log: init, topology, transport, dma, "
    "collectives, kernels, ALL; ^ in front excludes."};
inline constexpr Variable kDebugFile{
    "MESHDMA_DEBUG_FILE",
    Type::kString,
    "stderr",
    0,
    0,
    "",
    "Where log lines go (`%h`: the host, `%p`: the process id)."};

// Every row above, in the order printed.
absl::Span<const Variable* const> AllVariables();

// The variables of the project's own scripts and test launchers
// (scripts/*.sh, .ci/run, tests/): not read by the library, and listed so
// that the runtime does not take them for misspelt rows
// (`base_internal::UnknownVariables`); docs/configuration.md, "Variables of
// the scripts and tests", lists them too.
struct ScriptVariable {
  const char* name;
  const char* read_by;
  const char* doc;
};
absl::Span<const ScriptVariable> ScriptVariables();

// "bool", "int", "seconds", "choice", "string".
const char* TypeName(Type type);

// The range a value must lie in, as printed: "[1, 1024]", "async|eager",
// "(0, 1e9] or inf", "1/true/yes, 0/false/no", "" for kString.
std::string RangeText(const Variable& var);

}  // namespace meshdma::config

#endif  // MESHDMA_BASE_CONFIG_H_
