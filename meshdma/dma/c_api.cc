#include "meshdma/dma/c_api.h"

#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include "meshdma/base/checked_math.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/internal/c_api_internal.h"
#include "meshdma/dma/internal/device.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"

namespace {

thread_local std::string last_error;

int Report(const absl::Status& s) {
  if (s.ok()) return 0;
  last_error = std::string(s.message());
  return static_cast<int>(s.code());
}

template <typename T>
int Report(const absl::StatusOr<T>& s, T* out) {
  if (!s.ok()) return Report(s.status());
  if (out == nullptr) return Report(absl::InvalidArgumentError("null output"));
  *out = *s;
  return 0;
}

absl::StatusOr<meshdma::Semaphore> ToSemaphore(meshdma_semaphore s) {
  if (s.type < MESHDMA_SEMAPHORE_REGULAR ||
      s.type > MESHDMA_SEMAPHORE_BARRIER) {
    return absl::InvalidArgumentError("meshdma_semaphore: unknown type " +
                                      std::to_string(s.type));
  }
  return meshdma::Semaphore(s.heap_offset,
                            static_cast<meshdma::SemaphoreType>(s.type));
}

// True when the byte at `addr` is mapped, readable memory of this process.
// A mapping alone is not enough: a reserved (PROT_NONE) range, such as a
// sanitizer's shadow, is mapped too. Where process_vm_readv is refused (a
// seccomp filter), the mapping check stands alone.
bool Mapped(uintptr_t addr) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  if (msync(reinterpret_cast<void*>(addr & ~(page - 1)), 1, MS_ASYNC) != 0) {
    return false;
  }
  char byte;
  iovec local{&byte, 1};
  iovec remote{reinterpret_cast<void*>(addr), 1};
  if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == 1) return true;
  return errno != EFAULT;
}

// A C caller's strides are not trusted: the bytes a view spans must lie in
// the calling device's heap (symmetric views) or, for other memory, start
// and end in mapped pages, so that a stride of -2^40 is an error and not a
// copy into whatever lies there.
absl::Status CheckSpan(const meshdma_view& v, const meshdma::ArrayRef& ref,
                       int64_t heap_offset, const char* operand) {
  const auto extent = meshdma::base_internal::CheckedByteExtent(
      ref.shape(), ref.strides(),
      static_cast<int64_t>(meshdma::DTypeSize(ref.dtype())));
  if (!extent.has_value() || extent->lo == extent->hi) return absl::OkStatus();
  const std::string what = std::string(operand) + ": view with strides {" +
                           [&] {
                             std::string s;
                             for (int d = 0; d < v.rank; ++d) {
                               if (d > 0) s += ",";
                               s += std::to_string(v.strides[d]);
                             }
                             return s;
                           }() +
                           "} spans bytes [" + std::to_string(extent->lo) +
                           ", " + std::to_string(extent->hi) +
                           ") around element 0";
  if (heap_offset >= 0) {
    meshdma::dma_internal::Device* d = meshdma::dma_internal::CurrentDevice();
    const int64_t heap = d == nullptr ? 0 : d->heap_bytes();
    if (heap_offset + extent->lo < 0 || extent->hi > heap - heap_offset) {
      return absl::InvalidArgumentError(
          what + ", outside the " + std::to_string(heap) +
          "-byte symmetric heap from heap_offset " +
          std::to_string(heap_offset));
    }
    return absl::OkStatus();
  }
  const uintptr_t base = reinterpret_cast<uintptr_t>(v.data);
  const uintptr_t first = base + static_cast<uintptr_t>(extent->lo);
  const uintptr_t last = base + static_cast<uintptr_t>(extent->hi - 1);
  if ((extent->lo < 0 && first > base) || last < base || !Mapped(first) ||
      !Mapped(last)) {
    return absl::InvalidArgumentError(what +
                                      ", which is not mapped memory of this "
                                      "process");
  }
  return absl::OkStatus();
}

}  // namespace

