#include "meshdma/dma/transport/mpi/mpi_process_group.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/transport/mpi/mpi_path.h"
#include "meshdma/dma/transport/mpi/mpi_status.h"

namespace meshdma::dma_internal {
namespace {

// The bytes of round `round` of a contribution of `len` bytes moved in
// rounds of `chunk` bytes.
int RoundBytes(int64_t len, int64_t round, int64_t chunk) {
  return static_cast<int>(std::clamp<int64_t>(len - round * chunk, 0, chunk));
}

// Run's barriers on the process group's communicator.
constexpr int kProcessBarrierTag = 7201;

std::atomic<bool> g_peers_lost{false};
std::mutex g_lost_mu;
std::string* g_lost_reason = nullptr;  // Guarded by g_lost_mu; never freed.

// Registered once, by the runtime that initialised MPI.
void FinalizeMpiAtExit() {
  if (g_peers_lost.load()) {
    std::lock_guard<std::mutex> lock(g_lost_mu);
    std::fprintf(stderr,
                 "meshdma: not finalising MPI (%s); exiting with status 1\n",
                 g_lost_reason != nullptr ? g_lost_reason->c_str() : "");
    std::fflush(stderr);
    _exit(1);
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// Whether `type` is one of the integer types (or the C bool) an MPI gives
// control variables.
bool IsIntegerCvarType(MPI_Datatype type) {
  return type == MPI_INT || type == MPI_UNSIGNED || type == MPI_LONG ||
         type == MPI_UNSIGNED_LONG || type == MPI_LONG_LONG ||
         type == MPI_UNSIGNED_LONG_LONG || type == MPI_COUNT ||
         type == MPI_C_BOOL;
}

// The value of the control variable `name` as text (a string, or an integer
// in decimal), or nullopt when this MPI has none of that name.
std::optional<std::string> ReadCvar(absl::string_view name) {
  int count = 0;
  if (MPI_T_cvar_get_num(&count) != MPI_SUCCESS) return std::nullopt;
  for (int i = 0; i < count; ++i) {
    char cvar[256];
    int cvar_len = sizeof(cvar), verbosity = 0, binding = 0, scope = 0;
    MPI_Datatype type;
    MPI_T_enum enumtype;
    int desc_len = 0;  // The description is not needed.
    if (MPI_T_cvar_get_info(i, cvar, &cvar_len, &verbosity, &type, &enumtype,
                            nullptr, &desc_len, &binding,
                            &scope) != MPI_SUCCESS ||
        name != cvar || (type != MPI_CHAR && !IsIntegerCvarType(type))) {
      continue;
    }
    MPI_T_cvar_handle handle;
    int elements = 0;
    if (MPI_T_cvar_handle_alloc(i, nullptr, &handle, &elements) !=
        MPI_SUCCESS) {
      return std::nullopt;
    }
    std::string value;
    if (type == MPI_CHAR) {
      std::vector<char> buffer(std::max(elements, 1) + 1, '\0');
      if (MPI_T_cvar_read(handle, buffer.data()) == MPI_SUCCESS) {
        value = buffer.data();
      }
    } else {
      // Room for any of the integer types; read as the type's own width.
      int type_bytes = 0;
      MPI_Type_size(type, &type_bytes);
      alignas(8) unsigned char buffer[16] = {};
      if (elements == 1 && type_bytes > 0 && type_bytes <= 8 &&
          MPI_T_cvar_read(handle, buffer) == MPI_SUCCESS) {
        const bool is_signed =
            type == MPI_INT || type == MPI_LONG || type == MPI_LONG_LONG;
        if (type_bytes == 1) {  // MPI_C_BOOL: 0 or 1.
          value = absl::StrCat(static_cast<int>(buffer[0]));
        } else if (type_bytes == 4) {
          int32_t v32;
          std::memcpy(&v32, buffer, 4);
          value = is_signed ? absl::StrCat(v32)
                            : absl::StrCat(static_cast<uint32_t>(v32));
        } else {
          int64_t v64;
          std::memcpy(&v64, buffer, 8);
          value = is_signed ? absl::StrCat(v64)
                            : absl::StrCat(static_cast<uint64_t>(v64));
        }
      }
    }
    MPI_T_cvar_handle_free(&handle);
    return value;
  }
  return std::nullopt;
}

// The tool interface, initialised once per process; false where this MPI
// does not offer it. It stays initialised: MPICH 4.0 crashes in
// MPI_T_cvar_get_num after MPI_T_finalize and a second MPI_T_init_thread.
bool MpiToolInterface() {
  static const bool ready = [] {
    int provided = 0;
    return MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) == MPI_SUCCESS;
  }();
  return ready;
}

// Whether Open MPI's component selection `list` ("a,b" includes, "^a,b"
// excludes; empty keeps everything) keeps the component known by any of
// `names`.
bool Selects(absl::string_view list,
             std::initializer_list<absl::string_view> names) {
  const bool exclude = absl::StartsWith(list, "^");
  if (exclude) list.remove_prefix(1);
  std::vector<absl::string_view> listed_names =
      absl::StrSplit(list, ',', absl::SkipWhitespace());
  if (listed_names.empty()) return true;
  bool listed = false;
  for (absl::string_view name : names) {
    listed = listed || std::find(listed_names.begin(), listed_names.end(),
                                 name) != listed_names.end();
  }
  return listed != exclude;
}

}  // namespace

bool MpiUsesSharedMemoryWithinMachine() {
  // Read once per process: the settings cannot change under a running MPI.
  static const bool shared = [] {
    if (!MpiToolInterface()) return true;
    if (std::optional<std::string> nolocal = ReadCvar("MPIR_CVAR_NOLOCAL")) {
      return *nolocal == "0" || nolocal->empty();  // MPICH.
    }
    if (std::optional<std::string> btl = ReadCvar("btl")) {
      // Open MPI: the BTLs matter only under its ob1 PML; UCX brings its own
      // shared memory.
      const std::optional<std::string> pml = ReadCvar("pml");
      const bool ucx_pml = pml.has_value() && *pml == "ucx";
      return ucx_pml || Selects(*btl, {"vader", "sm"});
    }
    return true;
  }();
  return shared;
}

bool MpiYieldsWhenIdle() {
  static const bool yields = [] {
    if (!MpiToolInterface()) return false;
    const std::optional<std::string> v = ReadCvar("mpi_yield_when_idle");
    return v.has_value() && *v == "1";
  }();
  return yields;
}

int64_t MpiSharedMemoryEagerBytes() {
  static const int64_t eager = []() -> int64_t {
    if (!MpiUsesSharedMemoryWithinMachine() || !MpiToolInterface()) return 0;
    const std::optional<std::string> pml = ReadCvar("pml");
    if (pml.has_value() && *pml == "ucx") return 0;
    for (absl::string_view name :
         {"btl_vader_eager_limit", "btl_sm_eager_limit"}) {
      int64_t bytes = 0;
      if (std::optional<std::string> v = ReadCvar(name);
          v.has_value() && absl::SimpleAtoi(*v, &bytes) && bytes > 0) {
        return bytes;
      }
    }
    return 0;
  }();
  return eager;
}

int64_t MpiSharedMemoryFastBytes() {
  // Open MPI's fast boxes; what MpiSharedMemoryEagerBytes finds is Open
  // MPI's ob1 over its shared-memory BTL.
  constexpr int64_t kOpenMpiFastBoxPayloadBytes = 256;
  return MpiSharedMemoryEagerBytes() > 0 ? kOpenMpiFastBoxPayloadBytes : 0;
}

void MarkMpiPeersLost(const std::string& reason) {
  std::lock_guard<std::mutex> lock(g_lost_mu);
  if (g_lost_reason == nullptr) g_lost_reason = new std::string(reason);
  g_peers_lost.store(true);
}

bool MpiPeersLost() { return g_peers_lost.load(); }

std::string MpiPeersLostReason() {
  std::lock_guard<std::mutex> lock(g_lost_mu);
  return g_lost_reason != nullptr ? *g_lost_reason : std::string();
}

// A message: the epoch, then the payload. Receives take the largest message,
// so a late message of an earlier barrier never truncates.
constexpr int kBarrierMessageWords = 1 + ProcessGroup::kMaxExchangeWords;

struct MpiBarrier::State {
  MPI_Comm comm;
  int tag;
  int64_t epoch;
  int rank = 0;
  int size = 1;
  int words = 0;                          // Payload words per message.
  std::vector<int64_t> sent;              // One message per peer.
  std::vector<int64_t> received;          // One message per rank.
  std::vector<MPI_Request> sends, recvs;  // Per rank; null for this rank.
  std::vector<bool> arrived;

