// Fuzzes the C ABI's views (meshdma/dma/c_api.h): inside a kernel on one
// device, views of the symmetric heap with arbitrary offsets, shapes, strides,
// dtypes and ranks are passed to the copy entry points. Every view the library
// accepts must lie in the heap (ASan reports any copy outside it); views of
// ordinary memory are kept inside their buffer, since the library cannot know
// its bounds.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/c_api.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"

namespace {

meshdma::Runtime* TheRuntime() {
  static meshdma::Runtime* rt = [] {
    meshdma::RuntimeOptions o;
    o.heap_bytes = 1 << 20;
    o.launch.devices_per_process = 1;
    auto created = meshdma::Runtime::Create(o);
    if (!created.ok()) abort();
    return created->release();
  }();
  return rt;
}

meshdma_view FuzzedView(FuzzedDataProvider& in, std::byte* heap_base,
                        int64_t heap_bytes) {
  meshdma_view v{};
  v.rank = in.ConsumeIntegralInRange<int32_t>(-1, 7);
  v.dtype = in.ConsumeIntegralInRange<int32_t>(-1, 8);
  for (int i = 0; i < 6; ++i) {
    v.shape[i] = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(-1, 16)
                                  : in.ConsumeIntegral<int64_t>();
    v.strides[i] = in.ConsumeBool()
                       ? in.ConsumeIntegralInRange<int64_t>(-64, 64)
                       : in.ConsumeIntegral<int64_t>();
  }
  v.heap_offset = in.ConsumeBool()
                      ? in.ConsumeIntegralInRange<int64_t>(-1, heap_bytes + 64)
                      : in.ConsumeIntegral<int64_t>();
  // Mostly the matching address (the case the heap checks guard), sometimes
  // another one.
  // As an address: the offset may lie anywhere.
  v.data =
      in.ConsumeIntegralInRange<int>(0, 7) != 0
          ? reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(heap_base) +
                                    static_cast<uintptr_t>(v.heap_offset))
          : static_cast<void*>(heap_base);
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  meshdma::Runtime* rt = TheRuntime();
  FuzzedDataProvider in(data, size);
  absl::Status s = rt->Run(*rt->MakeMesh1D(), [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(auto buf,
                             meshdma::AllocateSymmetric<float>({4096}));
    std::byte* heap_base = buf.data() - buf.heap_offset();
    return meshdma::RunKernel({.name = "fuzz"}, [&]() -> absl::Status {
      meshdma_semaphore send, recv;
      if (meshdma_allocate_semaphore(MESHDMA_SEMAPHORE_DMA, &send) != 0 ||
          meshdma_allocate_semaphore(MESHDMA_SEMAPHORE_DMA, &recv) != 0) {
        return absl::InternalError(meshdma_last_error());
      }
      const int64_t heap_bytes = buf.heap_offset() + buf.size_bytes();
      const meshdma_view src = FuzzedView(in, heap_base, heap_bytes);
      const meshdma_view dst = FuzzedView(in, heap_base, heap_bytes);
      int64_t bytes = 0;
      if (src.rank >= 0 && src.rank <= 6 && src.dtype >= 0 && src.dtype <= 6) {
        bytes = static_cast<int64_t>(
            meshdma::DTypeSize(static_cast<meshdma::DType>(src.dtype)));
        // Only used when the library accepted the view, whose size then
        // fits; for the others, saturate instead of overflowing.
        for (int i = 0; i < src.rank; ++i) {
          if (__builtin_mul_overflow(bytes, src.shape[i], &bytes)) bytes = -1;
        }
      }
      if (in.ConsumeBool()) {
        if (meshdma_async_copy_start(&src, &dst, recv) == 0) {
          if (meshdma_dma_wait_recv(recv, bytes) != 0) abort();
        }
      } else if (meshdma_async_remote_copy_start(&src, &dst, send, recv, 0) ==
                 0) {
        if (meshdma_dma_wait_send(send, bytes) != 0 ||
            meshdma_dma_wait_recv(recv, bytes) != 0) {
          abort();
        }
      }
      return absl::OkStatus();
    });
  });
  if (!s.ok()) abort();
  return 0;
}
