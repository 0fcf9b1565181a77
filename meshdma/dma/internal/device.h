// A device of this process: its heap, allocation scopes, DMAs in flight, and
// the verbs every public call funnels into. These methods are the single place
// where DMAs, signals and waits happen, and so where the `Observer` sees them.
// They are defined by concern: device.cc (identity, the mesh of the current
// Run), device_allocation.cc, device_dma.cc, device_semaphores.cc,
// device_barrier.cc, device_peer_memory.cc and device_recovery.cc; the state
// of the heap and its scopes, the in-flight list, the hang notes and the wait
// policy are classes of their own (device_heap.h, inflight_dmas.h,
// hang_notes.h, wait_policy.h).
#ifndef MESHDMA_DMA_INTERNAL_DEVICE_H_
#define MESHDMA_DMA_INTERNAL_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/dma/check/hang_report.h"
#include "meshdma/dma/internal/allocation_log.h"
#include "meshdma/dma/internal/call_note.h"
#include "meshdma/dma/internal/device_heap.h"
#include "meshdma/dma/internal/hang_notes.h"
#include "meshdma/dma/internal/inflight_dmas.h"
#include "meshdma/dma/observer.h"
#include "meshdma/dma/semaphore.h"
#include "meshdma/dma/transport/transport.h"
#include "meshdma/topology/mesh.h"

namespace meshdma::dma_internal {

class RuntimeImpl;

class Device {
 public:
  Device(RuntimeImpl* runtime, int global_index, int local_index,
         std::byte* heap_base, int64_t heap_bytes);

  int global_index() const { return global_index_; }
  int local_index() const { return local_index_; }
  RuntimeImpl* runtime() const { return runtime_; }
  std::byte* heap_base() const { return heap_.base(); }
  int64_t heap_bytes() const { return heap_.bytes(); }
  // "device 3 (rank 1, local 1)".
  std::string Name() const;

  // --- Mesh context while `Runtime::Run` executes on this device.
  void EnterRun(const Mesh* mesh, int logical_id);
  void ExitRun();
  absl::StatusOr<const Mesh*> mesh() const;
  int logical_id() const { return logical_id_; }
  // Resolves a device id on the current mesh to a global device index.
  absl::StatusOr<int> ResolveTarget(const DeviceId& id, DeviceIdType type,
                                    absl::string_view what) const;

  // --- Symmetric allocation (stack of scopes), over the heap
  // (device_heap.h), with the race checker told.
  absl::StatusOr<ArrayRef> Allocate(DType dtype,
                                    std::span<const int64_t> shape);
  absl::StatusOr<int64_t> AllocateSemaphores(SemaphoreType type, int count,
                                             absl::string_view name);
  int64_t bytes_free() const { return heap_.bytes_free(); }
  // `PadSymmetricHeapTo`: raises the heap top to `offset` (rounded up to 64)
  // when it is lower; no record in the allocation log.
  absl::Status PadHeapTo(int64_t offset);
  void PushScope(std::string kernel_name, std::optional<int> collective_id) {
    heap_.PushScope(std::move(kernel_name), collective_id);
  }
  // Checks the exit contract of the innermost scope, drains this device's
  // DMAs and frees the scope. Returns the contract violation, if any.
  absl::Status PopScope();
  std::optional<int> collective_id() const { return heap_.collective_id(); }
  // The innermost open scope's kernel name ("" outside every scope).
  absl::string_view kernel_name() const { return heap_.kernel_name(); }

  // --- Persistent symmetric memory: allocated from the top of the heap down,
  // in the same order on every device of the mesh, for the rest of the
  // current `Runtime::Run`; outside every kernel scope and its exit contract.
  absl::StatusOr<ArrayRef> AllocatePersistent(DType dtype,
                                              std::span<const int64_t> shape,
                                              absl::string_view name);
  absl::StatusOr<int64_t> AllocatePersistentSemaphores(SemaphoreType type,
                                                       int count,
                                                       absl::string_view name);
  void AtRunExit(std::function<absl::Status()> fn);
  void AtRunEnd(std::function<void()> fn);
  // At the end of a Run, on the device's thread: runs the `AtRunExit`
  // functions (latest first) when `run_hooks`, checks that every persistent
  // semaphore is back to 0, and runs the `AtRunEnd` functions (latest first,
  // always).
  absl::Status ReleasePersistent(bool run_hooks);
  // After every local device has finished a Run that did not fail: zeroes
  // and releases the persistent memory. Not on the device's thread, once no
  // local device can still write into it (a peer's flagged copy or DMA may
  // otherwise land while it is zeroed); after a failed Run the recovery
  // zeroes it instead (`ResetAfterFailure`), once every DMA has drained.
  void ZeroPersistent();

