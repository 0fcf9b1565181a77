// Fuzzes the C ABI's enum and handle arguments (meshdma/dma/c_api.h): inside
// a kernel on one device, semaphore handles with arbitrary offsets and types,
// semaphore types, dtypes, ranks and shapes of allocations, reduction ops,
// axis names, mesh coordinates, ppermute pairs and all_to_all axes. Every
// call must return 0 or an absl::StatusCode with a message, never crash
// (ASan and UBSan watch) or hang: a value outside its enum is rejected at the
// entry, a handle is accepted only where it names a live semaphore, and a
// read returns what the accepted signals and waits left. The kernel's
// semaphores are balanced before it closes, so that the Run must succeed.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
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
    // An accepted wait on a semaphore nobody signals fails fast.
    o.wait_timeout = absl::Milliseconds(1);
    auto created = meshdma::Runtime::Create(o);
    if (!created.ok()) abort();
    return created->release();
  }();
  return rt;
}

// A non-zero code must come with a message.
void Expect(int code) {
  const char* message = meshdma_last_error();
  if (code != 0 && (message == nullptr || message[0] == '\0')) abort();
  if (code < 0 || code > 16) abort();  // Not an absl::StatusCode.
}

// Mostly a value near the enum's range, sometimes any value.
int32_t EnumValue(FuzzedDataProvider& in, int32_t last) {
  return in.ConsumeBool() ? in.ConsumeIntegralInRange<int32_t>(-2, last + 2)
                          : in.ConsumeIntegral<int32_t>();
}

// A handle: one of the kernel's semaphores, shifted or retyped, or any
// offset.
meshdma_semaphore FuzzedSemaphore(FuzzedDataProvider& in,
                                  const meshdma_semaphore& mine) {
  meshdma_semaphore s = mine;
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      break;  // The live handle itself.
    case 1:
      s.heap_offset += in.ConsumeIntegralInRange<int64_t>(-64, 64);
      break;
    case 2:
      s.heap_offset = in.ConsumeIntegralInRange<int64_t>(-8, (1 << 20) + 8);
      break;
    default:
      s.heap_offset = in.ConsumeIntegral<int64_t>();
  }
  if (in.ConsumeBool()) s.type = EnumValue(in, MESHDMA_SEMAPHORE_BARRIER);
  return s;
}

// Axis names: the mesh's own, another, an empty or malformed list.
std::string FuzzedAxes(FuzzedDataProvider& in) {
  static const char* const kAxes[] = {"x", "y", "", "x,x", "x,", ",", "x,y"};
  return in.ConsumeBool() ? kAxes[in.ConsumeIntegralInRange<int>(0, 6)]
                          : in.ConsumeRandomLengthString(8);
}

// Semaphore verbs on fuzzed handles, inside a kernel. Accepted signals and
// waits are counted per handle, and balanced before the kernel closes.
void FuzzSemaphores(FuzzedDataProvider& in, const meshdma_semaphore& regular) {
  std::vector<meshdma_semaphore> live = {regular};
  std::map<std::pair<int64_t, int32_t>, int64_t> net;
  for (int step = 0; step < 8 && in.remaining_bytes() > 0; ++step) {
    const meshdma_semaphore sem = FuzzedSemaphore(
        in, live[in.ConsumeIntegralInRange<size_t>(0, live.size() - 1)]);
    int64_t& count = net[{sem.heap_offset, sem.type}];
    switch (in.ConsumeIntegralInRange<int>(0, 3)) {
      case 0: {
        meshdma_semaphore out{};
        const int code = meshdma_allocate_semaphore(
            EnumValue(in, MESHDMA_SEMAPHORE_BARRIER), &out);
        Expect(code);
        if (code == 0) live.push_back(out);
        break;
      }
      case 1: {
        const int64_t inc = in.ConsumeIntegralInRange<int64_t>(-2, 3);
        const int code = meshdma_semaphore_signal(sem, inc);
        Expect(code);
        if (code == 0) count += inc;
        break;
      }
      case 2: {
        const int64_t value = in.ConsumeIntegralInRange<int64_t>(-2, 3);
        const int code = meshdma_semaphore_wait(sem, value);
        Expect(code);
        if (code == 0) count -= value;
        break;
      }
      default: {
        int64_t value = 0;
        const int code = meshdma_semaphore_read(sem, &value);
        Expect(code);
        // Not what was signalled (a BARRIER semaphore outlives its calls,
        // as in Pallas: the collectives' signals may be pending in it).
        if (code == 0 && sem.type != MESHDMA_SEMAPHORE_BARRIER &&
            value != count) {
          abort();
        }
      }
    }
  }
  for (const auto& [handle, count] : net) {
    if (count < 0) abort();  // A wait consumed more than was signalled.
    if (count > 0 &&
        meshdma_semaphore_wait({handle.first, handle.second}, count) != 0) {
      abort();
    }
  }
}

