// The verbs. Every DMA, signal and wait of the runtime is performed here, and
// reported to the runtime's `Observer` here.
#include "meshdma/dma/internal/device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "meshdma/base/checked_math.h"
#include "meshdma/base/deadline.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/check/race_checker.h"
#include "meshdma/dma/internal/runtime_impl.h"

namespace meshdma::dma_internal {
namespace {

thread_local Device* tls_device = nullptr;

// Zeroes [p, p + n) of a heap. The whole pages of a large range go back to
// the kernel instead of being written, which is as fast for a gigabyte as
// for a page and also returns their memory: MADV_REMOVE punches them out of
// a shared segment (every process's mapping then reads zeros),
// MADV_DONTNEED drops them from the private anonymous mapping of a process
// alone (the only other kind of heap; the kernel refuses MADV_REMOVE there).
void ZeroHeapRange(std::byte* p, int64_t n) {
  constexpr int64_t kReleaseBytes = int64_t{4} << 20;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin =
      (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
  if (n < kReleaseBytes || end <= begin) {
    std::memset(p, 0, n);
    return;
  }
  std::memset(p, 0, begin - reinterpret_cast<uintptr_t>(p));
  std::memset(reinterpret_cast<std::byte*>(end), 0,
              reinterpret_cast<uintptr_t>(p) + n - end);
  void* const middle = reinterpret_cast<void*>(begin);
  if (madvise(middle, end - begin, MADV_REMOVE) == 0) return;
  if (errno == EINVAL && madvise(middle, end - begin, MADV_DONTNEED) == 0) {
    return;
  }
  std::memset(middle, 0, end - begin);
}

// After spinning for `RuntimeOptions::spin_ns` (`remote_spin_ns` in a launch
// with devices on other hosts), a wait sleeps in slices so
// that aborts and deadlines are noticed.
constexpr int64_t kSleepSliceNanos = 10'000'000;

absl::string_view WaitVerb(WaitKind kind) {
  switch (kind) {
    case WaitKind::kSemaphore:
      return "semaphore_wait";
    case WaitKind::kDmaSend:
      return "wait_send";
    case WaitKind::kDmaRecv:
      return "wait_recv";
    case WaitKind::kBarrier:
      return "device barrier";
  }
  return "wait";
}

// The byte range a view touches relative to element 0. Cannot fail: every
// ArrayRef was checked on construction to span a range that fits in int64.
base_internal::ByteExtent Extent(const ArrayRef& ref) {
  return base_internal::CheckedByteExtent(
             ref.shape(), ref.strides(),
             static_cast<int64_t>(DTypeSize(ref.dtype())))
      .value_or(base_internal::ByteExtent{});
}

}  // namespace

Device* CurrentDevice() { return tls_device; }
void SetCurrentDevice(Device* device) { tls_device = device; }

absl::StatusOr<Device*> RequireDevice(absl::string_view verb) {
  if (tls_device == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        verb,
        " called outside Runtime::Run: no current device (create a "
        "meshdma::Runtime and call it from the function passed to Run)"));
  }
  return tls_device;
}

Device::Device(RuntimeImpl* runtime, int global_index, int local_index,
               std::byte* heap_base, int64_t heap_bytes)
    : runtime_(runtime),
      global_index_(global_index),
      local_index_(local_index),
      heap_base_(heap_base),
      heap_bytes_(heap_bytes),
      persistent_bottom_(heap_bytes),
      touched_bottom_(heap_bytes) {
  num_devices_ = runtime_->launch().num_devices();
  last_sent_sem_.reset(new std::atomic<int64_t>[num_devices_]);
  last_sent_ns_.reset(new std::atomic<int64_t>[num_devices_]);
  for (int i = 0; i < num_devices_; ++i) {
    last_sent_sem_[i].store(-1, std::memory_order_relaxed);
    last_sent_ns_[i].store(0, std::memory_order_relaxed);
  }
  NewDmaEpoch();
}

void Device::NoteSent(int target, int64_t sem_offset) {
  last_sent_sem_[target].store(sem_offset, std::memory_order_relaxed);
  last_sent_ns_[target].store(base_internal::CoarseMonotonicNanos(),
                              std::memory_order_relaxed);
}

DeviceHangState Device::HangState() {
  DeviceHangState s;
  s.device = global_index_;
  {
    std::lock_guard<std::mutex> lock(blocked_mu_);
    s.waiting = !blocked_on_.empty();
    if (s.waiting) {
      s.verb = std::string(blocked_verb_);
      std::replace(s.verb.begin(), s.verb.end(), ' ', '_');
      s.sem_offset = blocked_sem_.heap_offset();
      s.sem_name = SemaphoreName(blocked_sem_);
      s.expected = blocked_value_;
      s.current = CellAt(s.sem_offset)->count.load(std::memory_order_relaxed);
    }
  }
  s.inflight = DescribeInflight();
  s.last_sent_sem.resize(num_devices_);
  s.last_sent_ns.resize(num_devices_);
  for (int i = 0; i < num_devices_; ++i) {
    s.last_sent_sem[i] = last_sent_sem_[i].load(std::memory_order_relaxed);
    s.last_sent_ns[i] = last_sent_ns_[i].load(std::memory_order_relaxed);
  }
  return s;
}

std::string Device::Name() const {
  return absl::StrCat("device ", global_index_, " (rank ",
                      runtime_->launch().rank(), ", local ", local_index_, ")");
}

void Device::NewDmaEpoch() {
  static std::atomic<uint64_t> next{1};
  dma_epoch_ = next.fetch_add(1, std::memory_order_relaxed);
}

void Device::EnterRun(const Mesh* mesh, int logical_id) {
  NewDmaEpoch();
  mesh_ = mesh;
  logical_id_ = logical_id;
  barrier_epoch_ = 0;
  allocations_.Reset();
  PushScope("Run", std::nullopt);
}

void Device::ExitRun() {
  NewDmaEpoch();
  mesh_ = nullptr;
  logical_id_ = -1;
}

absl::StatusOr<const Mesh*> Device::mesh() const {
  if (mesh_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(Name(), " is not running a mesh function"));
  }
  return mesh_;
}

absl::StatusOr<int> Device::ResolveTarget(const DeviceId& id, DeviceIdType type,
                                          absl::string_view what) const {
  MESHDMA_ASSIGN_OR_RETURN(const Mesh* mesh, this->mesh());
  auto logical = mesh->Resolve(logical_id_, id, type);
  if (!logical.ok()) {
    return absl::Status(
        logical.status().code(),
        absl::StrCat(what, " on ", Name(), ": ", logical.status().message()));
  }
  return mesh->GlobalDevice(*logical);
}

// --- Allocation -------------------------------------------------------------

void Device::PushScope(std::string kernel_name,
                       std::optional<int> collective_id) {
  scopes_.push_back(Scope{heap_top_,
                          std::move(kernel_name),
                          collective_id,
                          {},
                          allocations_.mark()});
}

std::optional<int> Device::collective_id() const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    if (it->collective_id.has_value()) return it->collective_id;
  }
  return std::nullopt;
}

