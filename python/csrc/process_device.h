// This process's meshdma device. meshdma runs one runtime per process, so
// one DeviceServer serves everything of a process: the launch's, started by
// the first meshdma process group and shared by every group, or, for
// kernels called outside any group (`torch.ops.meshdma.*`), one of this
// process alone, which a process group's start replaces.
#ifndef MESHDMA_PYTHON_CSRC_PROCESS_DEVICE_H_
#define MESHDMA_PYTHON_CSRC_PROCESS_DEVICE_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "python/csrc/device_server.h"

namespace meshdma::torch_backend {

// The launch's device while a process group holds it, else null.
std::shared_ptr<DeviceServer> LaunchDevice();

// The launch's device, or, when none is alive, the one `start` starts (after
// the process's own device, if any, has stopped).
absl::StatusOr<std::shared_ptr<DeviceServer>> LaunchDeviceOrStart(
    const std::function<absl::StatusOr<std::shared_ptr<DeviceServer>>()>&
        start);

// The device kernels run on: the launch's, else this process's own (started
// on first use, kept until a process group starts).
absl::StatusOr<std::shared_ptr<DeviceServer>> KernelDevice();

}  // namespace meshdma::torch_backend

#endif  // MESHDMA_PYTHON_CSRC_PROCESS_DEVICE_H_
