#include "meshdma/dma/runtime.h"

#include "meshdma/base/status_macros.h"
#include "meshdma/dma/internal/device.h"
#include "meshdma/dma/internal/runtime_impl.h"

namespace meshdma {

Runtime::Runtime(std::unique_ptr<dma_internal::RuntimeImpl> impl)
    : impl_(std::move(impl)) {}
Runtime::~Runtime() = default;

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create(
    RuntimeOptions options) {
  MESHDMA_ASSIGN_OR_RETURN(
      auto impl, dma_internal::RuntimeImpl::Create(std::move(options)));
  return std::unique_ptr<Runtime>(new Runtime(std::move(impl)));
}

const Launch& Runtime::launch() const { return impl_->launch(); }
ProcessGroup& Runtime::processes() const { return impl_->processes(); }
const HostTopology& Runtime::topology() const { return impl_->topology(); }
int Runtime::num_local_devices() const { return impl_->num_local_devices(); }
int Runtime::num_devices() const { return impl_->launch().num_devices(); }
DmaMode Runtime::dma_mode() const { return impl_->dma_mode(); }
std::string Runtime::remote_transport() const {
  return impl_->remote_transport_name();
}
std::string Runtime::tcp_congestion() const { return impl_->tcp_congestion(); }
int64_t Runtime::heap_bytes() const { return impl_->heap_bytes(); }
absl::Duration Runtime::wait_timeout() const { return impl_->wait_timeout(); }
int64_t Runtime::mpi_pieced_bytes(int rank) const {
  return impl_->mpi_limits(rank).pieced_bytes;
}
int64_t Runtime::mpi_piece_bytes(int rank) const {
  return impl_->mpi_limits(rank).piece_bytes;
}
int64_t Runtime::mpi_fast_bytes(int rank) const {
  return impl_->mpi_limits(rank).fast_bytes;
}
bool Runtime::oversubscribed() const { return impl_->oversubscribed(); }

absl::StatusOr<Mesh> Runtime::MakeMesh(std::vector<Mesh::Axis> axes) const {
  std::vector<int> devices(num_devices());
  for (int i = 0; i < num_devices(); ++i) devices[i] = i;
  return Mesh::Create(std::move(axes), std::move(devices));
}

absl::StatusOr<Mesh> Runtime::MakeMesh1D(std::string axis) const {
  return MakeMesh({{std::move(axis), num_devices()}});
}

absl::Status Runtime::Run(const Mesh& mesh, std::function<absl::Status()> fn) {
  return impl_->Run(mesh, std::move(fn));
}

absl::Status Runtime::Shutdown() { return impl_->Shutdown(); }

absl::StatusOr<int> axis_index(std::string_view axis) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("axis_index"));
  MESHDMA_ASSIGN_OR_RETURN(const Mesh* mesh, d->mesh());
  return mesh->axis_index(d->logical_id(), axis);
}

absl::StatusOr<int> axis_size(std::string_view axis) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("axis_size"));
  MESHDMA_ASSIGN_OR_RETURN(const Mesh* mesh, d->mesh());
  return mesh->axis_size(axis);
}

absl::StatusOr<const Mesh*> current_mesh() {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("current_mesh"));
  return d->mesh();
}

absl::StatusOr<int> logical_device_id() {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("logical_device_id"));
  return d->logical_id();
}

absl::StatusOr<int> global_device_id() {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("global_device_id"));
  return d->global_index();
}

absl::StatusOr<bool> run_failed() {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("run_failed"));
  return d->runtime()->aborted();
}

}  // namespace meshdma