absl::StatusOr<ArrayRef> Device::Allocate(DType dtype,
                                          std::span<const int64_t> shape) {
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllocateSymmetric on ", Name(), ": rank ", shape.size(),
                     " exceeds the maximum ", kMaxRank));
  }
  if (!IsValidDType(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllocateSymmetric on ", Name(), ": invalid dtype ",
                     static_cast<int>(dtype), " for shape [",
                     absl::StrJoin(shape, ","), "]"));
  }
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("AllocateSymmetric on ", Name(), ": negative dimension ",
                       d, " in shape [", absl::StrJoin(shape, ","), "]"));
    }
  }
  if (scopes_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("AllocateSymmetric on ", Name(), ": no open scope"));
  }
  // Elements, bytes and the 64-byte rounding, each checked for overflow.
  const std::optional<int64_t> elements = base_internal::CheckedProduct(shape);
  const std::optional<int64_t> bytes_or =
      elements.has_value()
          ? base_internal::CheckedMul(*elements,
                                      static_cast<int64_t>(DTypeSize(dtype)))
          : std::nullopt;
  const std::optional<int64_t> padded =
      bytes_or.has_value() ? base_internal::CheckedAdd(*bytes_or, 63)
                           : std::nullopt;
  if (!padded.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllocateSymmetric on ", Name(), ": shape ",
                     DTypeName(dtype), "[", absl::StrJoin(shape, ","),
                     "] has a size in bytes that overflows int64"));
  }
  const int64_t bytes = *bytes_or;
  const int64_t aligned = *padded & ~int64_t{63};
  if (aligned > persistent_bottom_ - heap_top_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "symmetric heap of ", Name(), " exhausted: request ", DTypeName(dtype),
        "[", absl::StrJoin(shape, ","), "] needs ", bytes, " bytes, ",
        persistent_bottom_ - heap_top_, " of ", heap_bytes_,
        " bytes left (raise RuntimeOptions::heap_bytes or "
        "MESHDMA_HEAP_BYTES)"));
  }
  const int64_t offset = heap_top_;
  heap_top_ += aligned;
  touched_top_ = std::max(touched_top_, heap_top_);
  allocations_.NoteArray(offset, aligned, dtype, shape, /*persistent=*/false);
  if (RaceChecker* rc = runtime_->race_checker()) {
    rc->OnAllocate(global_index_, offset, aligned, scopes_.back().kernel_name);
  }
  // Free heap memory is always zero (scopes zero what they free), so the new
  // array starts zeroed without touching it here.
  return ArrayRef::Symmetric(heap_base_ + offset, offset, dtype, shape);
}

absl::Status Device::PadHeapTo(int64_t offset) {
  if (scopes_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("PadSymmetricHeapTo on ", Name(), ": no open scope"));
  }
  const int64_t aligned =
      offset > heap_bytes_ ? offset : (offset + 63) & ~int64_t{63};
  if (aligned <= heap_top_) return absl::OkStatus();
  if (aligned > persistent_bottom_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "symmetric heap of ", Name(), " exhausted: padding to heap offset ",
        offset, " needs ", aligned - heap_top_, " bytes, ",
        persistent_bottom_ - heap_top_, " of ", heap_bytes_,
        " bytes left (raise RuntimeOptions::heap_bytes or "
        "MESHDMA_HEAP_BYTES)"));
  }
  if (RaceChecker* rc = runtime_->race_checker()) {
    rc->OnAllocate(global_index_, heap_top_, aligned - heap_top_,
                   scopes_.back().kernel_name);
  }
  heap_top_ = aligned;
  touched_top_ = std::max(touched_top_, heap_top_);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Device::AllocateSemaphores(SemaphoreType type,
                                                   int count,
                                                   absl::string_view name) {
  if (!IsValidSemaphoreType(type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("semaphore array '", name, "' on ", Name(),
                     ": invalid semaphore type ", static_cast<int>(type)));
  }
  if (count < 1) {
    return absl::InvalidArgumentError(absl::StrCat("semaphore array '", name,
                                                   "' on ", Name(), ": size ",
                                                   count, " must be >= 1"));
  }
  const int64_t shape[] = {count * kSemaphoreBytes};
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef bytes, Allocate(DType::kU8, shape));
  allocations_.MarkSemaphores(type, count);
  scopes_.back().semaphores.push_back(
      SemaphoreRecord{bytes.heap_offset(), count, type, std::string(name)});
  return bytes.heap_offset();
}

absl::StatusOr<ArrayRef> Device::AllocatePersistent(
    DType dtype, std::span<const int64_t> shape, absl::string_view name) {
  if (mesh_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("AllocatePersistent('",
                                                      name, "') on ", Name(),
                                                      " outside Runtime::Run"));
  }
  int64_t bytes = static_cast<int64_t>(DTypeSize(dtype));
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && bytes > (int64_t{1} << 40) / d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("AllocatePersistent('", name, "') on ", Name(),
                       ": bad shape [", absl::StrJoin(shape, ","), "]"));
    }
    bytes *= d;
  }
  const int64_t aligned = (bytes + 63) & ~int64_t{63};
  if (aligned > persistent_bottom_ - heap_top_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "symmetric heap of ", Name(), " exhausted: persistent '", name, "' ",
        DTypeName(dtype), "[", absl::StrJoin(shape, ","), "] needs ", bytes,
        " bytes, ", persistent_bottom_ - heap_top_, " of ", heap_bytes_,
        " bytes left (raise RuntimeOptions::heap_bytes or "
        "MESHDMA_HEAP_BYTES)"));
  }
  persistent_bottom_ -= aligned;
  touched_bottom_ = std::min(touched_bottom_, persistent_bottom_);
  allocations_.NoteArray(persistent_bottom_, aligned, dtype, shape,
                         /*persistent=*/true);
  if (RaceChecker* rc = runtime_->race_checker()) {
    rc->OnAllocate(global_index_, persistent_bottom_, aligned,
                   absl::StrCat("persistent '", name, "'"));
  }
  // Persistent memory is zero when the Run starts (ReleasePersistent zeroes
  // what the previous Run used).
  return ArrayRef::Symmetric(heap_base_ + persistent_bottom_,
                             persistent_bottom_, dtype, shape);
}

absl::StatusOr<int64_t> Device::AllocatePersistentSemaphores(
    SemaphoreType type, int count, absl::string_view name) {
  if (count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("persistent semaphore array '", name, "' on ", Name(),
                     ": size ", count, " must be >= 1"));
  }
  const int64_t shape[] = {count * kSemaphoreBytes};
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef bytes,
                           AllocatePersistent(DType::kU8, shape, name));
  allocations_.MarkSemaphores(type, count);
  persistent_semaphores_.push_back(
      SemaphoreRecord{bytes.heap_offset(), count, type, std::string(name)});
  return bytes.heap_offset();
}

void Device::AtRunExit(std::function<absl::Status()> fn) {
  run_exit_.push_back(std::move(fn));
}

void Device::AtRunEnd(std::function<void()> fn) {
  run_end_.push_back(std::move(fn));
}

