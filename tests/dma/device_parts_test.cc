// The device's own small parts, against values written out by hand: the
// in-flight list (what a closing scope drains and a hang report lists), the
// hang notes (what a device is blocked on and last sent to each device),
// and the verbs the wait policy names in errors.
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "meshdma/dma/internal/hang_notes.h"
#include "meshdma/dma/internal/inflight_dmas.h"
#include "meshdma/dma/internal/wait_policy.h"

namespace meshdma::dma_internal {
namespace {

std::unique_ptr<DmaOp> Op(uint64_t id, int dst, int64_t bytes, int64_t sem,
                          int depth) {
  auto op = std::make_unique<DmaOp>();
  op->event.id = id;
  op->event.dst_device = dst;
  op->event.bytes = bytes;
  op->event.recv_sem = sem;
  op->scope_depth = depth;
  return op;
}

absl::string_view PathTo(int device) { return device == 3 ? "tcp" : "shm"; }

TEST(InflightDmasTest, CountsAndDescribesByScopeDepth) {
  InflightDmas list;
  EXPECT_EQ(list.Count(0), 0u);
  EXPECT_EQ(list.Describe(0, PathTo), "none");
  auto a = Op(7, 3, 4096, 64, 0);
  auto b = Op(8, 1, 8, 128, 1);
  auto c = Op(9, 2, 16, 192, 2);
  list.Add(a.get());
  list.Add(b.get());
  list.Add(c.get());
  EXPECT_EQ(list.Count(0), 3u);
  EXPECT_EQ(list.Count(1), 2u);
  EXPECT_EQ(list.Count(3), 0u);
  EXPECT_EQ(list.Describe(2, PathTo),
            "#9 to device 2 (16 bytes, shm, recv_sem @192)");
  list.Remove(b.get());
  list.Remove(b.get());  // Not listed any more: no effect.
  EXPECT_EQ(list.Count(1), 1u);
  EXPECT_EQ(list.Describe(0, PathTo),
            "#7 to device 3 (4096 bytes, tcp, recv_sem @64), "
            "#9 to device 2 (16 bytes, shm, recv_sem @192)");
}

TEST(HangNotesTest, BlockedWaitAndLastSent) {
  HangNotes notes(4);
  EXPECT_EQ(notes.BlockedOn(), "running (not blocked)");
  notes.NoteSent(2, 640);
  const Semaphore sem(128, SemaphoreType::kBarrier);
  notes.Block(WaitVerb(WaitKind::kBarrier), sem, 10, "device barrier on x");
  EXPECT_EQ(notes.BlockedOn(), "device barrier on x");
  DeviceHangState s;
  notes.Fill(
      s, [](Semaphore m) { return "name@" + std::to_string(m.heap_offset()); },
      [](Semaphore m) { return m.heap_offset() / 2; });
  EXPECT_TRUE(s.waiting);
  EXPECT_EQ(s.verb, "device_barrier");  // One word on the hang board.
  EXPECT_EQ(s.sem_offset, 128);
  EXPECT_EQ(s.sem_name, "name@128");
  EXPECT_EQ(s.expected, 10);
  EXPECT_EQ(s.current, 64);
  EXPECT_EQ(s.last_sent_sem, (std::vector<int64_t>{-1, -1, 640, -1}));
  EXPECT_GT(s.last_sent_ns[2], 0);
  EXPECT_EQ(s.last_sent_ns[0], 0);

  notes.Unblock();
  DeviceHangState after;
  notes.Fill(
      after, [](Semaphore) { return std::string(); },
      [](Semaphore) { return int64_t{0}; });
  EXPECT_FALSE(after.waiting);
  EXPECT_EQ(after.last_sent_sem[2], 640);
  notes.Reset();
  notes.Fill(
      after, [](Semaphore) { return std::string(); },
      [](Semaphore) { return int64_t{0}; });
  EXPECT_EQ(after.last_sent_sem, (std::vector<int64_t>{-1, -1, -1, -1}));
}

TEST(WaitPolicyTest, VerbsNamedInErrors) {
  EXPECT_EQ(WaitVerb(WaitKind::kSemaphore), "semaphore_wait");
  EXPECT_EQ(WaitVerb(WaitKind::kDmaSend), "wait_send");
  EXPECT_EQ(WaitVerb(WaitKind::kDmaRecv), "wait_recv");
  EXPECT_EQ(WaitVerb(WaitKind::kBarrier), "device barrier");
}

}  // namespace
}  // namespace meshdma::dma_internal
