// A device of this process: its identity and the mesh context of the
// current `Runtime::Run`. The verbs are defined by concern beside it:
// device_allocation.cc (allocation over device_heap.h, scopes, semaphore
// checks), device_dma.cc (DMA
// issue and in-flight tracking), device_semaphores.cc (signals and waits),
// device_barrier.cc, device_peer_memory.cc (peer views, flagged copies) and
// device_recovery.cc (hang state, reset after a failed Run). Every DMA,
// signal and wait of the runtime is performed in them, and reported to the
// runtime's `Observer` there.
#include "meshdma/dma/internal/device.h"

#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/internal/runtime_impl.h"

namespace meshdma::dma_internal {
namespace {

thread_local Device* tls_device = nullptr;

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
      heap_(
          absl::StrCat("device ", global_index, " (rank ",
                       runtime->launch().rank(), ", local ", local_index, ")"),
          heap_base, heap_bytes),
      hang_notes_(runtime->launch().num_devices()) {
  NewDmaEpoch();
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
  call_note()->BeginRun(runtime_->run_generation());
  heap_.ResetLog();
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

}  // namespace meshdma::dma_internal