absl::Status Device::ReleasePersistent(bool run_hooks) {
  std::vector<std::string> problems;
  for (auto it = run_exit_.rbegin(); run_hooks && it != run_exit_.rend();
       ++it) {
    absl::Status s = (*it)();
    if (!s.ok()) problems.push_back(std::string(s.message()));
  }
  run_exit_.clear();
  if (run_hooks && problems.empty()) {
    for (const SemaphoreRecord& rec : persistent_semaphores_) {
      for (int i = 0; i < rec.count; ++i) {
        const Semaphore sem(rec.offset + i * kSemaphoreBytes, rec.type);
        const int64_t count =
            CellAt(sem.heap_offset())->count.load(std::memory_order_acquire);
        if (count != 0) {
          problems.push_back(absl::StrCat(DescribeSemaphore(sem), " is ", count,
                                          ", expected 0"));
        }
      }
    }
  }
  for (auto it = run_end_.rbegin(); it != run_end_.rend(); ++it) (*it)();
  run_end_.clear();
  if (problems.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("persistent state of ", Name(),
                   " at the end of Run: ", absl::StrJoin(problems, "; ")));
}

void Device::ZeroPersistent() {
  for (const SemaphoreRecord& rec : persistent_semaphores_) {
    for (int i = 0; i < rec.count; ++i) {
      CellQuiesce(CellAt(rec.offset + i * kSemaphoreBytes));
    }
  }
  persistent_semaphores_.clear();
  ZeroHeapRange(heap_base_ + persistent_bottom_,
                heap_bytes_ - persistent_bottom_);
  persistent_bottom_ = heap_bytes_;
}

void Device::ResetAfterFailure(int64_t zero_top, int64_t zero_bottom) {
  // Step 1: the heap. Late DMAs and signals of the failed Run may have landed
  // in memory already freed (and zeroed), and device-barrier or collective-id
  // cells may hold counts nobody consumed.
  zero_top = std::clamp(zero_top, kReservedHeapBytes, heap_bytes_);
  zero_bottom = std::clamp(zero_bottom, zero_top, heap_bytes_);
  std::memset(heap_base_, 0, zero_top);
  std::memset(heap_base_ + zero_bottom, 0, heap_bytes_ - zero_bottom);
  // Step 2: allocation state, as at start-up.
  scopes_.clear();
  persistent_semaphores_.clear();
  run_exit_.clear();
  run_end_.clear();
  heap_top_ = kReservedHeapBytes;
  persistent_bottom_ = heap_bytes_;
  touched_top_ = kReservedHeapBytes;
  touched_bottom_ = heap_bytes_;
  barrier_epoch_ = 0;
  in_device_barrier_ = false;
  // Step 3: diagnostics that describe the failed Run.
  {
    std::lock_guard<std::mutex> lock(blocked_mu_);
    blocked_on_.clear();
  }
  for (int i = 0; i < num_devices_; ++i) {
    last_sent_sem_[i].store(-1, std::memory_order_relaxed);
    last_sent_ns_[i].store(0, std::memory_order_relaxed);
  }
}

absl::Status Device::PopScope() {
  NewDmaEpoch();  // The scope's semaphores die.
  Scope& scope = scopes_.back();
  // Only DMAs started in this scope (or deeper) belong to it: an enclosing
  // kernel may legitimately have copies in flight around a nested one.
  const int depth = static_cast<int>(scopes_.size()) - 1;
  std::vector<std::string> violations;
  if (num_inflight(depth) != 0) {
    violations.push_back(
        absl::StrCat("DMAs still in flight: ", DescribeInflight(depth)));
  }
  absl::Status drained = DrainInflight(depth);
  if (!drained.ok()) violations.push_back(std::string(drained.message()));
  if (RaceChecker* rc = runtime_->race_checker();
      rc != nullptr && drained.ok()) {
    rc->OnDrained(global_index_);
  }
  for (const SemaphoreRecord& rec : scope.semaphores) {
    for (int i = 0; i < rec.count; ++i) {
      const Semaphore sem(rec.offset + i * kSemaphoreBytes, rec.type);
      const int64_t count =
          CellAt(sem.heap_offset())->count.load(std::memory_order_acquire);
      if (count != 0) {
        violations.push_back(absl::StrCat(DescribeSemaphore(sem), " is ", count,
                                          ", expected 0"));
      }
    }
  }
  // Keep free memory zero: the next allocation starts from zeros. No signal
  // may still be finishing on a cell about to be zeroed. Once the Run has
  // failed (here, or anywhere), peers' late DMAs and signals may still land
  // here: the recovery zeroes the memory instead, after they have drained.
  if (violations.empty() && !runtime_->aborted()) {
    for (const SemaphoreRecord& rec : scope.semaphores) {
      for (int i = 0; i < rec.count; ++i) {
        CellQuiesce(CellAt(rec.offset + i * kSemaphoreBytes));
      }
    }
    std::memset(heap_base_ + scope.heap_mark, 0, heap_top_ - scope.heap_mark);
  }
  if (RaceChecker* rc = runtime_->race_checker()) {
    rc->OnFree(global_index_, scope.heap_mark, heap_top_);
  }
  heap_top_ = scope.heap_mark;
  allocations_.Rewind(scope.allocations);
  const std::string kernel = scope.kernel_name;
  scopes_.pop_back();
  if (violations.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("exit contract of '", kernel, "' violated on ", Name(), ": ",
                   absl::StrJoin(violations, "; ")));
}

// --- DMA
// ----------------------------------------------------------------------

absl::Status Device::CheckSemaphore(Semaphore sem,
                                    absl::string_view verb) const {
  if (!sem.valid()) {
    return absl::InvalidArgumentError(
        absl::StrCat(verb, " on ", Name(), ": semaphore was never allocated"));
  }
  const int64_t off = sem.heap_offset();
  if (!IsValidSemaphoreType(sem.type())) {
    return absl::InvalidArgumentError(
        absl::StrCat(verb, " on ", Name(), ": semaphore @", off,
                     " has invalid type ", static_cast<int>(sem.type())));
  }
  if (off < 0 || off > heap_bytes_ - kSemaphoreBytes ||
      off % kSemaphoreBytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        verb, " on ", Name(), ": ", sem.ToString(),
        " is not a semaphore of a heap of ", heap_bytes_, " bytes"));
  }
  // A handle is accepted only where it names a semaphore this device knows:
  // a device-barrier round inside `device_barrier`, the per-collective-id
  // BARRIER semaphore, or a live allocation of the same type.
  if (off < kCollectiveCellsOffset) {
    if (in_device_barrier_) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        verb, " on ", Name(), ": ", sem.ToString(),
        " is a reserved device-barrier cell; use device_barrier()"));
  }
  if (off < kReservedHeapBytes) {
    if (sem.type() == SemaphoreType::kBarrier) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(verb, " on ", Name(), ": ", sem.ToString(),
                     " is the reserved BARRIER semaphore of collective id ",
                     (off - kCollectiveCellsOffset) / kSemaphoreBytes,
                     "; get it from get_barrier_semaphore()"));
  }
  auto holds = [off](const SemaphoreRecord& rec) {
    return off >= rec.offset && off < rec.offset + rec.count * kSemaphoreBytes;
  };
  auto matched = [&](const SemaphoreRecord& rec) -> absl::Status {
    if (rec.type != sem.type()) {
      return absl::InvalidArgumentError(
          absl::StrCat(verb, " on ", Name(), ": ", sem.ToString(), " names ",
                       DescribeSemaphore(Semaphore(off, rec.type)),
                       ", allocated as ", SemaphoreTypeName(rec.type)));
    }
    return absl::OkStatus();
  };
  auto check_in = [&](const std::vector<SemaphoreRecord>& records,
                      size_t* hint) -> std::optional<absl::Status> {
    if (hint != nullptr && *hint < records.size() && holds(records[*hint])) {
      return matched(records[*hint]);
    }
    for (size_t i = 0; i < records.size(); ++i) {
      if (!holds(records[i])) continue;
      if (hint != nullptr) *hint = i;
      return matched(records[i]);
    }
    return std::nullopt;
  };
  if (off >= persistent_bottom_) {
    if (auto s = check_in(persistent_semaphores_, &persistent_hint_)) {
      return *s;
    }
  } else {
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
      if (auto s = check_in(scope->semaphores, nullptr)) return *s;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      verb, " on ", Name(), ": ", sem.ToString(),
      " is not a live semaphore (not allocated, or its scope has closed)"));
}