  int64_t* Received(int r) { return &received[r * kBarrierMessageWords]; }
  void PostReceive(int r) {
    MPI_Irecv(Received(r), kBarrierMessageWords, MPI_INT64_T, r, tag, comm,
              &recvs[r]);
  }
};

MpiBarrier::MpiBarrier(MPI_Comm comm, int tag, int64_t epoch,
                       std::span<const int64_t> payload)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.comm = comm;
  s.tag = tag;
  s.epoch = epoch;
  MPI_Comm_rank(comm, &s.rank);
  MPI_Comm_size(comm, &s.size);
  s.words = static_cast<int>(
      std::min<size_t>(payload.size(), ProcessGroup::kMaxExchangeWords));
  s.sent.assign(static_cast<size_t>(s.size) * kBarrierMessageWords, 0);
  s.received.assign(static_cast<size_t>(s.size) * kBarrierMessageWords, -1);
  for (int r = 0; r < s.size; ++r) {
    int64_t* message = &s.sent[r * kBarrierMessageWords];
    message[0] = epoch;
    std::copy_n(payload.begin(), s.words, message + 1);
  }
  std::copy_n(payload.begin(), s.words, s.Received(s.rank) + 1);
  s.sends.assign(s.size, MPI_REQUEST_NULL);
  s.recvs.assign(s.size, MPI_REQUEST_NULL);
  s.arrived.assign(s.size, false);
  s.arrived[s.rank] = true;
  for (int r = 0; r < s.size; ++r) {
    if (r != s.rank) s.PostReceive(r);
  }
  for (int r = 0; r < s.size; ++r) {
    if (r == s.rank) continue;
    MPI_Isend(&s.sent[r * kBarrierMessageWords], 1 + s.words, MPI_INT64_T, r,
              tag, comm, &s.sends[r]);
  }
}

MpiBarrier::~MpiBarrier() {
  State& s = *state_;
  bool pending = false;
  for (int r = 0; r < s.size; ++r) {
    if (s.recvs[r] != MPI_REQUEST_NULL) {
      MPI_Cancel(&s.recvs[r]);
      MPI_Request_free(&s.recvs[r]);
      pending = true;
    }
    if (s.sends[r] != MPI_REQUEST_NULL) {
      MPI_Request_free(&s.sends[r]);
      pending = true;
    }
  }
  // MPI may still write or read the buffers of requests it could not finish.
  if (pending) state_.release();
}

absl::StatusOr<bool> MpiBarrier::Test() {
  State& s = *state_;
  bool all = true;
  for (int r = 0; r < s.size; ++r) {
    if (s.recvs[r] != MPI_REQUEST_NULL) {
      int done = 0;
      MESHDMA_MPI_CALL(MPI_Test(&s.recvs[r], &done, MPI_STATUS_IGNORE));
      if (done) {
        const int64_t theirs = s.Received(r)[0];
        if (theirs < s.epoch) {
          // A late message of a barrier this rank gave up on: skip it.
          s.PostReceive(r);
        } else if (theirs > s.epoch) {
          return absl::InternalError(absl::StrCat(
              "rank ", s.rank, " is at barrier ", s.epoch, " but rank ", r,
              " is at barrier ", theirs,
              ": the processes made different sequences of collective calls"));
        } else {
          s.arrived[r] = true;
        }
      }
    }
    if (s.sends[r] != MPI_REQUEST_NULL) {
      int done = 0;
      MESHDMA_MPI_CALL(MPI_Test(&s.sends[r], &done, MPI_STATUS_IGNORE));
    }
    all = all && s.arrived[r] && s.sends[r] == MPI_REQUEST_NULL;
  }
  return all;
}

std::string MpiBarrier::Missing() const {
  std::vector<int> missing;
  for (int r = 0; r < state_->size; ++r) {
    if (!state_->arrived[r]) missing.push_back(r);
  }
  return absl::StrJoin(missing, ", ");
}

std::vector<int64_t> MpiBarrier::Words() const {
  const State& s = *state_;
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(s.size) * s.words);
  for (int r = 0; r < s.size; ++r) {
    const int64_t* message = &s.received[r * kBarrierMessageWords];
    out.insert(out.end(), message + 1, message + 1 + s.words);
  }
  return out;
}

