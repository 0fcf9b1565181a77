#include "python/csrc/process_device.h"

#include <chrono>
#include <mutex>
#include <thread>

namespace meshdma::torch_backend {
namespace {

std::mutex g_mu;
// Held by the process groups: gone with the last one.
std::weak_ptr<DeviceServer> g_launch;
// Held here until a process group starts.
std::shared_ptr<DeviceServer> g_alone;

// Stops the process's own device. Callers holding it are kernels in flight
// (each holds it for one call): wait for them, since the runtime must be
// gone before another starts.
void StopAloneLocked() {
  if (g_alone == nullptr) return;
  while (g_alone.use_count() > 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  g_alone.reset();
}

}  // namespace

std::shared_ptr<DeviceServer> LaunchDevice() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_launch.lock();
}

absl::StatusOr<std::shared_ptr<DeviceServer>> LaunchDeviceOrStart(
    const std::function<absl::StatusOr<std::shared_ptr<DeviceServer>>()>&
        start) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (std::shared_ptr<DeviceServer> alive = g_launch.lock()) return alive;
  StopAloneLocked();
  absl::StatusOr<std::shared_ptr<DeviceServer>> started = start();
  if (started.ok()) g_launch = *started;
  return started;
}

absl::StatusOr<std::shared_ptr<DeviceServer>> KernelDevice() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (std::shared_ptr<DeviceServer> launch = g_launch.lock()) return launch;
  if (g_alone == nullptr) {
    absl::StatusOr<std::shared_ptr<DeviceServer>> started =
        DeviceServer::StartAlone({});
    if (!started.ok()) return started.status();
    g_alone = *started;
  }
  return g_alone;
}

}  // namespace meshdma::torch_backend