// A symmetric view (always the destination of a remote copy) must be this
// device's address of its heap offset and lie wholly in the user part of the
// heap: a forged or overflowing view must not reach the reserved semaphore
// cells, or bytes outside any heap.
absl::Status Device::CheckHeapView(const ArrayRef& ref, absl::string_view role,
                                   absl::string_view verb) const {
  auto error = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(
        verb, " on ", Name(), ": ", role, " ", ref.ToString(), parts...));
  };
  const base_internal::ByteExtent e = Extent(ref);
  const std::optional<int64_t> lo =
      base_internal::CheckedAdd(ref.heap_offset(), e.lo);
  const std::optional<int64_t> hi =
      base_internal::CheckedAdd(ref.heap_offset(), e.hi);
  if (ref.data() != heap_base_ + ref.heap_offset()) {
    return error(" claims heap offset ", ref.heap_offset(),
                 " but its address is not that offset of this device's heap");
  }
  if (e.hi > e.lo && (!lo.has_value() || !hi.has_value() ||
                      *lo < kReservedHeapBytes || *hi > heap_bytes_)) {
    return error(" at heap offset ", ref.heap_offset(),
                 " spans bytes outside [", kReservedHeapBytes, ", ",
                 heap_bytes_, "), the user part of the symmetric heap");
  }
  return absl::OkStatus();
}

absl::Status Device::CheckDma(const ArrayRef& src, const ArrayRef& dst,
                              Semaphore send_sem, Semaphore recv_sem,
                              bool remote) const {
  const absl::string_view verb =
      remote ? "make_async_remote_copy" : "make_async_copy";
  auto error = [&](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat(verb, " on ", Name(), ": ", parts...));
  };
  if (src.data() == nullptr) return error("src is an empty ref");
  if (dst.data() == nullptr) return error("dst is an empty ref");
  if (src.dtype() != dst.dtype()) {
    return error("src ", src.ToString(), " and dst ", dst.ToString(),
                 " differ in dtype");
  }
  if (!std::equal(src.shape().begin(), src.shape().end(), dst.shape().begin(),
                  dst.shape().end())) {
    return error("src ", src.ToString(), " and dst ", dst.ToString(),
                 " differ in shape");
  }
  const Semaphore sems[] = {recv_sem, send_sem};
  for (int i = 0; i < (remote ? 2 : 1); ++i) {
    const absl::string_view role =
        i == 1 ? "send_sem" : (remote ? "recv_sem" : "sem");
    MESHDMA_RETURN_IF_ERROR(CheckSemaphore(sems[i], verb));
    if (sems[i].type() != SemaphoreType::kDma) {
      return error(role, " is a ", sems[i].ToString(),
                   "; DMAs signal DMA semaphores");
    }
  }
  if (remote) {
    if (!dst.is_symmetric()) {
      return error("dst ", dst.ToString(),
                   " is not in the symmetric heap; a remote copy's destination "
                   "must come from AllocateSymmetric");
    }
  }
  const std::pair<const ArrayRef*, absl::string_view> views[] = {{&src, "src"},
                                                                 {&dst, "dst"}};
  for (const auto& [ref, role] : views) {
    if (ref->is_symmetric()) {
      MESHDMA_RETURN_IF_ERROR(CheckHeapView(*ref, role, verb));
    }
  }
  return absl::OkStatus();
}

absl::Status Device::StartDma(const ArrayRef& src, const ArrayRef& dst,
                              Semaphore send_sem, Semaphore recv_sem,
                              std::optional<int> target_global, bool eager,
                              bool validated) {
  const bool remote = target_global.has_value();
  if (!validated) {
    MESHDMA_RETURN_IF_ERROR(CheckDma(src, dst, send_sem, recv_sem, remote));
  }
  auto op = std::make_unique<DmaOp>();
  const int target = remote ? *target_global : global_index_;
  op->event.id = runtime_->NextDmaId();
  op->event.src_device = global_index_;
  op->event.dst_device = target;
  op->event.bytes = src.size_bytes();
  op->event.recv_sem = recv_sem.heap_offset();
  op->event.send_sem = remote ? send_sem.heap_offset() : -1;
  op->issuer = this;
  op->scope_depth = static_cast<int>(scopes_.size()) - 1;
  op->src = src.data();
  op->src_layout = ViewLayout::Of(src);
  op->dst_layout = ViewLayout::Of(dst);
  op->elem_bytes = static_cast<int64_t>(DTypeSize(src.dtype()));
  op->dst_heap_offset = dst.heap_offset();
  if (remote) {
    op->send_cell = CellAt(send_sem.heap_offset());
  } else {
    op->dst = dst.data();  // A local destination need not be symmetric.
    op->recv_cell = CellAt(recv_sem.heap_offset());
  }
  if (Observer* obs = runtime_->observer()) obs->OnDmaStart(op->event);
  NoteSent(target, op->event.recv_sem);
  if (RaceChecker* rc = runtime_->race_checker()) {
    rc->OnDmaStart(global_index_, scopes_.back().kernel_name, *op, src, dst);
  }
  Dispatch(std::move(op), eager);
  return absl::OkStatus();
}

void Device::TrackInflight(DmaOp* op) {
  std::lock_guard<std::mutex> lock(inflight_mu_);
  inflight_.push_back(op);
}

void Device::Dispatch(std::unique_ptr<DmaOp> op, bool eager) {
  // The DMA execution mode (docs/semantics.md §7): in the asynchronous mode a
  // DMA of at least `async_min_bytes` into an addressable heap goes to the
  // copy engine and `start()` returns at once (not `start_eager()`);
  // otherwise the transport moves it now (a direct copy here, or a message
  // on the MPI path).
  Transport* transport = runtime_->TransportTo(op->event.dst_device);
  const bool addressable = transport->MapDestination(*op);
  if (addressable && !eager && runtime_->copy_engine() != nullptr &&
      op->event.bytes >= runtime_->async_min_bytes()) {
    TrackInflight(op.get());
    runtime_->copy_engine()->Submit(std::move(op));
    return;
  }
  // A copy into an addressable heap completes inside Put, on this thread:
  // it is never in flight for anyone else to see, and skips the list.
  if (!addressable) TrackInflight(op.get());
  transport->Put(std::move(op));
}

