#include "meshdma/dma/transport/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace meshdma::dma_internal {
namespace {

// Names this process created and has not unlinked yet, removed at exit.
std::mutex& NamesMutex() {
  static std::mutex mu;
  return mu;
}
std::set<std::string>& PendingNames() {
  static auto* names = new std::set<std::string>();
  return *names;
}
void UnlinkPendingAtExit() {
  std::lock_guard<std::mutex> lock(NamesMutex());
  for (const std::string& n : PendingNames()) shm_unlink(n.c_str());
  PendingNames().clear();
}

absl::Status Errno(absl::string_view what, const std::string& name) {
  return absl::InternalError(absl::StrCat(what, " of shared-memory segment ",
                                          name, ": ", std::strerror(errno)));
}

absl::StatusOr<std::byte*> Map(int fd, size_t bytes, const std::string& name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) return Errno("mmap", name);
  return static_cast<std::byte*>(p);
}

}  // namespace

std::string ShmSegment::NameFor(uint64_t job_tag, int rank) {
  return absl::StrFormat("/meshdma-%016x-%d", job_tag, rank);
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(std::string name,
                                                               size_t bytes) {
  static const bool registered = [] {
    std::atexit(UnlinkPendingAtExit);
    return true;
  }();
  (void)registered;
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, S_IRUSR | S_IWUSR);
  if (fd < 0) return Errno("shm_open(create)", name);
  {
    std::lock_guard<std::mutex> lock(NamesMutex());
    PendingNames().insert(name);
  }
  auto fail = [&](absl::Status s) {
    close(fd);
    shm_unlink(name.c_str());
    std::lock_guard<std::mutex> lock(NamesMutex());
    PendingNames().erase(name);
    return s;
  };
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    return fail(Errno(absl::StrCat("ftruncate to ", bytes, " bytes"), name));
  }
  auto data = Map(fd, bytes, name);
  if (!data.ok()) return fail(data.status());
  close(fd);
  return std::unique_ptr<ShmSegment>(
      new ShmSegment(std::move(name), *data, bytes, /*owner=*/true));
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Open(std::string name,
                                                             size_t bytes) {
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return Errno("shm_open(open)", name);
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    return absl::InternalError(absl::StrCat(
        "shared-memory segment ", name, " is ", st.st_size, " bytes, expected ",
        bytes, " (do all processes use the same heap size?)"));
  }
  auto data = Map(fd, bytes, name);
  close(fd);
  if (!data.ok()) return data.status();
  return std::unique_ptr<ShmSegment>(
      new ShmSegment(std::move(name), *data, bytes, /*owner=*/false));
}

void ShmSegment::Unlink() {
  if (!owner_ || unlinked_) return;
  shm_unlink(name_.c_str());
  unlinked_ = true;
  std::lock_guard<std::mutex> lock(NamesMutex());
  PendingNames().erase(name_);
}

ShmSegment::~ShmSegment() {
  Unlink();
  munmap(data_, size_);
}

}  // namespace meshdma::dma_internal
