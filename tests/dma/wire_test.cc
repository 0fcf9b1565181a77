// The checks a receiver makes of a message that crossed processes
// (dma/transport/wire.h), against a heap of known size: every put and signal
// inside it is resolved to the right address, and everything outside it, or
// malformed, is refused with a reason naming the ranks, the device and the
// offending field.
#include "meshdma/dma/transport/wire.h"

#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshdma::dma_internal {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kHeapBytes = 1 << 16;

// One local device (1) with a heap; device 0 lives on another host.
class FakeHost : public TransportHost {
 public:
  FakeHost() : heap_(kHeapBytes) {}
  std::byte* HeapBase(int global_device) const override {
    return global_device == 1 ? const_cast<std::byte*>(heap_.data()) : nullptr;
  }
  int64_t heap_bytes() const override { return kHeapBytes; }
  int RankOf(int global_device) const override { return global_device; }
  bool IsLocalDevice(int global_device) const override {
    return global_device == 1;
  }
  void CompleteDma(std::unique_ptr<DmaOp>) override {}
  void AbandonDma(std::unique_ptr<DmaOp>) override {}
  void Abort(const std::string&, bool) override {}
  bool DevicesWaiting() const override { return false; }
  bool RemotePeers() const override { return true; }
  absl::Duration wait_timeout() const override { return absl::Seconds(1); }
  absl::Duration shutdown_timeout() const override { return absl::Seconds(1); }
  bool aborted() const override { return false; }
  std::byte* heap() { return heap_.data(); }

 private:
  std::vector<std::byte> heap_;
};

WireHeader Put(int64_t dst_offset, int64_t bytes, int32_t elem_bytes = 4) {
  WireHeader h{};
  h.kind = WireKind::kPut;
  h.dst_device = 1;
  h.dst_offset = dst_offset;
  h.sem_offset = 64;
  h.value = bytes;
  h.elem_bytes = elem_bytes;
  return h;
}

TEST(WireTest, ContiguousPutResolvesInsideTheHeap) {
  FakeHost host;
  const WireHeader h = Put(4096, 1024);
  absl::StatusOr<WireTarget> t = ResolveWireTarget(host, 1, 0, h, nullptr);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dst, host.heap() + 4096);
  EXPECT_EQ(reinterpret_cast<std::byte*>(t->cell), host.heap() + 64);
  EXPECT_EQ(t->dst_layout.rank, 1);
  EXPECT_EQ(t->dst_layout.shape[0], 256);
  EXPECT_EQ(t->dst_layout.byte_strides[0], 4);
  // The last byte of the heap is inside; one more is not.
  EXPECT_TRUE(
      ResolveWireTarget(host, 1, 0, Put(kHeapBytes - 1024, 1024), nullptr)
          .ok());
  absl::StatusOr<WireTarget> past =
      ResolveWireTarget(host, 1, 0, Put(kHeapBytes - 1020, 1024), nullptr);
  ASSERT_FALSE(past.ok());
  EXPECT_THAT(past.status().message(),
              HasSubstr("rank 1 received from rank 0 a message for device 1 "
                        "writing 1024 bytes at offset 64516"));
}

TEST(WireTest, StridedPutChecksItsWholeExtent) {
  FakeHost host;
  // 4 rows of 8 floats, 4 KiB apart: the extent ends 3 * 4096 + 32 bytes on.
  ViewLayout v;
  v.rank = 2;
  v.shape = {4, 8};
  v.byte_strides = {4096, 4};
  WireHeader h = Put(0, 4 * 8 * 4);
  h.has_layout = 1;
  EXPECT_TRUE(ResolveWireTarget(host, 1, 0, h, &v).ok());
  h.dst_offset = kHeapBytes - 3 * 4096 - 31;  // The last row runs 1 B past.
  EXPECT_FALSE(ResolveWireTarget(host, 1, 0, h, &v).ok());
  // A layout that does not hold the bytes sent is malformed.
  h.dst_offset = 0;
  h.value = 4 * 8 * 4 + 4;
  absl::StatusOr<WireTarget> t = ResolveWireTarget(host, 1, 0, h, &v);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("a malformed put (132 bytes"));
}

