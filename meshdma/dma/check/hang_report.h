// The mesh-wide hang report (docs/checked_mode.md). Every process keeps a
// small state board, a text file named after the job and its rank in
// MESHDMA_HANG_DIR (default $TMPDIR, else /tmp): written at start-up (pid,
// host), and again by any device whose wait has been blocked for half the wait
// timeout. A board is written by its own process only, so a peer that is
// stopped, stuck in compute or gone still leaves its last board behind; the
// process whose wait times out first reads every board, prints the mesh's
// wait-for graph and saves it for the others' Status.
#ifndef MESHDMA_DMA_CHECK_HANG_REPORT_H_
#define MESHDMA_DMA_CHECK_HANG_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace meshdma::dma_internal {

// The first words of the mesh-wide report.
inline constexpr char kMeshReportHeading[] = "Mesh-wide state";

// One device's state, as a process publishes it.
struct DeviceHangState {
  int device = 0;
  bool waiting = false;
  std::string verb;         // "wait_recv", ...; empty when not waiting.
  int64_t sem_offset = -1;  // The semaphore waited on.
  std::string sem_name;     // "'recv' DMA semaphore @6464".
  int64_t expected = 0;
  int64_t current = 0;
  std::string inflight;  // DMAs in flight from the device.
  // For each target device: the semaphore this device last signalled (or
  // sent a DMA to) there, or -1, and when (monotonic ns on its host).
  std::vector<int64_t> last_sent_sem;
  std::vector<int64_t> last_sent_ns;
};

struct ProcessHangState {
  int rank = 0;
  int64_t pid = 0;
  std::string host;
  int64_t written_ns = 0;  // Monotonic ns on its host.
  std::vector<DeviceHangState> devices;
};

class HangBoard {
 public:
  // `tag` identifies the job; `dir` empty means MESHDMA_HANG_DIR, else
  // /dev/shm.
  HangBoard(uint64_t tag, int rank, int num_processes);
  ~HangBoard();
  void Publish(const ProcessHangState& state);
  // Reads every process's board, waiting up to `grace` for boards newer than
  // `since_ns` from processes whose devices are expected to be waiting too,
  // and returns the report: each device's state, the wait-for graph and a
  // cycle when there is one. `first` is set when this process is the first
  // of the job to report (it prints the report).
  std::string Report(int self_device, int64_t since_ns, absl::Duration grace);
  // True for the first caller in the whole job (a marker file beside the
  // boards); only it prints the mesh-wide report.
  bool ClaimFirst();
  // Rank 0, after a failed Run was recovered from (nobody can claim
  // meanwhile): the next timeout is the first again, and the saved report
  // is removed.
  void ForgetFirst();
  // The first process saves its report beside the boards before it tells
  // the others of the failure, so that each process's Status can carry the
  // mesh-wide picture (where the boards' directory is shared: always on one
  // host).
  void SaveReport(const std::string& report);
  // The saved report, waiting up to `wait` for it; empty when none.
  std::string SavedReport(absl::Duration wait);

 private:
  std::string PathOf(int rank) const;
  // Every process's board, read again every 20 ms for up to `grace` until
  // each process of `host` (this host) has written it since `since_ns` or
  // is no longer running; a board missing then is null.
  std::vector<std::optional<ProcessHangState>> ReadFreshBoards(
      const std::string& host, int64_t since_ns, absl::Duration grace) const;
  std::string ReportPath() const;
  std::string dir_;
  uint64_t tag_;
  int rank_;
  int num_processes_;
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_CHECK_HANG_REPORT_H_