void Device::LeaveInflight(const DmaOp* op) {
  std::lock_guard<std::mutex> lock(inflight_mu_);
  auto it = std::find(inflight_.begin(), inflight_.end(), op);
  if (it != inflight_.end()) {
    *it = inflight_.back();
    inflight_.pop_back();
  }
}

void Device::CompleteDma(std::unique_ptr<DmaOp> op) {
  // Leave the in-flight list before the semaphores move, so that a device
  // that has waited for this DMA never sees it in flight.
  LeaveInflight(op.get());
  // The observer hears of the completion before any waiter can see it: a
  // wait that returns has been preceded by its DMA's completion event.
  if (Observer* obs = runtime_->observer()) obs->OnDmaComplete(op->event);
  if (op->check_info != nullptr) runtime_->race_checker()->OnDmaComplete(*op);
  if (op->recv_cell != nullptr) CellAdd(op->recv_cell, op->event.bytes);
  if (op->send_cell != nullptr) CellAdd(op->send_cell, op->event.bytes);
}

void Device::AbandonDma(std::unique_ptr<DmaOp> op) { LeaveInflight(op.get()); }

size_t Device::num_inflight(int min_depth) {
  std::lock_guard<std::mutex> lock(inflight_mu_);
  return std::count_if(
      inflight_.begin(), inflight_.end(),
      [&](const DmaOp* op) { return op->scope_depth >= min_depth; });
}

std::string Device::DescribeInflight(int min_depth) {
  std::lock_guard<std::mutex> lock(inflight_mu_);
  std::vector<std::string> parts;
  for (const DmaOp* op : inflight_) {
    if (op->scope_depth < min_depth) continue;
    parts.push_back(
        absl::StrCat("#", op->event.id, " to device ", op->event.dst_device,
                     " (", op->event.bytes, " bytes, ",
                     runtime_->TransportTo(op->event.dst_device)->name(),
                     ", recv_sem @", op->event.recv_sem, ")"));
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, ", ");
}

absl::Status Device::DrainInflight(int min_depth) {
  const base_internal::Deadline deadline =
      base_internal::Deadline::After(runtime_->wait_timeout());
  while (num_inflight(min_depth) != 0) {
    if (runtime_->PollRemote()) continue;
    if (runtime_->copy_engine() == nullptr ||
        !runtime_->copy_engine()->HelpOnce()) {
      if (deadline.Expired()) {
        return absl::DeadlineExceededError(
            absl::StrCat("DMAs of ", Name(), " did not complete within ",
                         absl::FormatDuration(runtime_->wait_timeout()), ": ",
                         DescribeInflight(min_depth)));
      }
      absl::SleepFor(absl::Microseconds(20));
    }
  }
  return absl::OkStatus();
}

// --- Semaphores
// ---------------------------------------------------------------