absl::Status WaitForBarrier(MpiBarrier& barrier, absl::string_view what,
                            int rank, absl::Duration timeout) {
  const base_internal::Deadline deadline =
      base_internal::Deadline::After(timeout);
  for (;;) {
    MESHDMA_ASSIGN_OR_RETURN(bool done, barrier.Test());
    if (done) return absl::OkStatus();
    if (MpiPeersLost()) {
      return absl::UnavailableError(
          absl::StrCat(what, " on rank ", rank, ": the launch lost a process (",
                       MpiPeersLostReason(), ")"));
    }
    if (deadline.Expired()) {
      const std::string missing = barrier.Missing();
      std::string reason = absl::StrCat(
          what, " on rank ", rank, ": rank(s) ",
          missing.empty() ? "?" : missing, " did not reach it within ",
          absl::FormatDuration(timeout), " (dead, stuck, or in another call)");
      MarkMpiPeersLost(reason);
      return absl::DeadlineExceededError(reason);
    }
    absl::SleepFor(absl::Microseconds(20));
  }
}

MpiProcessGroup::MpiProcessGroup(MPI_Comm comm, int64_t max_message_bytes)
    : comm_(comm), max_message_bytes_(max_message_bytes) {
  // An MPI error on this communicator comes back as a code that
  // MESHDMA_MPI_CALL turns into a Status, instead of ending every process
  // (MPI's default). Its calls see only checked arguments (`CheckRoot`).
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiProcessGroup::~MpiProcessGroup() {
  // A communicator with requests to a lost peer may not be freeable.
  if (!MpiPeersLost()) MPI_Comm_free(&comm_);
}

int64_t MpiProcessGroup::ChunkBytes() const {
  // Every rank's round fits one int count, and all of them one displacement.
  const int64_t per_rank = std::numeric_limits<int>::max() / size_;
  return std::max<int64_t>(1, std::min(max_message_bytes_, per_rank));
}

absl::StatusOr<std::vector<std::string>> MpiProcessGroup::Exchange(
    absl::string_view mine, std::optional<int> root) {
  // Step 1: every rank learns every length (64-bit).
  const int64_t len = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lens(size_);
  MESHDMA_MPI_CALL(
      MPI_Allgather(&len, 1, MPI_INT64_T, lens.data(), 1, MPI_INT64_T, comm_));
  const bool receives = !root.has_value() || *root == rank_;
  std::vector<std::string> out(receives ? size_ : 0);
  for (int r = 0; r < static_cast<int>(out.size()); ++r)
    out[r].reserve(lens[r]);
  // Step 2: the bytes, in rounds of at most `chunk` per rank, so that no MPI
  // count or displacement overflows an int.
  const int64_t chunk = ChunkBytes();
  const int64_t longest = *std::max_element(lens.begin(), lens.end());
  const int64_t rounds = (longest + chunk - 1) / chunk;
  std::vector<int> counts(size_), displs(size_);
  std::string staged;
  for (int64_t k = 0; k < rounds; ++k) {
    int total = 0;
    for (int r = 0; r < size_; ++r) {
      counts[r] = RoundBytes(lens[r], k, chunk);
      displs[r] = total;
      total += counts[r];
    }
    staged.resize(receives ? total : 0);
    const char* part = mine.data() + std::min(len, k * chunk);
    const int count = counts[rank_];
    if (root.has_value()) {
      MESHDMA_MPI_CALL(MPI_Gatherv(part, count, MPI_CHAR, staged.data(),
                                   counts.data(), displs.data(), MPI_CHAR,
                                   *root, comm_));
    } else {
      MESHDMA_MPI_CALL(MPI_Allgatherv(part, count, MPI_CHAR, staged.data(),
                                      counts.data(), displs.data(), MPI_CHAR,
                                      comm_));
    }
    if (!receives) continue;
    for (int r = 0; r < size_; ++r) {
      out[r].append(staged, displs[r], counts[r]);
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> MpiProcessGroup::AllGather(
    absl::string_view mine) {
  return Exchange(mine, std::nullopt);
}

absl::StatusOr<std::vector<std::string>> MpiProcessGroup::Gather(
    absl::string_view mine, int root) {
  MESHDMA_RETURN_IF_ERROR(CheckRoot("Gather", root));
  return Exchange(mine, root);
}

absl::Status MpiProcessGroup::Broadcast(std::string& bytes, int root) {
  MESHDMA_RETURN_IF_ERROR(CheckRoot("Broadcast", root));
  int64_t len = static_cast<int64_t>(bytes.size());
  MESHDMA_MPI_CALL(MPI_Bcast(&len, 1, MPI_INT64_T, root, comm_));
  bytes.resize(len);
  const int64_t chunk = ChunkBytes();
  for (int64_t done = 0; done < len; done += chunk) {
    MESHDMA_MPI_CALL(MPI_Bcast(bytes.data() + done,
                               RoundBytes(len - done, 0, chunk), MPI_CHAR, root,
                               comm_));
  }
  return absl::OkStatus();
}

absl::Status MpiProcessGroup::Barrier(absl::string_view what,
                                      absl::Duration timeout) {
  MpiBarrier barrier(comm_, kProcessBarrierTag, barrier_epoch_++);
  return WaitForBarrier(barrier, what, rank_, timeout);
}

absl::StatusOr<std::vector<int64_t>> MpiProcessGroup::BarrierExchange(
    absl::string_view what, absl::Duration timeout,
    std::span<const int64_t> mine) {
  if (mine.size() > static_cast<size_t>(kMaxExchangeWords)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", mine.size(), " words exceed the ",
                     kMaxExchangeWords, " a barrier carries"));
  }
  MpiBarrier barrier(comm_, kProcessBarrierTag, barrier_epoch_++, mine);
  MESHDMA_RETURN_IF_ERROR(WaitForBarrier(barrier, what, rank_, timeout));
  return barrier.Words();
}

absl::StatusOr<std::unique_ptr<ProcessGroup>> ConnectMpiProcesses() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    return absl::FailedPreconditionError(
        "MPI has been finalised in this process (by its owner): a meshdma "
        "runtime cannot be created after MPI_Finalize");
  }
  if (MpiPeersLost()) {
    return absl::FailedPreconditionError(
        "a process of this launch was lost earlier (a barrier timed out); "
        "MPI cannot be used again in this process");
  }
  int provided = 0;
  bool owns_mpi = false;
  if (!initialized) {
    MESHDMA_MPI_CALL(
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    owns_mpi = true;
  } else {
    MESHDMA_MPI_CALL(MPI_Query_thread(&provided));
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    if (owns_mpi) MPI_Finalize();
    return absl::FailedPreconditionError(absl::StrCat(
        "MPI provides thread level ", provided,
        "; meshdma needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE, ")"));
  }
  // Initialised once, finalised at exit: a later runtime reuses it.
  if (owns_mpi) std::atexit(FinalizeMpiAtExit);
  MPI_Comm comm = MPI_COMM_NULL;
  MESHDMA_MPI_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  return std::unique_ptr<ProcessGroup>(new MpiProcessGroup(comm));
}

}  // namespace meshdma::dma_internal
