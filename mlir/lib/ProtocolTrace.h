// The traces meshdma-verify-protocol builds (one per device) and the checks
// that run on them after the joint run: data races and the entry race.
// Internal to mlir/lib.
#ifndef MESHDMA_MLIR_LIB_PROTOCOLTRACE_H_
#define MESHDMA_MLIR_LIB_PROTOCOLTRACE_H_

#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "meshdma_mlir/MeshDma.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Operation.h"

namespace meshdma::ir {

// Slot 0 of every device is the barrier semaphore; sem_alloc k is slot k+1.
constexpr int kBarrierSlot = 0;
// Local (non-symmetric) buffers have roots from here on.
constexpr int kLocalRootBase = 1 << 28;

enum class EvKind : uint8_t {
  kDmaStart,    // credits `send_slot` here (remote) and `slot` on `target`
  kSignal,      // credits `slot` on `target` by `amount`
  kWait,        // consumes `amount` from local `slot`
  kWaitRecv,    // consumes `amount` bytes from local DMA `slot`
  kWaitSend,    // same, on the send side
  kBarrier,     // device barrier over the whole mesh
  kCollective,  // a runtime collective over a group of the mesh
};

struct Event {
  EvKind kind;
  int32_t slot = -1;
  int32_t send_slot = -1;
  int32_t target = -1;
  int64_t amount = 0;
  mlir::Operation* op = nullptr;
  // kDmaStart: the trace's accesses of its source and its target.
  int32_t read_access = -1;
  int32_t write_access = -1;
};

// A read or write of bytes of one buffer in one device's memory. A local
// access (the device's own code) happens between events `pos - 1` and `pos`
// of its device. A DMA's accesses (its source read on the issuer, its target
// write on the target) start with event `pos`, the dma_start, and last until
// a wait observes the DMA's completion.
struct Access {
  int32_t pos;
  int32_t owner;  // the device whose memory is accessed
  int32_t root;   // the buffer: allocation index, -(argument + 1), or local
  bool write;
  bool dma;
  mlir::Operation* op;      // the access (for a DMA, the dma_start)
  mlir::Operation* origin;  // the buffer's allocation; nullptr: an argument
  llvm::SmallVector<std::pair<int64_t, int64_t>, 1> bytes;  // [lo, hi), sorted
};

struct AllocRecord {
  bool is_semaphore;
  SemaphoreKind kind;
  mlir::Type type;  // buffers
  mlir::Operation* op;
};

struct CollectiveRecord {
  mlir::Operation* op;
  std::vector<int> members;  // group, in group order (includes this device)
};

struct Trace {
  std::vector<Event> events;
  std::vector<Access> accesses;  // in program order
  std::vector<AllocRecord> allocs;
  std::vector<CollectiveRecord> collectives;
  int num_slots = 1;
};

// The checks of happens-before over every schedule the semaphore counts
// allow, for `calls` back-to-back calls of the kernel (ProtocolRaces.cpp):
// with `entry_race`, no device pushes into a device that has not entered
// the call; and no two accesses of the same bytes of one device's memory,
// at least one a write, are unordered. The traces must run to completion
// (the joint run found no deadlock). On failure an error has been emitted
// on the kernel's ops. `steps` grows by the events the check executed.
// ProtocolRaces.cpp; it first tries ProvedByClocks.
mlir::LogicalResult CheckOrdering(mlir::func::FuncOp kernel,
                                  const std::vector<Trace>& traces, int calls,
                                  bool entry_race, int64_t& steps);

// Per chain (target device, slot, issuing device), in issue order: whether
// each credit is known to land after the one before it.
using ChainOrder = llvm::DenseMap<std::tuple<int, int, int>, std::vector<char>>;

// The fast, sound, incomplete proof of the same (ProtocolClocks.cpp): true
// when it proves there is no race; false proves nothing, and `order` gets
// what it learned of the chains' order. Emits nothing.
bool ProvedByClocks(const std::vector<Trace>& traces, int calls,
                    bool entry_race, int64_t& steps, ChainOrder* order);

}  // namespace meshdma::ir

#endif  // MESHDMA_MLIR_LIB_PROTOCOLTRACE_H_