namespace meshdma::dma_internal {

absl::StatusOr<meshdma::ArrayRef> ViewToArrayRef(const meshdma_view* v,
                                                 const char* operand) {
  if (v == nullptr) {
    return absl::InvalidArgumentError(std::string("null view for ") + operand);
  }
  if (v->rank < 0 || v->rank > 6 || v->dtype < 0 ||
      v->dtype > static_cast<int>(meshdma::DType::kF64)) {
    return absl::InvalidArgumentError(std::string("bad rank or dtype in ") +
                                      operand);
  }
  const std::span<const int64_t> shape(v->shape, v->rank);
  const std::span<const int64_t> strides(v->strides, v->rank);
  const auto dtype = static_cast<meshdma::DType>(v->dtype);
  // MESHDMA_HEAP_OFFSET_RESOLVE: the view is symmetric if `data` lies in this
  // device's heap (compared as integers).
  int64_t heap_offset = v->heap_offset;
  if (heap_offset == MESHDMA_HEAP_OFFSET_RESOLVE) {
    meshdma::dma_internal::Device* d = meshdma::dma_internal::CurrentDevice();
    const uintptr_t p = reinterpret_cast<uintptr_t>(v->data);
    const uintptr_t base =
        d == nullptr ? 0 : reinterpret_cast<uintptr_t>(d->heap_base());
    heap_offset = d != nullptr && p >= base &&
                          p - base < static_cast<uint64_t>(d->heap_bytes())
                      ? static_cast<int64_t>(p - base)
                      : -1;
  }
  // The view's sizes are checked by ArrayRef (they must fit in int64); a
  // symmetric view is checked against the heap when a DMA starts.
  absl::StatusOr<meshdma::ArrayRef> ref;
  if (heap_offset < 0) {
    ref = meshdma::ArrayRef::FromPointer(v->data, dtype, shape, strides);
  } else {
    meshdma::dma_internal::Device* d = meshdma::dma_internal::CurrentDevice();
    // Compared as integers: `heap_base() + heap_offset` may lie outside any
    // object.
    if (d == nullptr || reinterpret_cast<uintptr_t>(v->data) -
                                reinterpret_cast<uintptr_t>(d->heap_base()) !=
                            static_cast<uint64_t>(heap_offset)) {
      return absl::InvalidArgumentError(
          std::string(operand) + ": heap_offset " +
          std::to_string(heap_offset) +
          " does not match data on the calling device");
    }
    ref = meshdma::ArrayRef::SymmetricStrided(
        static_cast<std::byte*>(v->data), heap_offset, dtype, shape, strides);
  }
  if (!ref.ok()) {
    return absl::Status(
        ref.status().code(),
        std::string(operand) + ": " + std::string(ref.status().message()));
  }
  MESHDMA_RETURN_IF_ERROR(CheckSpan(*v, *ref, heap_offset, operand));
  return ref;
}

int ReportStatus(const absl::Status& s) { return Report(s); }

}  // namespace meshdma::dma_internal

namespace {
using meshdma::dma_internal::ViewToArrayRef;
}  // namespace