  // --- Recovery after a failed Run. The heap this device has used since the
  // last reset: [0, touched_top) and [touched_bottom, heap_bytes).
  int64_t touched_top() const { return heap_.touched_top(); }
  int64_t touched_bottom() const { return heap_.touched_bottom(); }
  // Between Runs, once no DMA or signal of any process can still land in
  // this heap: zeroes [0, zero_top) (the reserved semaphores included) and
  // [zero_bottom, heap_bytes), and forgets every scope, persistent
  // allocation, exit function and diagnostic of earlier Runs.
  void ResetAfterFailure(int64_t zero_top, int64_t zero_bottom);

  // --- The verbs.
  // `eager`: copies this process makes are made now, whatever the DMA mode
  // (AsyncCopyDescriptor::start_eager). `validated`: the same operands
  // passed StartDma's checks on this device at the current `dma_epoch()`
  // (see there), which are then not made again.
  absl::Status StartDma(const ArrayRef& src, const ArrayRef& dst,
                        Semaphore send_sem, Semaphore recv_sem,
                        std::optional<int> target_global, bool eager = false,
                        bool validated = false);
  // Changes whenever a DMA's operands that passed StartDma's checks could
  // stop passing them: when a scope closes (its semaphores die) and when a
  // Run begins or ends (the mesh; the persistent semaphores, which live
  // until the Run is over, and whatever a failed Run's recovery resets,
  // both between Runs, where no DMA starts). Checks of semaphores among the
  // reserved cells (device-barrier rounds) depend on more and are never
  // skipped.
  uint64_t dma_epoch() const { return dma_epoch_; }
  // StartDma's checks of its operands: shapes and types, live DMA
  // semaphores of this device, views inside the heap.
  absl::Status CheckDma(const ArrayRef& src, const ArrayRef& dst,
                        Semaphore send_sem, Semaphore recv_sem,
                        bool remote) const;
  absl::Status Signal(Semaphore sem, int64_t inc,
                      std::optional<int> target_global);
  absl::Status Wait(Semaphore sem, int64_t value, WaitKind kind);
  // Copies `src` into `dst` on this thread: contiguous views of the same
  // byte size (they may overlap), or strided views of the same shape and
  // dtype (they may not). While messages to or from other hosts are in
  // flight it copies in pieces and progresses them in between: MPI moves a
  // message only while somebody polls, and a device that copies a large
  // block without polling stalls its own transfers for as long.
  void CopyLocal(const ArrayRef& src, const ArrayRef& dst);
  absl::StatusOr<int64_t> Read(Semaphore sem);
  // The device barrier over the current mesh. Its signals also carry the
  // devices' symmetric allocation hashes: when they differ, every device
  // completes the barrier and fails with an error naming the first
  // allocation that differs (docs/semantics.md §1).
  absl::Status Barrier();
  // The barrier that also compares `value` across the mesh: true when every
  // device passed the same (a 30-bit fingerprint of value and allocations),
  // false on every device when some differ; allocations that differ are
  // still the error above. A device in `Barrier()` meeting devices that
  // compare a value fails, naming the barrier.
  absl::StatusOr<bool> BarrierComparing(std::optional<uint64_t> value);
  const AllocationLog& allocations() const { return heap_.allocations(); }

  // --- Flagged copies (dma/flagged_copy.h).
  // True when this device may store into `target_global`'s heap: it is
  // addressable from this process and checked mode is off.
  bool FlaggedReaches(int target_global) const;
  // True when `target_global` is a device of this process and checked mode
  // is off: any memory of this device is at the same address there.
  bool SharesAddressSpace(int target_global) const;
  // The address of `words` (a view of this device's heap) on
  // `target_global` (this device when unset), after checking the view holds
  // `count` aligned words of the user heap, `flag` is nonzero and the target
  // is reachable.
  absl::StatusOr<uint64_t*> FlaggedDestination(
      const ArrayRef& words, int64_t count, uint32_t flag,
      std::optional<int> target_global) const;
  // The address on `target_global` of `view` (a symmetric view of this
  // device's heap, checked as a DMA checks it), for peer_view.h. The target
  // must be reachable (`FlaggedReaches`); `verb` names the caller in errors.
  absl::StatusOr<std::byte*> PeerAddress(const ArrayRef& view,
                                         int target_global,
                                         absl::string_view verb) const;
  // Polls until each of the `count` words at `words` carries `flag` in its
  // high half; the runtime's wait timeout and abort apply. `view` names the
  // buffer in errors.
  absl::Status WaitFlags(const uint64_t* words, int64_t count, uint32_t flag,
                         const ArrayRef& view);
  // Polls until the word at `counter` holds at least `value` (an acquire);
  // the runtime's wait timeout and abort apply. `view` names it in errors.
  absl::Status WaitCounter(const uint64_t* counter, uint64_t value,
                           const ArrayRef& view);