// Enum, index and name arguments of the allocation, mesh and collective
// calls, outside any kernel.
void FuzzCalls(FuzzedDataProvider& in, const meshdma_view& buf) {
  for (int step = 0; step < 8 && in.remaining_bytes() > 0; ++step) {
    const std::string axes = FuzzedAxes(in);
    switch (in.ConsumeIntegralInRange<int>(0, 4)) {
      case 0: {
        int64_t shape[6];
        for (int64_t& d : shape) d = in.ConsumeIntegralInRange<int64_t>(-1, 8);
        meshdma_view out{};
        Expect(meshdma_allocate_symmetric(EnumValue(in, 6), EnumValue(in, 6),
                                          shape, &out));
        break;
      }
      case 1: {
        int32_t coords[3] = {in.ConsumeIntegralInRange<int32_t>(-2, 2),
                             in.ConsumeIntegralInRange<int32_t>(-2, 2),
                             in.ConsumeIntegralInRange<int32_t>(-2, 2)};
        int32_t id = 0;
        Expect(meshdma_mesh_device_id(
            coords, in.ConsumeIntegralInRange<int32_t>(-1, 3), &id));
        int32_t size = 0;
        Expect(meshdma_axis_size(axes.c_str(), &size));
        break;
      }
      case 2: {
        const int32_t op = EnumValue(in, 3);
        Expect(in.ConsumeBool()
                   ? meshdma_all_reduce(op, &buf, &buf, axes.c_str())
                   : meshdma_reduce_scatter(op, &buf, &buf, axes.c_str()));
        break;
      }
      case 3: {
        int64_t pairs[4];
        for (int64_t& p : pairs) p = in.ConsumeIntegralInRange<int64_t>(-1, 2);
        Expect(meshdma_ppermute(&buf, &buf, axes.c_str(), pairs,
                                in.ConsumeIntegralInRange<int32_t>(-1, 2)));
        break;
      }
      default:
        Expect(meshdma_all_to_all(&buf, &buf, axes.c_str(), EnumValue(in, 1),
                                  EnumValue(in, 1)));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  meshdma::Runtime* rt = TheRuntime();
  FuzzedDataProvider in(data, size);
  absl::Status s = rt->Run(*rt->MakeMesh1D(), [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(auto buf, meshdma::AllocateSymmetric<float>({16}));
    meshdma_view view{};
    view.data = buf.data();
    view.heap_offset = buf.heap_offset();
    view.dtype = static_cast<int32_t>(meshdma::DType::kF32);
    view.rank = 1;
    view.shape[0] = 16;
    view.strides[0] = 1;
    MESHDMA_RETURN_IF_ERROR(meshdma::RunKernel(
        {.name = "fuzz", .collective_id = 0}, [&]() -> absl::Status {
          meshdma_semaphore regular;
          if (meshdma_allocate_semaphore(MESHDMA_SEMAPHORE_REGULAR, &regular) !=
              0) {
            return absl::InternalError(meshdma_last_error());
          }
          FuzzSemaphores(in, regular);
          return absl::OkStatus();
        }));
    FuzzCalls(in, view);
    return absl::OkStatus();
  });
  if (!s.ok()) abort();
  return 0;
}