extern "C" {

const char* meshdma_last_error(void) { return last_error.c_str(); }

int meshdma_logical_device_id(int32_t* out) {
  auto s = meshdma::logical_device_id();
  return Report(s.ok() ? absl::StatusOr<int32_t>(*s)
                       : absl::StatusOr<int32_t>(s.status()),
                out);
}

int meshdma_axis_index(const char* axis, int32_t* out) {
  auto s = meshdma::axis_index(axis == nullptr ? "" : axis);
  return Report(s.ok() ? absl::StatusOr<int32_t>(*s)
                       : absl::StatusOr<int32_t>(s.status()),
                out);
}

int meshdma_axis_size(const char* axis, int32_t* out) {
  auto s = meshdma::axis_size(axis == nullptr ? "" : axis);
  return Report(s.ok() ? absl::StatusOr<int32_t>(*s)
                       : absl::StatusOr<int32_t>(s.status()),
                out);
}

int meshdma_allocate_semaphore(int32_t type, meshdma_semaphore* out) {
  auto t = ToSemaphore({0, type});
  if (!t.ok()) return Report(t.status());
  auto s = meshdma::AllocateSemaphore(t->type());
  if (!s.ok()) return Report(s.status());
  if (out == nullptr) return Report(absl::InvalidArgumentError("null output"));
  *out = {s->heap_offset(), type};
  return 0;
}

int meshdma_semaphore_signal(meshdma_semaphore sem, int64_t inc) {
  auto s = ToSemaphore(sem);
  return Report(s.ok() ? meshdma::semaphore_signal(*s, inc) : s.status());
}

int meshdma_semaphore_signal_remote(meshdma_semaphore sem, int64_t inc,
                                    int32_t logical_device_id) {
  auto s = ToSemaphore(sem);
  return Report(s.ok() ? meshdma::semaphore_signal(
                             *s, inc,
                             meshdma::DeviceId(int64_t{logical_device_id}),
                             meshdma::DeviceIdType::kLogical)
                       : s.status());
}

int meshdma_semaphore_wait(meshdma_semaphore sem, int64_t value) {
  auto s = ToSemaphore(sem);
  return Report(s.ok() ? meshdma::semaphore_wait(*s, value) : s.status());
}

int meshdma_semaphore_read(meshdma_semaphore sem, int64_t* out) {
  auto s = ToSemaphore(sem);
  if (!s.ok()) return Report(s.status());
  auto v = meshdma::semaphore_read(*s);
  return Report(v.ok() ? absl::StatusOr<int64_t>(*v) : v.status(), out);
}

int meshdma_async_copy_start(const meshdma_view* src, const meshdma_view* dst,
                             meshdma_semaphore sem) {
  auto s = ViewToArrayRef(src, "src");
  auto d = ViewToArrayRef(dst, "dst");
  auto m = ToSemaphore(sem);
  if (!s.ok()) return Report(s.status());
  if (!d.ok()) return Report(d.status());
  if (!m.ok()) return Report(m.status());
  return Report(meshdma::make_async_copy(*s, *d, *m).start());
}

int meshdma_async_remote_copy_start(const meshdma_view* src,
                                    const meshdma_view* dst,
                                    meshdma_semaphore send_sem,
                                    meshdma_semaphore recv_sem,
                                    int32_t logical_device_id) {
  auto s = ViewToArrayRef(src, "src");
  auto d = ViewToArrayRef(dst, "dst");
  auto ss = ToSemaphore(send_sem);
  auto rs = ToSemaphore(recv_sem);
  if (!s.ok()) return Report(s.status());
  if (!d.ok()) return Report(d.status());
  if (!ss.ok()) return Report(ss.status());
  if (!rs.ok()) return Report(rs.status());
  return Report(meshdma::make_async_remote_copy(
                    *s, *d, *ss, *rs,
                    meshdma::DeviceId(int64_t{logical_device_id}),
                    meshdma::DeviceIdType::kLogical)
                    .start());
}

int meshdma_dma_wait_send(meshdma_semaphore send_sem, int64_t bytes) {
  auto s = ToSemaphore(send_sem);
  if (!s.ok()) return Report(s.status());
  auto d = meshdma::dma_internal::RequireDevice("meshdma_dma_wait_send");
  if (!d.ok()) return Report(d.status());
  return Report((*d)->Wait(*s, bytes, meshdma::WaitKind::kDmaSend));
}

int meshdma_dma_wait_recv(meshdma_semaphore recv_sem, int64_t bytes) {
  auto s = ToSemaphore(recv_sem);
  if (!s.ok()) return Report(s.status());
  auto d = meshdma::dma_internal::RequireDevice("meshdma_dma_wait_recv");
  if (!d.ok()) return Report(d.status());
  return Report((*d)->Wait(*s, bytes, meshdma::WaitKind::kDmaRecv));
}

int meshdma_device_barrier(void) { return Report(meshdma::device_barrier()); }

int meshdma_get_barrier_semaphore(meshdma_semaphore* out) {
  auto s = meshdma::get_barrier_semaphore();
  if (!s.ok()) return Report(s.status());
  if (out == nullptr) return Report(absl::InvalidArgumentError("null output"));
  *out = {s->heap_offset(), MESHDMA_SEMAPHORE_BARRIER};
  return 0;
}

int meshdma_allocate_symmetric(int32_t dtype, int32_t rank,
                               const int64_t* shape, meshdma_view* out) {
  if (rank < 0 || rank > 6 || dtype < 0 ||
      dtype > static_cast<int>(meshdma::DType::kF64) ||
      (rank > 0 && shape == nullptr) || out == nullptr) {
    return Report(absl::InvalidArgumentError(
        "meshdma_allocate_symmetric: bad dtype, rank, shape or output"));
  }
  auto a = meshdma::AllocateSymmetric(static_cast<meshdma::DType>(dtype),
                                      std::span<const int64_t>(shape, rank));
  if (!a.ok()) return Report(a.status());
  out->data = a->data();
  out->heap_offset = a->heap_offset();
  out->dtype = dtype;
  out->rank = rank;
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    out->shape[i] = shape[i];
    out->strides[i] = stride;
    stride *= shape[i];
  }
  return 0;
}

int meshdma_mesh_device_id(const int32_t* coords, int32_t n, int32_t* out) {
  auto mesh = meshdma::current_mesh();
  if (!mesh.ok()) return Report(mesh.status());
  if (n < 0 || (n > 0 && coords == nullptr) || out == nullptr)
    return Report(absl::InvalidArgumentError(
        "meshdma_mesh_device_id: bad coordinates or output"));
  std::vector<int64_t> c(coords, coords + n);
  auto id = (*mesh)->LogicalId(c);
  if (!id.ok()) return Report(id.status());
  *out = *id;
  return 0;
}

}  // extern "C"