  // Called by transports when `op`'s source has been read (and, on direct
  // paths, its destination written and `op->recv_cell` is to be signalled).
  void CompleteDma(std::unique_ptr<DmaOp> op);
  // `op` never completes (TransportHost::AbandonDma): it leaves the
  // in-flight list and no semaphore moves.
  void AbandonDma(std::unique_ptr<DmaOp> op);
  // Hands a started DMA to the copy engine or its transport (the DMA
  // execution mode's policy; `eager` keeps it from the copy engine).
  void Dispatch(std::unique_ptr<DmaOp> op, bool eager);
  // Lists `op` as in flight (hang reports, scope drains) until CompleteDma.
  void TrackInflight(DmaOp* op);

  // One line about what this device is blocked on, for diagnostics.
  std::string BlockedOn();
  // What this device waits on and last sent to each peer (the hang report).
  DeviceHangState HangState();
  // The DMAs this device started (in scopes at depth >= `min_depth`) that
  // have not completed.
  std::string DescribeInflight(int min_depth = 0);
  size_t num_inflight(int min_depth = 0);

  SemaphoreCell* CellAt(int64_t heap_offset) const {
    return heap_.CellAt(heap_offset);
  }
  // This device's call note, which peers that map its heap read.
  CallNote* call_note() const {
    return reinterpret_cast<CallNote*>(heap_.base() + kCallNoteOffset);
  }
  // "'recv' DMA semaphore @14336": the name the allocation gave (this
  // device's scopes; symmetric, so every device's), its type and offset.
  // Call on this device's thread.
  std::string SemaphoreName(Semaphore sem) const {
    return heap_.SemaphoreName(sem);
  }
  // SemaphoreName plus the current count.
  std::string DescribeSemaphore(Semaphore sem) const {
    return heap_.DescribeSemaphore(sem);
  }

 private:
  absl::Status CheckSemaphore(Semaphore sem, absl::string_view verb) const;
  // InvalidArgument unless `ref` (symmetric) is this device's address of its
  // heap offset and lies in the heap's user part; `role` names it.
  absl::Status CheckHeapView(const ArrayRef& ref, absl::string_view role,
                             absl::string_view verb) const;
  // Waits for `value` on `cell` (the cell of `sem`) by the wait policy
  // (wait_policy.h): Aborted when the launch aborts, DeadlineExceeded with
  // the hang report at the wait timeout.
  absl::Status WaitCell(SemaphoreCell* cell, int64_t value, WaitKind kind,
                        Semaphore sem);
  absl::Status TimeoutError(SemaphoreCell* cell, int64_t value, WaitKind kind,
                            Semaphore sem, int64_t since_ns);
  // One dissemination barrier over `mesh` that also folds every device's
  // (lo, hi) fingerprint range into `*lo`, `*hi`.
  absl::Status Disseminate(const Mesh& mesh, uint64_t* lo, uint64_t* hi);
  // The error of a barrier that found differing allocation hashes.
  absl::Status AllocationMismatch(const Mesh& mesh) const;
  // Tells the race checker that [offset, offset + bytes) was allocated.
  void NoteAllocated(int64_t offset, int64_t bytes, absl::string_view what);
  // Waits until no DMA started at scope depth >= `min_depth` is in flight.
  absl::Status DrainInflight(int min_depth);

  RuntimeImpl* const runtime_;
  const int global_index_;
  const int local_index_;
  DeviceHeap heap_;
  std::vector<std::function<absl::Status()>> run_exit_;
  std::vector<std::function<void()>> run_end_;
  const Mesh* mesh_ = nullptr;
  // See dma_epoch(). Drawn from one counter of the process, so that no two
  // devices, or Runtimes, ever hold the same value.
  uint64_t dma_epoch_ = 0;
  void NewDmaEpoch();
  int logical_id_ = -1;
  int64_t barrier_epoch_ = 0;  // Barriers in this Run (picks the cell set).
  // True while `Barrier` runs: only then are device-barrier cells accepted.
  bool in_device_barrier_ = false;

  InflightDmas inflight_;
  HangNotes hang_notes_;
};

// The device whose thread is calling, or null outside `Runtime::Run`.
Device* CurrentDevice();
void SetCurrentDevice(Device* device);
// CurrentDevice() or FailedPrecondition naming `verb`.
absl::StatusOr<Device*> RequireDevice(absl::string_view verb);

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_INTERNAL_DEVICE_H_