TEST(WireTest, EveryBadFieldIsRefusedByName) {
  FakeHost host;
  WireHeader h = Put(0, 64);
  h.dst_device = 0;  // Not held here.
  EXPECT_THAT(ResolveWireTarget(host, 1, 0, h, nullptr).status().message(),
              HasSubstr("a message for device 0, which it does not hold"));
  h = Put(-8, 64);
  EXPECT_FALSE(ResolveWireTarget(host, 1, 0, h, nullptr).ok());
  h = Put(0, 64);
  h.sem_offset = kHeapBytes;  // The semaphore cell lies past the heap.
  EXPECT_THAT(ResolveWireTarget(host, 1, 0, h, nullptr).status().message(),
              HasSubstr("semaphore at 65536"));
  h = Put(0, 64, /*elem_bytes=*/32);
  EXPECT_FALSE(ResolveWireTarget(host, 1, 0, h, nullptr).ok());
  h = Put(0, -64);
  EXPECT_FALSE(ResolveWireTarget(host, 1, 0, h, nullptr).ok());
  h = Put(0, 64);
  h.kind = static_cast<WireKind>(99);
  EXPECT_THAT(ResolveWireTarget(host, 1, 0, h, nullptr).status().message(),
              HasSubstr("of unknown kind 99"));
  // Half a cell inside the heap.
  WireHeader s = SignalHeader(/*target_device=*/1, kHeapBytes - 4, 1);
  EXPECT_THAT(ResolveWireTarget(host, 1, 0, s, nullptr).status().message(),
              HasSubstr("signalling a semaphore at offset 65532"));
  s.dst_offset = 128;
  absl::StatusOr<WireTarget> t = ResolveWireTarget(host, 1, 0, s, nullptr);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(reinterpret_cast<std::byte*>(t->cell), host.heap() + 128);
}

TEST(WireTest, ExtrasAreCountedOrRefused) {
  WireHeader h = Put(0, 64);
  EXPECT_EQ(WireExtrasBytes(h), 0);
  h.has_layout = 1;
  h.check_words = 3;
  EXPECT_EQ(WireExtrasBytes(h),
            static_cast<int64_t>(sizeof(ViewLayout) + 3 * sizeof(uint32_t)));
  h.has_layout = 2;
  EXPECT_EQ(WireExtrasBytes(h), -1);
  h.has_layout = 0;
  h.check_words = -1;
  EXPECT_EQ(WireExtrasBytes(h), -1);
  h.check_words = 1 << 24;  // More clock words than any mesh has devices.
  EXPECT_EQ(WireExtrasBytes(h), -1);
}

TEST(WireTest, PutHeaderCarriesTheOp) {
  DmaOp op;
  op.event.src_device = 3;
  op.event.dst_device = 5;
  op.event.bytes = 96;
  op.event.recv_sem = 256;
  op.dst_heap_offset = 8192;
  op.elem_bytes = 2;
  op.check_seq = 7;
  const WireHeader h = PutHeader(op);
  EXPECT_EQ(h.kind, WireKind::kPut);
  EXPECT_EQ(h.src_device, 3);
  EXPECT_EQ(h.dst_device, 5);
  EXPECT_EQ(h.value, 96);
  EXPECT_EQ(h.sem_offset, 256);
  EXPECT_EQ(h.dst_offset, 8192);
  EXPECT_EQ(h.elem_bytes, 2);
  EXPECT_EQ(h.check_seq, 7u);
  EXPECT_EQ(h.has_layout, 0);
  EXPECT_EQ(h.inline_bytes, 0);
}

}  // namespace
}  // namespace meshdma::dma_internal