absl::Status Device::Signal(Semaphore sem, int64_t inc,
                            std::optional<int> target_global) {
  MESHDMA_RETURN_IF_ERROR(CheckSemaphore(sem, "semaphore_signal"));
  if (sem.type() == SemaphoreType::kDma) {
    return absl::InvalidArgumentError(absl::StrCat(
        "semaphore_signal on ", Name(), ": ", DescribeSemaphore(sem),
        " counts bytes and only DMAs add to it"));
  }
  if (inc < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("semaphore_signal on ", Name(), ": increment ", inc,
                     " of ", DescribeSemaphore(sem), " must be >= 1"));
  }
  const int target = target_global.value_or(global_index_);
  if (Observer* obs = runtime_->observer()) {
    obs->OnSignal(global_index_, target, sem, inc);
  }
  // A message to another process carries the clock as it was at the signal.
  std::vector<uint32_t> check_clock;
  if (RaceChecker* rc = runtime_->race_checker()) {
    if (!runtime_->IsLocalDevice(target)) {
      check_clock = rc->ClockOf(global_index_);
    }
    rc->OnSignal(global_index_, target, sem.heap_offset());
  }
  NoteSent(target, sem.heap_offset());
  if (target == global_index_) {
    CellAdd(CellAt(sem.heap_offset()), inc);
  } else {
    runtime_->TransportTo(target)->Signal(target, sem.heap_offset(), inc,
                                          check_clock);
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Device::Read(Semaphore sem) {
  MESHDMA_RETURN_IF_ERROR(CheckSemaphore(sem, "semaphore_read"));
  return CellAt(sem.heap_offset())->count.load(std::memory_order_acquire);
}

absl::Status Device::Wait(Semaphore sem, int64_t value, WaitKind kind) {
  MESHDMA_RETURN_IF_ERROR(CheckSemaphore(sem, WaitVerb(kind)));
  const bool dma_wait =
      kind == WaitKind::kDmaSend || kind == WaitKind::kDmaRecv;
  if (dma_wait != (sem.type() == SemaphoreType::kDma)) {
    return absl::InvalidArgumentError(absl::StrCat(
        WaitVerb(kind), " on ", Name(), ": ", DescribeSemaphore(sem),
        dma_wait ? " is not a DMA semaphore"
                 : " is a DMA semaphore; wait on it through its copy "
                   "descriptor (wait_send / wait_recv)"));
  }
  if (value < 0 || (!dma_wait && value == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(WaitVerb(kind), " on ", Name(), ": value ", value, " for ",
                     DescribeSemaphore(sem), " must be >= 1"));
  }
  if (value == 0) return absl::OkStatus();  // A zero-byte DMA.
  Observer* obs = runtime_->observer();
  if (obs) {
    obs->OnWaitBegin(
        global_index_, kind, sem, value,
        CellAt(sem.heap_offset())->count.load(std::memory_order_relaxed));
  }
  absl::Status s = WaitCell(CellAt(sem.heap_offset()), value, kind, sem);
  if (s.ok()) {
    if (RaceChecker* rc = runtime_->race_checker()) {
      rc->OnWaitEnd(global_index_, sem.heap_offset());
    }
  }
  if (obs) obs->OnWaitEnd(global_index_, kind, sem, value, s.ok());
  return s;
}

absl::Status Device::WaitCell(SemaphoreCell* cell, int64_t value, WaitKind kind,
                              Semaphore sem) {
  if (CellTryConsume(cell, value)) return absl::OkStatus();
  // Copies still queued (very likely the one being waited for) are run here
  // first: a wait right after start() then costs what an eager copy costs.
  // Messages to other hosts in flight are progressed between the chunks.
  CopyEngine* engine = runtime_->copy_engine();
  if (engine != nullptr) {
    while (engine->HelpOnce()) {
      if (CellTryConsume(cell, value)) return absl::OkStatus();
      if (runtime_->RemotePending()) runtime_->PollRemote();
    }
  }
  // Slow path: spin, progressing the MPI path from this thread while
  // spinning, then sleep; a sleeping waiter is counted so that the MPI
  // progress thread polls for it.
  // Deadlines use the monotonic clock; an infinite wait timeout never expires.
  const int64_t start = base_internal::MonotonicNanos();
  // Oversubscribed, each turn yields the core: here, or inside the poll of
  // the transport to other processes where that yields when idle (MPI under
  // Open MPI's mpi_yield_when_idle). Yielding in both doubled the context
  // switches per turn: on 2 x 2 simulated hosts on 2 cores an 8-byte
  // ppermute between hosts took 8.4-9.3 us against 4.2-6.2 us
  // (`mpirun -np 4 --oversubscribe -x MESHDMA_HOSTS=2 meshdma-bench
  // --collective ppermute_call -b 8 -e 4K -f 8`).
  const bool yield =
      runtime_->oversubscribed() && !runtime_->RemotePollYields();
  // The spin ends after `spin_ns` in which the transport to other processes
  // moved nothing: a wait whose bytes keep arriving (a stream of puts from
  // another host) is not idle, and sleeping in it handed every later put to
  // the progress thread and its wake-ups (`mpirun -np 2 --mca btl self,tcp
  // -x MESHDMA_FORCE_INTERHOST=1 meshdma-bench-kv --seq_max 1024`). It ends at
  // the wait timeout, or once the launch is aborted, whatever moves.
  const int64_t spin_ns = runtime_->semaphore_spin_ns();
  const int64_t timeout_ns =
      runtime_->wait_timeout() == absl::InfiniteDuration()
          ? std::numeric_limits<int64_t>::max()
          : absl::ToInt64Nanoseconds(runtime_->wait_timeout());
  int64_t idle_since = start;
  bool moved = false;
  for (int i = 0;; ++i) {
    if (yield) {
      std::this_thread::yield();
    } else {
      CpuRelax();
    }
    if (CellTryConsume(cell, value)) return absl::OkStatus();
    if (runtime_->PollRemote()) {
      if (CellTryConsume(cell, value)) return absl::OkStatus();
      moved = true;
    }
    // Pure spinning: yielding here was measured to push waits past the spin
    // window into futex sleeps, whose wake-up costs tens of microseconds on
    // a virtual machine (32 KiB between threads: 53 us against 2.6 us).
    if ((i & 63) == 63) {
      const int64_t now = base_internal::MonotonicNanos();
      if (moved) idle_since = now;
      moved = false;
      if (now - idle_since > spin_ns || now - start > timeout_ns ||
          runtime_->aborted()) {
        break;
      }
    }
  }
  runtime_->waiting_devices().fetch_add(1, std::memory_order_relaxed);
  struct Unregister {
    std::atomic<int>& count;
    ~Unregister() { count.fetch_sub(1, std::memory_order_relaxed); }
  } unregister{runtime_->waiting_devices()};
  {
    std::lock_guard<std::mutex> lock(blocked_mu_);
    blocked_on_ = absl::StrCat(WaitVerb(kind), " on ", DescribeSemaphore(sem),
                               " for ", value);
    blocked_verb_ = WaitVerb(kind);
    blocked_sem_ = sem;
    blocked_value_ = value;
  }
  // A wait blocked for half the timeout publishes this process's state, so
  // that whichever process times out first can see it.
  bool published = false;
  const int64_t publish_after =
      runtime_->wait_timeout() == absl::InfiniteDuration()
          ? std::numeric_limits<int64_t>::max()
          : absl::ToInt64Nanoseconds(runtime_->wait_timeout() / 2);
  auto clear_blocked = [this] {
    std::lock_guard<std::mutex> lock(blocked_mu_);
    blocked_on_.clear();
  };
  const base_internal::Deadline deadline(start, runtime_->wait_timeout());
  for (;;) {
    if (CellTryConsume(cell, value)) {
      clear_blocked();
      return absl::OkStatus();
    }
    if (runtime_->aborted()) {
      clear_blocked();
      return absl::AbortedError(absl::StrCat(
          WaitVerb(kind), " on ", Name(), " for ", DescribeSemaphore(sem),
          " abandoned: ", runtime_->abort_reason()));
    }
    if (engine != nullptr && engine->HelpOnce()) continue;
    if (!published && base_internal::MonotonicNanos() - start > publish_after) {
      published = true;
      runtime_->PublishHangState();
    }
    const int64_t left = deadline.RemainingNanos();
    if (left == 0) {
      absl::Status s = TimeoutError(cell, value, kind, sem, start);
      clear_blocked();
      return s;
    }
    // While messages to or from other hosts are in flight, keep progressing
    // them here rather than sleeping: MPI moves a large message only while
    // somebody polls.
    if (runtime_->PollRemote() || runtime_->RemotePending()) {
      CpuRelax();
      continue;
    }
    runtime_->RemoteDeviceSleeping();
    CellSleep(cell, value, std::min(kSleepSliceNanos, left));
  }
}

void Device::CopyLocal(const ArrayRef& src, const ArrayRef& dst) {
  // Pieces of 256 KiB: measured against 1 MiB pieces and one copy with
  // `meshdma-bench --collective all_gather|all_to_all -b 64K -e 16M -f 4`
  // between hosts over TCP: a copy that does not poll stalls the transfer
  // for its length (in place, without the copy, a 16 MiB all_gather took
  // 2.3 ms against 3.9 ms out of place).
  constexpr int64_t kPieceBytes = 256 << 10;
  const int64_t bytes = src.size_bytes();
  const bool pieces = bytes > kPieceBytes && runtime_->RemotePending();
  if (src.is_contiguous() && dst.is_contiguous()) {
    const bool disjoint =
        dst.data() + bytes <= src.data() || src.data() + bytes <= dst.data();
    if (!pieces || !disjoint) {
      std::memmove(dst.data(), src.data(), bytes);
      return;
    }
    for (int64_t done = 0; done < bytes; done += kPieceBytes) {
      std::memcpy(dst.data() + done, src.data() + done,
                  std::min(kPieceBytes, bytes - done));
      runtime_->PollRemote();
    }
    return;
  }
  const CopyPlan plan(ViewLayout::Of(src), ViewLayout::Of(dst),
                      static_cast<int64_t>(DTypeSize(src.dtype())));
  const int64_t n = pieces ? plan.NumChunks(kPieceBytes) : 1;
  for (int64_t i = 0; i < n; ++i) {
    plan.CopyChunk(src.data(), dst.data(), i, n);
    if (pieces) runtime_->PollRemote();
  }
}

bool Device::FlaggedReaches(int target_global) const {
  return runtime_->race_checker() == nullptr &&
         runtime_->HeapBase(target_global) != nullptr;
}

bool Device::SharesAddressSpace(int target_global) const {
  return runtime_->race_checker() == nullptr &&
         runtime_->IsLocalDevice(target_global);
}

absl::StatusOr<std::byte*> Device::PeerAddress(const ArrayRef& view,
                                               int target_global,
                                               absl::string_view verb) const {
  if (!view.is_symmetric()) {
    return absl::InvalidArgumentError(absl::StrCat(
        verb, " on ", Name(), ": ", view.ToString(),
        " is not in the symmetric heap; only symmetric memory has an address "
        "on a peer"));
  }
  MESHDMA_RETURN_IF_ERROR(CheckHeapView(view, "view", verb));
  if (target_global != global_index_ && !FlaggedReaches(target_global)) {
    return absl::FailedPreconditionError(absl::StrCat(
        verb, " on ", Name(), ": device ", target_global,
        " cannot be reached by loads and stores from this process (another "
        "host, or checked mode is on); use a DMA"));
  }
  return runtime_->HeapBase(target_global) + view.heap_offset();
}

absl::StatusOr<uint64_t*> Device::FlaggedDestination(
    const ArrayRef& words, int64_t count, uint32_t flag,
    std::optional<int> target_global) const {
  const char* verb = target_global ? "flagged_copy" : "flagged_wait";
  auto error = [&](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat(verb, " on ", Name(), ": ", parts...));
  };
  if (flag == 0) return error("flag 0 is reserved (memory starts as 0)");
  const std::optional<int64_t> bytes =
      base_internal::CheckedMul(count, int64_t{sizeof(uint64_t)});
  if (!words.is_symmetric() || !words.is_contiguous() ||
      words.data() != heap_base_ + words.heap_offset() ||
      words.heap_offset() % sizeof(uint64_t) != 0) {
    return error("buffer ", words.ToString(),
                 " is not a contiguous, 8-byte aligned view of this device's "
                 "symmetric heap");
  }
  if (!bytes.has_value() || *bytes > words.size_bytes() ||
      words.heap_offset() < kReservedHeapBytes ||
      words.heap_offset() + words.size_bytes() > heap_bytes_) {
    return error("buffer ", words.ToString(), " holds ", words.size_bytes(),
                 " bytes, fewer than the ", count,
                 " flagged words the message needs");
  }
  const int target = target_global.value_or(global_index_);
  if (target != global_index_ && !FlaggedReaches(target)) {
    return absl::FailedPreconditionError(absl::StrCat(
        verb, " on ", Name(), ": device ", target,
        " cannot be reached by stores from this process (another host, or "
        "checked mode is on); use a DMA"));
  }
  return reinterpret_cast<uint64_t*>(runtime_->HeapBase(target) +
                                     words.heap_offset());
}

template <typename Ready, typename Timeout>
absl::Status Device::SpinUntil(absl::string_view verb, const ArrayRef& view,
                               Ready ready, Timeout timeout_detail) {
  // Most waits end within a few polls: the clock is first read after 1024
  // of them, where the spin window and the deadline start.
  int64_t start = -1;
  std::optional<base_internal::Deadline> deadline;
  const bool yield = runtime_->oversubscribed();
  for (int i = 0;; ++i) {
    if (ready()) return absl::OkStatus();
    if (yield) {
      std::this_thread::yield();
    } else {
      CpuRelax();
    }
    if ((i & 1023) != 1023) continue;
    if (start < 0) {
      start = base_internal::MonotonicNanos();
      deadline.emplace(start, runtime_->wait_timeout());
    }
    if (runtime_->aborted()) {
      return absl::AbortedError(
          absl::StrCat(verb, " on ", Name(), " for ", view.ToString(),
                       " abandoned: ", runtime_->abort_reason()));
    }
    if (deadline->RemainingNanos() == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(verb, " on ", Name(), " timed out after ",
                       absl::FormatDuration(runtime_->wait_timeout()), ": ",
                       timeout_detail()));
    }
    // Past the spin window, give the core to the writer (2 cores may be
    // shared by more threads than that).
    if (base_internal::MonotonicNanos() - start > runtime_->spin_ns()) {
      std::this_thread::yield();
    }
  }
}

absl::Status Device::WaitFlags(const uint64_t* words, int64_t count,
                               uint32_t flag, const ArrayRef& view) {
  auto carries_flag = [&](int64_t w) {
    return static_cast<uint32_t>(__atomic_load_n(words + w, __ATOMIC_ACQUIRE) >>
                                 32) == flag;
  };
  // Often every word is already there: no clock is read then.
  bool all = true;
  for (int64_t k = count; k-- > 0 && all;) all = carries_flag(k);
  if (all) return absl::OkStatus();
  // The last word first: a sender stores in order, so polling it (and not
  // each word as it is written) keeps the cache lines from bouncing between
  // the two cores; the others are then checked, normally at once.
  for (int64_t k = 0; k < count; ++k) {
    const int64_t w = k == 0 ? count - 1 : k - 1;
    if (carries_flag(w)) continue;
    MESHDMA_RETURN_IF_ERROR(SpinUntil(
        "flagged_wait", view, [&] { return carries_flag(w); },
        [&] {
          return absl::StrCat(
              "word ", w, " of ", view.ToString(), " carries flag ",
              __atomic_load_n(words + w, __ATOMIC_ACQUIRE) >> 32, ", expected ",
              flag);
        }));
  }
  return absl::OkStatus();
}

absl::Status Device::WaitCounter(const uint64_t* counter, uint64_t value,
                                 const ArrayRef& view) {
  auto reached = [&] {
    return __atomic_load_n(counter, __ATOMIC_ACQUIRE) >= value;
  };
  if (reached()) return absl::OkStatus();
  return SpinUntil("counter_wait", view, reached, [&] {
    return absl::StrCat(view.ToString(), " holds ",
                        __atomic_load_n(counter, __ATOMIC_ACQUIRE),
                        ", expected >= ", value);
  });
}

absl::Status Device::TimeoutError(SemaphoreCell* cell, int64_t value,
                                  WaitKind kind, Semaphore sem,
                                  int64_t since_ns) {
  const std::string mesh = runtime_->MeshHangReport(global_index_, since_ns);
  return absl::DeadlineExceededError(absl::StrCat(
      WaitVerb(kind), " on ", Name(), " timed out after ",
      absl::FormatDuration(runtime_->wait_timeout()), " on ",
      DescribeSemaphore(sem), ": expected >= ", value, ", current ",
      cell->count.load(),
      ". DMAs in flight from this device: ", DescribeInflight(),
      ". Local devices:\n", runtime_->DescribeLocalDevices(),
      mesh.empty() ? "\n(the mesh-wide report is printed by the process that "
                     "timed out first)"
                   : absl::StrCat("\n", mesh)));
}

std::string Device::BlockedOn() {
  std::lock_guard<std::mutex> lock(blocked_mu_);
  return blocked_on_.empty() ? "running (not blocked)" : blocked_on_;
}

std::string Device::SemaphoreName(Semaphore sem) const {
  const int64_t off = sem.heap_offset();
  std::string name;
  auto find_in = [&](const std::vector<SemaphoreRecord>& records) {
    for (const SemaphoreRecord& rec : records) {
      const int64_t end = rec.offset + rec.count * kSemaphoreBytes;
      if (off >= rec.offset && off < end) {
        name = rec.count == 1
                   ? absl::StrCat("'", rec.name, "' ")
                   : absl::StrCat("'", rec.name, "'[",
                                  (off - rec.offset) / kSemaphoreBytes, "] ");
      }
    }
  };
  for (const Scope& scope : scopes_) find_in(scope.semaphores);
  find_in(persistent_semaphores_);
  if (off >= kBarrierCellsOffset && off < kCollectiveCellsOffset) {
    name =
        absl::StrCat("'device barrier round ",
                     (off - kBarrierCellsOffset) / kSemaphoreBytes / 2, "' ");
  } else if (off >= kCollectiveCellsOffset && off < kReservedHeapBytes) {
    name = absl::StrCat("'collective id ",
                        (off - kCollectiveCellsOffset) / kSemaphoreBytes, "' ");
  }
  return absl::StrCat(name, SemaphoreTypeName(sem.type()), " semaphore @", off);
}

std::string Device::DescribeSemaphore(Semaphore sem) const {
  return absl::StrCat(
      SemaphoreName(sem), " (count ",
      CellAt(sem.heap_offset())->count.load(std::memory_order_relaxed), ")");
}

// --- Barrier
// ------------------------------------------------------------------

namespace {

// 30 bits of an allocation hash: two of them fit in one barrier signal.
constexpr int kFingerprintBits = 30;
constexpr uint64_t kFingerprintMask = (uint64_t{1} << kFingerprintBits) - 1;

uint64_t Fingerprint(uint64_t hash) {
  return (hash ^ (hash >> kFingerprintBits) ^ (hash >> 2 * kFingerprintBits)) &
         kFingerprintMask;
}

}  // namespace

absl::Status Device::Barrier() {
  MESHDMA_ASSIGN_OR_RETURN(const bool same, BarrierComparing(std::nullopt));
  if (same) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "device barrier on ", Name(),
      ": another device of the mesh entered a collective's kernel, which "
      "compares its call at entry, while this one entered a device barrier "
      "or a kernel's entry barrier; every device must make the same calls"));
}

absl::StatusOr<bool> Device::BarrierComparing(std::optional<uint64_t> value) {
  MESHDMA_ASSIGN_OR_RETURN(const Mesh* mesh, this->mesh());
  if (mesh->size() > (1 << kMaxBarrierRounds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("device barrier on ", Name(), ": mesh of ", mesh->size(),
                     " devices exceeds 2^", kMaxBarrierRounds));
  }
  const uint64_t allocations = Fingerprint(allocations_.hash());
  // The value, mixed with the allocations (a multiply-xorshift round, so
  // that values differing in any bit land on different fingerprints).
  uint64_t lo = allocations;
  if (value.has_value()) {
    uint64_t mixed = (allocations_.hash() ^ *value) * 0x9E3779B97F4A7C15ull;
    mixed ^= mixed >> 29;
    lo = Fingerprint(mixed * 0xBF58476D1CE4E5B9ull);
  }
  uint64_t hi = lo;
  MESHDMA_RETURN_IF_ERROR(Disseminate(*mesh, &lo, &hi));
  if (lo == hi) return true;
  // Every device has seen the mismatch, but some may still wait for the
  // signals that tell them. A second barrier compares the allocations
  // alone: every device learns whether they or the values differ.
  uint64_t alo = allocations, ahi = allocations;
  absl::Status again = Disseminate(*mesh, &alo, &ahi);
  if (!again.ok()) return again;  // Another device failed first.
  // A third before anyone fails: a device leaving it knows that every
  // device has left the second, so the failure this mismatch causes (on
  // this device or another, a plain barrier meeting a compare, say) aborts
  // no device still waiting to learn its answer. An abort during it, from
  // such a failure, changes no answer.
  uint64_t done_lo = 0, done_hi = 0;
  Disseminate(*mesh, &done_lo, &done_hi).IgnoreError();
  if (alo != ahi) return AllocationMismatch(*mesh);
  return false;
}

absl::Status Device::Disseminate(const Mesh& mesh, uint64_t* lo, uint64_t* hi) {
  const int n = mesh.size();
  // Dissemination: in round k signal device (me + 2^k) mod n, wait for the
  // signal of device (me - 2^k) mod n. A partner can run at most one
  // barrier ahead (it cannot leave that one before this device arrives), so
  // alternate barriers use separate cells and each cell holds at most one
  // signal. The signal is 1 + (lo << 30 | hi): the least and greatest
  // allocation fingerprints the sender has seen; after the last round every
  // device has seen every fingerprint (min and max are idempotent), so all
  // agree on whether they differ.
  const int set = static_cast<int>(barrier_epoch_++ & 1);
  in_device_barrier_ = true;
  struct Leave {
    bool& flag;
    ~Leave() { flag = false; }
  } leave{in_device_barrier_};
  for (int k = 0, dist = 1; dist < n; ++k, dist *= 2) {
    const Semaphore sem(kBarrierCellsOffset + (2 * k + set) * kSemaphoreBytes,
                        SemaphoreType::kBarrier);
    MESHDMA_ASSIGN_OR_RETURN(int peer,
                             mesh.GlobalDevice((logical_id_ + dist) % n));
    const int64_t carried =
        static_cast<int64_t>((*lo << kFingerprintBits) | *hi);
    MESHDMA_RETURN_IF_ERROR(Signal(sem, 1 + carried, peer));
    // The signal arrives as one atomic add: wait for any of it, then take
    // the rest.
    MESHDMA_RETURN_IF_ERROR(Wait(sem, 1, WaitKind::kBarrier));
    MESHDMA_ASSIGN_OR_RETURN(int64_t rest, Read(sem));
    if (rest > 0) MESHDMA_RETURN_IF_ERROR(Wait(sem, rest, WaitKind::kBarrier));
    *lo = std::min(*lo, static_cast<uint64_t>(rest) >> kFingerprintBits);
    *hi = std::max(*hi, static_cast<uint64_t>(rest) & kFingerprintMask);
  }
  return absl::OkStatus();
}

absl::Status Device::AllocationMismatch(const Mesh& mesh) const {
  // Every device has left the barrier's waits behind it, so their
  // allocations happened before this read. Name a device of this process
  // whose sequence differs, when there is one.
  const std::vector<AllocationRecord> mine = allocations_.Snapshot();
  std::string detail;
  for (int logical = 0; logical < mesh.size() && detail.empty(); ++logical) {
    const Device* peer =
        runtime_->LocalDevice(mesh.GlobalDevice(logical).value_or(-1));
    if (peer == nullptr || peer == this ||
        peer->allocations_.hash() == allocations_.hash()) {
      continue;
    }
    detail = AllocationLog::DescribeDifference(
        mine, allocations_.count(), Name(), peer->allocations_.Snapshot(),
        peer->allocations_.count(), peer->Name());
  }
  if (detail.empty()) {
    // The other sequence is in another process: list this one's latest.
    std::vector<std::string> latest;
    for (size_t i = mine.size() > 4 ? mine.size() - 4 : 0; i < mine.size();
         ++i) {
      latest.push_back(absl::StrCat("allocation #", mine[i].index, " is ",
                                    mine[i].ToString()));
    }
    detail = absl::StrCat(
        "a device of another process made a different sequence; ", Name(),
        " made ", allocations_.count(), " allocations, the latest: ",
        latest.empty() ? std::string("none") : absl::StrJoin(latest, "; "));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "symmetric allocations differ across mesh ", mesh.ToString(),
      " (found by the device barrier on ", Name(), "): ", detail,
      ". Every device must make the same sequence of symmetric allocations, "
      "so that the k-th has the same heap offset everywhere"));
}

}  // namespace meshdma::dma_internal
